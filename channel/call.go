package channel

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/gobrpc/gobrpc/backup"
	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/errno"
	"github.com/gobrpc/gobrpc/internal/ctrl"
	"github.com/gobrpc/gobrpc/internal/timerq"
	"github.com/gobrpc/gobrpc/internal/transport"
	"github.com/gobrpc/gobrpc/loadbalancer"
	"github.com/gobrpc/gobrpc/rpcz"
)

// sender is where a call's attempts go: a Channel sends them over
// connections to servers, a SelectiveChannel to sub-channels. Everything
// else (deadline, retries, exclusion of tried servers, who wins, done) is
// the one state machine below, shared by both.
type sender interface {
	// prepare builds what every attempt sends (c.rq) from the caller's
	// Controller and request; nothing reads those for sending afterwards.
	prepare(c *call) (controller.Errno, string)
	// send issues attempt a, whose server is already selected. It reports
	// the outcome, now or later, with c.attach (what the attempt holds),
	// then c.claim + c.won for an answer, or c.onFailure. It must not wait
	// for a peer past the call's deadline.
	send(c *call, a *attempt)
	// release frees what an attempt held (its connection, its sub-call).
	// answered tells that the attempt completed normally, so a pooled
	// connection may be reused; otherwise it is abandoned.
	release(c *call, a *attempt, handle any, answered bool)
	// lb selects servers; nil for a single-server Channel.
	balancer() loadbalancer.LoadBalancer
	// ready reports whether send can start a without connecting (a
	// connection to its server is open and free).
	ready(a *attempt) bool
	// backupPolicy is the channel's backup policy (the options' or its
	// own rate-limited one); nil for none.
	backupPolicy() backup.Policy
	stats() *channelVars
	settings() *resolved
	closed() bool
	describe() string // where calls go, for error texts
}

// request is what a call sends, built once when the call starts (as brpc
// caches the serialized request): every attempt, retries and backup
// included, sends these bytes with its own correlation id, so an attempt
// issued after the RPC ended never reads the caller's Controller or
// request, which the caller may already be reusing.
type request struct {
	service, method string
	logID           int64
	hasLogID        bool
	requestCode     uint64
	hasRequestCode  bool
	compress        controller.CompressType
	checksumType    controller.ChecksumType
	checksum        []byte
	userFields      map[string]string // a copy of the Controller's, nil when empty
	// The call's rpcz span: sent so that the server's span joins the trace.
	traceID, spanID, parentSpanID int64

	// A Channel's frame body: the serialized (and compressed) message,
	// then a copy of the attachment.
	body    []byte
	msgLen  int
	bodyBuf *[]byte // pooled storage behind body, released once no attempt is being sent

	// h2:grpc: the request's headers (metadata included) and path.
	grpcHeader http.Header
	grpcPath   string

	// A SelectiveChannel hands copies of the request and the attachment
	// to its sub-calls, and each answers into a new message of respType;
	// they get the caller's context (its cancellation and trace).
	ctx      context.Context
	reqCopy  proto.Message
	attCopy  []byte
	respType protoreflect.MessageType
}

// call is the state machine of one RPC. Events (a response, a failed
// attempt, the deadline, a cancel, the backup timer) may race; mu orders
// them and ended makes exactly one of them the owner of completion. mu is
// never held across I/O. Once ended, nothing reads the caller's
// Controller, request or response: finish writes the results, then runs
// done.
type call struct {
	s    sender
	cntl *controller.Controller
	st   *ctrl.State
	md   protoreflect.MethodDescriptor
	req  proto.Message
	resp proto.Message
	done func()
	rq   request

	start          time.Time
	deadline       time.Time   // zero: none
	timeoutMs      int64       // the effective timeout, a context's deadline included; -1 for none
	stopCtx        func() bool // stops watching the caller's context
	maxRetry       int
	connectTimeout time.Duration

	policy      backup.Policy // the effective backup policy, nil for none
	backupDelay time.Duration // the effective backup delay, -1 for none
	// The deadline and the backup timers run on timerq's goroutine: the
	// backup leaves within tens of µs of its due time, and arming either
	// never wakes a thread (see timerq).
	backupTimer timerq.Timer
	timer       timerq.Timer
	timers      uint8 // which of them were started (timerDeadline, timerBackup)

	// resultsIn is released once the results are in the Controller,
	// finished once done has returned too (what Join and a synchronous
	// caller wait for).
	resultsIn sync.WaitGroup
	finished  sync.WaitGroup

	// readConn is the connection a synchronous caller reads its first
	// attempt's response from itself (see transport.ClientConn.ReadFor),
	// set by send on the caller's goroutine; over is set once the call
	// has ended, for that reader to stop.
	readConn *transport.ClientConn
	over     atomic.Bool
	// callerTrip is an h2:grpc first attempt's stream, left to a
	// synchronous caller to run (net/http's RoundTrip waits for the
	// answer) rather than to a goroutine of its own.
	callerTrip func()

	mu    sync.Mutex
	ended bool
	code  controller.Errno // how the call ended, once ended
	// grpcStatus is the last gRPC status a server answered, for
	// protocol/grpc.StatusOf.
	grpcStatus uint32
	nretry     int
	issuing    int // attempts being started; the request's body lives while > 0
	current    *attempt
	// unfinished are the earlier attempts once backups were sent: all may
	// still answer, and the first good answer wins (brpc's
	// _unfinished_call, which holds one: brpc sends one backup).
	unfinished    []*attempt
	unfinishedBuf [1]*attempt // storage for the usual single backup
	backupAtt     *attempt    // the first backup, nil until one is sent
	nbackups      int         // backups sent
	maxBackups    int         // 1, or what a controller.MultiBackupPolicy allows
	first         attempt     // the first attempt, allocated with the call
	winner        *attempt
	// With rpcz on, every attempt is kept for the span.
	trace    bool
	attempts []*attempt
	tried    triedServers
	errText  strings.Builder
	remote   net.Addr // the last server talked to
	local    net.Addr
}

// attempt is one send of the request to one server (or sub-channel) with
// its own correlation id. Its fields are guarded by call.mu.
type attempt struct {
	call   *call
	id     int64
	server *loadbalancer.Server // nil for a single-server Channel
	backup bool                 // the backup request: sent once the policy allowed it
	begin  time.Time
	// selected: the balancer picked a server (and "la" counts the attempt
	// in flight); such an attempt is fed back exactly once (fedBack).
	selected bool
	fedBack  bool
	// callerReads: sent from a synchronous caller's goroutine, which may
	// then read the response itself. noDial: sent from where a dial must
	// not wait (see issue).
	callerReads bool
	noDial      bool
	// For rpcz: when it ended and how.
	end       time.Time
	code      int32
	abandoned bool
	// What the sender needs to finish or abandon it; handed over exactly
	// once (see takeLocked).
	handle any
}

var nextCorrelationID atomic.Int64

// retryable is brpc's default retry policy (RpcRetryPolicy::DoRetry).
func retryable(code controller.Errno) bool {
	switch code {
	case controller.EFAILEDSOCKET, controller.EEOF, controller.EHOSTDOWN, controller.ELOGOFF,
		controller.ETIMEDOUT, controller.ELIMIT, controller.ENOENT, controller.EPIPE,
		controller.ECONNREFUSED, controller.ECONNRESET, controller.ENODATA,
		controller.EOVERCROWDED, controller.EH2RUNOUTSTREAMS:
		return true
	}
	return false
}

// triedServers is brpc's ExcludedServers: the servers this RPC already
// tried, at most 8, oldest evicted first.
type triedServers struct {
	list [8]*loadbalancer.Server
	n    int
	next int
}

func (t *triedServers) add(s *loadbalancer.Server) {
	if s == nil {
		return
	}
	if t.n > 0 && t.list[(t.next+7)%8] == s { // same as the last one
		return
	}
	t.list[t.next] = s
	t.next = (t.next + 1) % 8
	if t.n < 8 {
		t.n++
	}
}

// Contains implements loadbalancer.Excluded.
func (t *triedServers) Contains(s *loadbalancer.Server) bool {
	for i := 0; i < t.n; i++ {
		if t.list[i] == s {
			return true
		}
	}
	return false
}

func startCall(s sender, md protoreflect.MethodDescriptor, cntl *controller.Controller,
	req, resp proto.Message, done func()) {
	c := newCall(s, md, cntl, req, resp, done)
	st := c.st

	// c.mu is held until the call is set up, from before a StartCancel can
	// find it: no event can end it half-built.
	c.mu.Lock()
	prev, reused, canceled := claimController(st, c)
	if reused {
		c.mu.Unlock()
		refuseReuse(st, prev, done)
		return
	}
	c.begin(canceled)
}

// claimController makes call the Controller's call, unless the Controller
// serves another one (reused; prev is that one). canceled tells that
// StartCancel came first.
func claimController(st *ctrl.State, call ctrl.Call) (prev ctrl.Call, reused, canceled bool) {
	st.Mu.Lock()
	defer st.Mu.Unlock()
	prev, reused = st.Call, st.InUse
	st.InUse = true
	if !reused {
		st.Call = call
	}
	return prev, reused, st.CancelRequested
}

func newCall(s sender, md protoreflect.MethodDescriptor, cntl *controller.Controller,
	req, resp proto.Message, done func()) *call {
	c := &call{s: s, cntl: cntl, st: ctrl.Of(cntl), md: md, req: req, resp: resp, done: done,
		start: time.Now(), trace: rpcz.On()}
	c.resultsIn.Add(1)
	c.finished.Add(1)
	return c
}

// begin sets the call up and sends its first attempt; c.mu is held, and
// released here. A synchronous call returns once it has ended.
func (c *call) begin(canceled bool) {
	code, text := c.setUp(canceled)
	if code != 0 {
		c.ended = true
		c.errText.WriteString(text)
		c.mu.Unlock()
		c.finish(code)
		c.wait()
		return
	}
	first := c.newAttemptLocked()
	c.issuing++
	c.mu.Unlock()

	c.issue(first)
	c.wait()
}

// refuseReuse fails a call made with a Controller that served another
// call and was not Reset, as brpc does: results of the previous call must
// not be mixed with this one's. They are written once the previous call's
// are in, so the two never race.
func refuseReuse(st *ctrl.State, prev ctrl.Call, done func()) {
	switch p := prev.(type) {
	case *call:
		p.resultsIn.Wait() // at once unless that call is still in flight
	case *interceptedCall:
		p.resultsIn.Wait()
	}
	st.ErrorCode = int32(controller.EINVAL)
	st.ErrorText = errno.Text(errno.EINVAL, "Controller was used by another call; call Reset before reusing it")
	if done != nil {
		done() // before CallMethod returns, so that Join cannot miss it
	}
}

// wait holds a synchronous caller until the call has ended.
func (c *call) wait() {
	if c.done == nil {
		if conn := c.readConn; conn != nil {
			c.readConn = nil
			conn.ReadFor(&c.first)
		}
		if trip := c.callerTrip; trip != nil {
			c.callerTrip = nil
			trip()
		}
		c.finished.Wait()
	}
}

// Wait implements ctrl.Call (Controller.Join).
func (c *call) Wait() { c.finished.Wait() }

// setUp resolves the settings and prepares the request. It returns a
// non-zero code when the call cannot start. c.mu is held.
func (c *call) setUp(canceled bool) (controller.Errno, string) {
	if c.s == nil || c.s.closed() {
		return controller.EINVAL, errno.Text(errno.EINVAL, "Channel is not initialized or closed")
	}
	if canceled {
		return controller.ECANCELED, errno.Text(errno.ECANCELED, "RPC was canceled before it started")
	}
	if c.md == nil {
		return controller.EINVAL, errno.Text(errno.EINVAL, "nil method descriptor")
	}
	opts := c.s.settings()
	var set bool
	if c.timeoutMs, set = c.cntl.TimeoutMsSetting(); !set {
		c.timeoutMs = int64(opts.TimeoutMs)
	}
	if c.maxRetry, set = c.cntl.MaxRetrySetting(); !set {
		c.maxRetry = opts.MaxRetry
	}
	if c.timeoutMs >= 0 {
		c.deadline = c.start.Add(time.Duration(c.timeoutMs) * time.Millisecond)
	}
	ctx := c.cntl.Context()
	if err := ctx.Err(); err != nil {
		return contextErrno(ctx), errno.Text(contextErrno(ctx), "RPC's context was done before it started: "+err.Error())
	}
	if dl, ok := ctx.Deadline(); ok && (c.deadline.IsZero() || dl.Before(c.deadline)) {
		// The context's deadline caps the timeout, at its own precision.
		c.deadline = dl
		c.timeoutMs = max(0, int64((dl.Sub(c.start)+time.Millisecond-1)/time.Millisecond))
	}
	if opts.ConnectTimeoutMs > 0 {
		c.connectTimeout = time.Duration(opts.ConnectTimeoutMs) * time.Millisecond
	}
	cntl := c.cntl
	c.rq = request{
		service:      string(c.md.Parent().FullName()),
		method:       string(c.md.Name()),
		logID:        cntl.LogID(),
		hasLogID:     cntl.HasLogID(),
		compress:     cntl.RequestCompressType(),
		checksumType: cntl.RequestChecksumType(),
	}
	c.rq.requestCode, c.rq.hasRequestCode = cntl.RequestCode()
	if f := c.st.RequestUserFields; len(f) > 0 {
		c.rq.userFields = maps.Clone(f)
	}
	c.traceFrom(ctx)
	c.rq.ctx = ctx
	if code, text := c.s.prepare(c); code != 0 {
		return code, text
	}
	c.resolveBackup(opts)
	if !c.deadline.IsZero() {
		c.timers |= timerDeadline
		c.timer.Start(time.Until(c.deadline), deadlineSlack, false, fireTimeout, c)
	}
	if ctx.Done() != nil {
		c.stopCtx = context.AfterFunc(ctx, func() {
			code := contextErrno(ctx)
			c.endWith(code, errno.Text(code, "RPC was canceled by its context: "+ctx.Err().Error()))
		})
	}
	// A backup delay at or beyond the deadline never fires, as in brpc.
	if c.backupDelay >= 0 && (c.timeoutMs < 0 || c.backupDelay < time.Duration(c.timeoutMs)*time.Millisecond) {
		c.timers |= timerBackup
		// Inline: on timerq's goroutine, the backup is written as soon as
		// it wakes (a goroutine of its own could wait for a P); issue
		// dials on a goroutine of its own if it must.
		c.backupTimer.Start(c.backupDelay, 0, true, fireBackup, c)
	}
	return 0, ""
}

// contextErrno is how a call whose context is done ends: ERPCTIMEDOUT
// when its deadline passed, ECANCELED when it was canceled.
func contextErrno(ctx context.Context) controller.Errno {
	if ctx.Err() == context.DeadlineExceeded {
		return controller.ERPCTIMEDOUT
	}
	return controller.ECANCELED
}

// traceFrom places the call in rpcz's traces: a child of the span ctx
// carries (a server handler's cntl.Context()), else the root of a new
// trace when spans are being collected. The ids travel in the request
// meta, as brpc sends them.
func (c *call) traceFrom(ctx context.Context) {
	if parent, ok := ctrl.TraceOf(ctx); ok {
		c.rq.traceID, c.rq.parentSpanID, c.rq.spanID = parent.TraceID, parent.SpanID, rpcz.NewID()
	} else if c.trace {
		c.rq.traceID, c.rq.spanID = rpcz.NewID(), rpcz.NewID()
	}
}

// resolveBackup picks the backup policy and delay of this RPC. The
// Controller's settings beat the channel's; within a level a policy beats
// the ratio limit, which beats the plain delay. A policy's
// GetBackupRequestMs of -1 (a BackupDelayPolicy's ok false) inherits the
// delay of the level below it (the Controller's, else the channel's
// BackupRequestMs); another negative value disables the backup.
func (c *call) resolveBackup(opts *resolved) {
	ms, msSet := c.cntl.BackupRequestMsSetting()
	policy := c.cntl.BackupRequestPolicy()
	if policy == nil && !msSet {
		policy = c.s.backupPolicy()
	}
	if !msSet {
		ms = int64(opts.BackupRequestMs)
	}
	delay := time.Duration(-1)
	if ms >= 0 {
		delay = time.Duration(ms) * time.Millisecond
	}
	if dp, ok := policy.(controller.BackupDelayPolicy); ok {
		if d, ok := dp.BackupRequestDelay(c.cntl); ok {
			delay = max(d, 0)
		}
	} else if policy != nil {
		switch pm := policy.GetBackupRequestMs(c.cntl); {
		case pm >= 0:
			delay = time.Duration(pm) * time.Millisecond
		case pm != -1:
			delay = -1
		}
	}
	c.policy, c.backupDelay, c.maxBackups = policy, delay, 1
	if mp, ok := policy.(controller.MultiBackupPolicy); ok {
		c.maxBackups = max(mp.MaxBackupRequests(c.cntl), 1)
	}
}

// onBackupTimer sends the backup: the same request to another server
// (the same one when it is the only one), if a retry remains and the
// policy allows. A veto or no retry left keeps the call waiting for its
// first attempt; the deadline stays armed either way. The policy is asked
// under the call's lock, as brpc asks it under the call id's: it is never
// asked about a call that has ended.
//
// A MultiBackupPolicy may allow more than one: each further backup is due
// one delay after the previous one and goes to yet another server; the
// policy is asked again for each.
func (c *call) onBackupTimer() {
	c.mu.Lock()
	if c.ended || c.nbackups >= c.maxBackups || c.nretry >= c.maxRetry {
		c.mu.Unlock()
		return
	}
	if c.policy != nil && !c.policy.DoBackup(c.cntl) {
		c.mu.Unlock()
		c.s.stats().backupRefused.Add(1)
		return
	}
	c.tried.add(c.current.server)
	if c.unfinished == nil {
		c.unfinished = c.unfinishedBuf[:0]
	}
	c.unfinished = append(c.unfinished, c.current)
	c.nretry++
	next := c.newAttemptLocked()
	next.backup = true
	if c.backupAtt == nil {
		c.backupAtt = next
	}
	c.nbackups++
	due := time.Duration(c.nbackups) * c.backupDelay
	if c.nbackups < c.maxBackups && c.nretry < c.maxRetry {
		// Under the lock: finish, which stops the timer, runs after ended
		// is set, which this checked.
		c.backupTimer.Start(c.backupDelay, 0, true, fireBackup, c)
	}
	c.issuing++
	c.mu.Unlock()
	c.s.stats().backupSent.Add(1)
	c.issue(next) // on the timer's own goroutine
	// How late the backup left (issue returns once it is written, or
	// handed to a sub-channel): <channel>_backup_lateness.
	c.s.stats().backupLateness().Record(time.Since(c.start) - due)
}

// newAttemptLocked starts the next attempt.
func (c *call) newAttemptLocked() *attempt {
	a := &c.first
	if c.current != nil {
		a = &attempt{}
	}
	a.call, a.id = c, nextCorrelationID.Add(1)
	c.current = a
	if c.trace {
		c.attempts = append(c.attempts, a)
	}
	return a
}

// issue selects a server for attempt a and hands it to the sender. It runs
// on the caller's goroutine for the first attempt and on a short-lived
// goroutine for retries, never on a connection's reader.
func (c *call) issue(a *attempt) {
	defer c.issued()
	c.mu.Lock()
	if c.ended && !a.backup {
		c.mu.Unlock() // nothing to send any more
		return
	}
	a.begin = time.Now()
	var err error
	if lb := c.s.balancer(); lb != nil {
		// la counts the attempt in flight from BeginTime until the
		// Feedback carrying the same instant.
		in := loadbalancer.SelectIn{Excluded: &c.tried, BeginTime: a.begin,
			RequestCode: c.rq.requestCode, HasRequestCode: c.rq.hasRequestCode}
		a.server, err = lb.Select(in)
		a.selected = err == nil && a.server != nil
	}
	c.mu.Unlock()
	if err != nil {
		code := selectErrno(err)
		c.onFailure(a, code, errno.Text(code, fmt.Sprintf("Fail to select server from %s: %v", c.s.describe(), err)), false)
		return
	}
	// Connecting happens on another goroutine: an asynchronous
	// CallMethod returns to its caller at once, as brpc's does, and a
	// synchronous one returns when the call ends (its deadline, its
	// context's cancellation, StartCancel), not when the dial gives up; a
	// backup is sent from the timer goroutine, which must never wait.
	if a == &c.first || a.backup {
		if !c.s.ready(a) {
			c.sendLater(a)
			return
		}
		a.noDial = true // the sender may still find the connection gone
	}
	a.callerReads = a == &c.first && c.done == nil
	c.s.send(c, a)
}

// sendLater sends a on a goroutine of its own, where a dial may wait.
func (c *call) sendLater(a *attempt) {
	c.mu.Lock()
	c.issuing++
	c.mu.Unlock()
	go func() {
		defer c.issued()
		c.s.send(c, a)
	}()
}

func selectErrno(err error) controller.Errno {
	switch err {
	case loadbalancer.ErrNoServer:
		return controller.ENODATA
	case loadbalancer.ErrNoAvailableServer:
		return controller.EHOSTDOWN
	}
	return controller.EINVAL
}

// issued marks the end of an issue; the last one out after the call ended
// returns the request's buffer to the pool.
func (c *call) issued() {
	c.mu.Lock()
	c.issuing--
	buf := c.takeBodyLocked()
	c.mu.Unlock()
	if buf != nil {
		putBuf(buf)
	}
}

// takeBodyLocked hands over the request's pooled buffer once the call
// has ended and no attempt is being sent any more; exactly one caller gets
// it. (What a connection still has to write of it was copied.)
func (c *call) takeBodyLocked() *[]byte {
	if !c.ended || c.issuing != 0 || c.rq.bodyBuf == nil {
		return nil
	}
	buf := c.rq.bodyBuf
	c.rq.bodyBuf, c.rq.body = nil, nil
	return buf
}

// attach records what the sender needs to finish or abandon a. It returns
// false when the attempt is already over (the call ended or moved on): the
// sender must then abandon it itself.
func (c *call) attach(a *attempt, handle any) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended || !c.liveLocked(a) {
		return false
	}
	a.handle = handle
	return true
}

// lateBackupSent feeds back a backup that went out after its call ended
// (see Channel.send).
func (c *call) lateBackupSent(a *attempt) {
	c.mu.Lock()
	fb := c.feedbackLocked(a, c.abandonedCodeLocked())
	c.mu.Unlock()
	fb.send()
}

// takeLocked hands a's handle to the caller, who then owns finishing or
// abandoning it; it happens exactly once.
func (c *call) takeLocked(a *attempt) any {
	h := a.handle
	a.handle = nil
	return h
}

// claim is called by the sender when attempt a got an answer. It returns
// the attempt's handle and whether a won: then the sender fills the user's
// response, releases the handle and calls won; otherwise it just releases
// the handle (the answer is dropped, as brpc drops late responses).
func (c *call) claim(a *attempt, remote, local net.Addr) (handle any, won bool) {
	c.mu.Lock()
	handle = c.takeLocked(a)
	if c.ended || !c.liveLocked(a) {
		fb := c.feedbackLocked(a, c.abandonedCodeLocked())
		c.mu.Unlock()
		fb.send()
		return handle, false
	}
	c.ended = true
	c.winner = a
	if remote != nil {
		c.remote, c.local = remote, local
	}
	backupWon := a.backup
	c.mu.Unlock()
	if backupWon {
		c.s.stats().backupWon.Add(1)
	}
	return handle, true
}

// liveLocked reports whether a may still decide the call: the attempt in
// flight, or an earlier one still waited for after a backup.
func (c *call) liveLocked(a *attempt) bool {
	return a == c.current || (a != nil && slices.Contains(c.unfinished, a))
}

// won ends the call after its winner filled the response; code is non-zero
// when that failed (a response that does not parse).
func (c *call) won(a *attempt, code controller.Errno, text string) {
	c.mu.Lock()
	if code != 0 {
		c.appendErrorLocked(text)
	}
	fb := c.feedbackLocked(a, code)
	c.mu.Unlock()
	fb.send()
	c.finish(code)
}

// onFailure is called by the sender (or issue) when attempt a failed. It
// releases what the attempt held, then retries on a retryable error while
// retries and time remain, or ends the call. answered tells that the
// server replied (with an error), so its connection is still clean.
func (c *call) onFailure(a *attempt, code controller.Errno, text string, answered bool) {
	c.mu.Lock()
	handle := c.takeLocked(a)
	if c.ended || !c.liveLocked(a) {
		fb := c.feedbackLocked(a, code)
		c.mu.Unlock()
		if handle != nil {
			c.s.release(c, a, handle, answered)
		}
		fb.send()
		return
	}
	c.appendErrorLocked(text)
	var next *attempt
	end := false
	switch {
	case a != c.current:
		// An earlier attempt failed while a backup is pending: ignore it
		// and keep waiting for the others.
		c.unfinished = slices.DeleteFunc(c.unfinished, func(u *attempt) bool { return u == a })
	case retryable(code) && c.nretry < c.maxRetry && !c.s.closed() &&
		(c.deadline.IsZero() || time.Now().Before(c.deadline)):
		c.tried.add(a.server)
		c.nretry++
		next = c.newAttemptLocked()
		c.issuing++
	case len(c.unfinished) > 0:
		// The latest backup failed for good but an earlier attempt may
		// still answer: a slow answer beats an error, so wait for it.
		last := len(c.unfinished) - 1
		c.current, c.unfinished = c.unfinished[last], c.unfinished[:last]
	default:
		c.ended = true
		end = true
	}
	fb := c.feedbackLocked(a, code)
	c.mu.Unlock()
	if handle != nil {
		c.s.release(c, a, handle, answered)
	}
	fb.send()
	if end {
		c.finish(code)
	} else if next != nil {
		go c.issue(next) // never connect on a reader or closer goroutine
	}
}

// feedback is how an attempt ended, for the load balancer: taken under
// the call's lock (it reads the attempt and the retry count, which other
// events change), sent after it.
type feedback struct {
	lb   loadbalancer.LoadBalancer
	info loadbalancer.CallInfo
}

func (f feedback) send() {
	if f.lb != nil {
		f.lb.Feedback(f.info)
	}
}

// feedbackLocked ends attempt a with code: the feedback it owes the load
// balancer, exactly once for an attempt it selected, nothing otherwise or
// later. c.mu is held.
func (c *call) feedbackLocked(a *attempt, code controller.Errno) feedback {
	if c.trace && a.end.IsZero() {
		a.end, a.code = time.Now(), int32(code)
	}
	if !a.selected || a.fedBack {
		return feedback{}
	}
	a.fedBack = true
	if code != 0 {
		if cs, ok := a.server.Value.(*clusterServer); ok {
			cs.errors.Add(1)
		}
	}
	lb := c.s.balancer()
	if lb == nil {
		return feedback{}
	}
	return feedback{lb: lb, info: loadbalancer.CallInfo{
		Server:    a.server,
		Latency:   time.Since(a.begin),
		ErrorCode: int32(code),
		TimeoutMs: c.timeoutMs,
		Retries:   c.maxRetry - c.nretry,
		Retried:   c.nretry,
		BeginTime: a.begin,
	}}
}

func (c *call) appendErrorLocked(text string) {
	if c.errText.Len() > 0 {
		c.errText.WriteByte(' ')
	}
	if c.nretry > 0 {
		c.errText.WriteString("[R")
		c.errText.WriteString(strconv.Itoa(c.nretry))
		c.errText.WriteByte(']')
	}
	c.errText.WriteString(text)
}

const (
	timerDeadline = 1 << iota
	timerBackup
)

// deadlineSlack: a deadline may fire this much late (Go's own timers
// fire up to 1 ms late too) when that saves waking the timer goroutine.
const deadlineSlack = 500 * time.Microsecond

func fireTimeout(c any) { c.(*call).onTimeout() }
func fireBackup(c any)  { c.(*call).onBackupTimer() }

func (c *call) onTimeout() {
	c.endWith(controller.ERPCTIMEDOUT, errno.Text(errno.ERPCTIMEDOUT, fmt.Sprintf("Reached timeout=%dms @%s", c.timeoutMs, c.s.describe())))
}

// Cancel implements ctrl.Call (Controller.StartCancel).
// A backup policy may cancel from GetBackupRequestMs or DoBackup, which
// run under the call's lock: the cancel then ends the call as soon as the
// lock is free (brpc queues an error on a locked call id the same way).
func (c *call) Cancel() {
	text := errno.Text(errno.ECANCELED, "RPC was canceled")
	if !c.mu.TryLock() {
		go c.endWith(controller.ECANCELED, text)
		return
	}
	c.mu.Unlock()
	c.endWith(controller.ECANCELED, text)
}

// endWith ends the call from outside any attempt (deadline, cancel).
func (c *call) endWith(code controller.Errno, text string) {
	c.mu.Lock()
	if c.ended {
		c.mu.Unlock()
		return
	}
	c.ended = true
	c.appendErrorLocked(text)
	c.mu.Unlock()
	c.finish(code)
}

// abandonedCodeLocked is what an attempt still in flight when the call
// ended is fed back to the load balancer with, as brpc does:
// EBACKUPREQUEST for the first attempt when its backup won (so la learns
// to avoid the slow server), ECANCELED for a backup the first attempt
// beat, and the call's own code (ERPCTIMEDOUT, ECANCELED ...) when it did
// not succeed.
func (c *call) abandonedCodeLocked() controller.Errno {
	switch {
	case c.code != 0:
		return c.code
	case c.winner != nil && c.winner.backup:
		return controller.EBACKUPREQUEST
	default:
		return controller.ECANCELED
	}
}

// finish runs once, by the owner of completion, after ended was set:
// abandon the attempts still in flight, write the results, run done.
func (c *call) finish(code controller.Errno) {
	c.over.Store(true)
	if c.timers&timerDeadline != 0 {
		c.timer.Stop()
	}
	if c.timers&timerBackup != 0 {
		c.backupTimer.Stop()
	}
	if c.stopCtx != nil {
		c.stopCtx()
	}
	c.mu.Lock()
	c.code = code
	// Attempts still in flight are abandoned: the current one and the
	// earlier ones of a backed-up call. Those connecting still are fed
	// back now too; they find the call ended when they get their
	// connection.
	type abandonedAttempt struct {
		a      *attempt
		handle any
		fb     feedback
	}
	var abandonedBuf [2]abandonedAttempt
	abandoned := abandonedBuf[:0]
	for i := -1; i < len(c.unfinished); i++ {
		a := c.current
		if i >= 0 {
			a = c.unfinished[i]
		}
		if a == nil || a == c.winner {
			continue
		}
		h := c.takeLocked(a)
		a.abandoned = h != nil
		abandoned = append(abandoned, abandonedAttempt{a, h, c.feedbackLocked(a, c.abandonedCodeLocked())})
	}
	body := c.takeBodyLocked()
	hasBackup := c.backupAtt != nil
	st := c.st
	st.RemoteSide, st.LocalSide = c.remote, c.local
	st.ErrorCode = int32(code)
	if code != 0 {
		st.ErrorText = c.errText.String()
		st.GRPCStatus = c.grpcStatus
	} else {
		st.ErrorText = ""
		st.GRPCStatus = 0
	}
	st.RetriedCount = c.nretry
	st.HasBackupRequest = hasBackup
	st.BackupWon = hasBackup && c.winner != nil && c.winner.backup
	st.LatencyUs = time.Since(c.start).Microseconds()
	c.mu.Unlock()
	if body != nil {
		putBuf(body)
	}
	for _, ab := range abandoned {
		if ab.handle != nil {
			c.s.release(c, ab.a, ab.handle, false)
		}
		ab.fb.send()
	}

	// Exactly once per RPC, sync or async, with the results in place.
	if c.policy != nil {
		c.policy.OnRPCEnd(c.cntl)
	}
	if c.trace {
		c.recordSpan(code)
	}
	c.resultsIn.Done()
	if c.done != nil {
		go func() {
			c.done() // may Reset the Controller and start its next call
			c.finished.Done()
		}()
		return
	}
	c.finished.Done()
}

// recordSpan keeps the call for /rpcz, with each attempt's server, start
// and latency.
func (c *call) recordSpan(code controller.Errno) {
	c.mu.Lock()
	defer c.mu.Unlock()
	span := rpcz.Span{
		Method: string(c.md.FullName()), LogID: c.rq.logID, Start: c.start,
		TraceID: c.rq.traceID, SpanID: c.rq.spanID, ParentSpanID: c.rq.parentSpanID,
		Latency: time.Since(c.start), ErrorCode: int32(code), ErrorText: c.st.ErrorText,
	}
	if c.remote != nil {
		span.Remote = c.remote.String()
	}
	for _, a := range c.attempts {
		at := rpcz.Attempt{Start: a.begin, Backup: a.backup, Won: a == c.winner,
			ErrorCode: a.code, Abandoned: a.abandoned}
		if a.server != nil {
			at.Server = a.server.Addr
		} else {
			at.Server = c.s.describe()
		}
		if !a.end.IsZero() && !a.begin.IsZero() {
			at.Latency = a.end.Sub(a.begin)
		}
		if a.begin.IsZero() {
			at.Start = c.start
		}
		span.Attempts = append(span.Attempts, at)
	}
	rpcz.Record(span)
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

func getBuf() *[]byte { return bufPool.Get().(*[]byte) }

func putBuf(b *[]byte) {
	if cap(*b) <= 64<<10 { // do not pin huge buffers
		bufPool.Put(b)
	}
}
