package channel

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/gobrpc/gobrpc/backup"
	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/internal/ctrl"
	"github.com/gobrpc/gobrpc/loadbalancer"
)

// SelectiveChannel balances RPCs over sub-channels with a load balancer,
// as brpc's SelectiveChannel does: each sub-channel (a Channel, another
// SelectiveChannel, any Caller) is one "server" of the balancer, its tag
// the balancer's tag (a weight for wrr). The SelectiveChannel owns the
// deadline, retries on another sub-channel, and treats a sub-channel that
// cannot select a server as unavailable until it can again. Sub-channels
// apply their own options (retries, connection type) inside.
type SelectiveChannel struct {
	opts  resolved
	state atomic.Int32
	lb    loadbalancer.LoadBalancer

	mu   sync.Mutex
	subs []subChannel
	next ChannelHandle

	vars        *channelVars
	policy      backup.Policy
	ownedPolicy ownedPolicy
}

// ChannelHandle names a sub-channel added to a SelectiveChannel.
type ChannelHandle int64

type subChannel struct {
	handle ChannelHandle
	caller Caller
	server *loadbalancer.Server
}

// HealthChecker is implemented by callers that can tell whether a call
// could select a server now (*Channel and *SelectiveChannel do).
type HealthChecker interface {
	CheckHealth() bool
}

var _ Caller = (*SelectiveChannel)(nil)

// Init sets the load balancer ("rr", "wrr", "random", "wr", "la",
// "c_murmurhash") and the options; opts == nil means DefaultOptions. As in
// brpc, the connection type, protocol, naming and Auth options do not
// apply to a SelectiveChannel itself (its sub-channels have their own);
// its Interceptors wrap its calls, and each sub-channel's wrap the
// sub-calls.
func (s *SelectiveChannel) Init(lbName string, opts *Options) error {
	if !s.state.CompareAndSwap(channelNew, channelInitializing) {
		return errors.New("channel: SelectiveChannel.Init called twice")
	}
	r, err := resolve(opts)
	if err == nil {
		s.lb, err = loadbalancer.New(lbName)
	}
	if err != nil {
		s.state.Store(channelNew)
		return fmt.Errorf("channel: %w", err)
	}
	s.vars = newChannelVars()
	if s.policy, s.ownedPolicy, err = r.backupPolicy(s.vars.prefix); err != nil {
		s.vars.hide()
		s.state.Store(channelNew)
		return err
	}
	s.opts = r
	s.state.Store(channelReady)
	return nil
}

// AddChannel adds sub with tag (a weight for wrr; "" otherwise). The
// SelectiveChannel owns sub from now on: RemoveAndDestroyChannel and Close
// close it if it has a Close method. Adding the same sub twice is an
// error.
func (s *SelectiveChannel) AddChannel(sub Caller, tag string) (ChannelHandle, error) {
	if sub == nil {
		return 0, errors.New("channel: AddChannel with a nil sub-channel")
	}
	if s.state.Load() != channelReady {
		return 0, errors.New("channel: AddChannel on a SelectiveChannel that is not initialized or closed")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.subs {
		if c.caller == sub {
			return 0, errors.New("channel: the sub-channel was already added")
		}
	}
	s.next++
	h := s.next
	server := &loadbalancer.Server{Addr: "sub-channel-" + strconv.FormatInt(int64(h), 10), Tag: tag, Value: sub}
	if hc, ok := sub.(HealthChecker); ok {
		server.Available = hc.CheckHealth
	}
	s.subs = append(s.subs, subChannel{handle: h, caller: sub, server: server})
	s.updateLocked()
	return h, nil
}

// RemoveAndDestroyChannel removes a sub-channel and closes it. Calls in
// flight on it finish.
func (s *SelectiveChannel) RemoveAndDestroyChannel(h ChannelHandle) {
	s.mu.Lock()
	var removed Caller
	for i, c := range s.subs {
		if c.handle == h {
			removed = c.caller
			s.subs = append(s.subs[:i], s.subs[i+1:]...)
			break
		}
	}
	if removed != nil {
		s.updateLocked()
	}
	s.mu.Unlock()
	if cl, ok := removed.(io.Closer); ok {
		cl.Close()
	}
}

func (s *SelectiveChannel) updateLocked() {
	list := make([]*loadbalancer.Server, len(s.subs))
	for i, c := range s.subs {
		list[i] = c.server
	}
	s.lb.Update(list)
}

// CheckHealth reports whether some sub-channel could take a call.
func (s *SelectiveChannel) CheckHealth() bool {
	if s.state.Load() != channelReady {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.subs {
		if c.server.IsAvailable() {
			return true
		}
	}
	return false
}

// Close closes every sub-channel. Later calls fail with EINVAL.
// BackupVarPrefix is the prefix of the SelectiveChannel's backup
// variables (<prefix>_backup_sent ..., and its own policy's, e.g.
// <prefix>_backup_delay_us), as Channel.BackupVarPrefix; "" before Init.
func (s *SelectiveChannel) BackupVarPrefix() string {
	if s.vars == nil {
		return ""
	}
	return s.vars.prefix
}

func (s *SelectiveChannel) Close() error {
	if s.state.Swap(channelClosed) != channelReady {
		return nil
	}
	if s.ownedPolicy != nil {
		s.ownedPolicy.Close()
	}
	s.vars.hide()
	s.mu.Lock()
	subs := s.subs
	s.subs = nil
	s.mu.Unlock()
	for _, c := range subs {
		if cl, ok := c.caller.(io.Closer); ok {
			cl.Close()
		}
	}
	return nil
}

// CallMethod sends one RPC through a sub-channel (see Caller).
func (s *SelectiveChannel) CallMethod(md protoreflect.MethodDescriptor, cntl *controller.Controller,
	req, resp proto.Message, done func()) {
	if ics := s.opts.Interceptors; len(ics) > 0 {
		startIntercepted(s, ics, md, cntl, req, resp, done)
		return
	}
	startCall(s, md, cntl, req, resp, done)
}

// ---- sender ----

func (s *SelectiveChannel) settings() *resolved                 { return &s.opts }
func (s *SelectiveChannel) closed() bool                        { return s.state.Load() != channelReady }
func (s *SelectiveChannel) describe() string                    { return "SelectiveChannel" }
func (s *SelectiveChannel) balancer() loadbalancer.LoadBalancer { return s.lb }
func (s *SelectiveChannel) backupPolicy() backup.Policy         { return s.policy }
func (s *SelectiveChannel) stats() *channelVars                 { return s.vars }

// prepare copies what sub-calls send: the sub-channels serialize the
// request themselves, and an attempt may start (or still be starting)
// after the caller got its request and Controller back.
func (s *SelectiveChannel) prepare(c *call) (controller.Errno, string) {
	if c.rq.traceID != 0 { // sub-calls are children of this call's span
		c.rq.ctx = ctrl.WithTrace(c.rq.ctx, ctrl.Trace{TraceID: c.rq.traceID, SpanID: c.rq.spanID})
	}
	c.rq.reqCopy = proto.Clone(c.req)
	c.rq.attCopy = bytes.Clone(c.cntl.RequestAttachment().Bytes())
	c.rq.respType = c.resp.ProtoReflect().Type()
	return 0, ""
}

// ready: a sub-call never waits for its peer on the caller's goroutine.
func (s *SelectiveChannel) ready(*attempt) bool { return true }

// subCall is one attempt on a sub-channel: its own Controller and its own
// response object, so a loser can never write into the user's response;
// only the winner's response is copied there.
type subCall struct {
	cntl controller.Controller
	resp proto.Message
}

func (s *SelectiveChannel) send(c *call, a *attempt) {
	sub := a.server.Value.(Caller)
	rq := &c.rq
	sc := &subCall{resp: rq.respType.New().Interface()}
	// The SelectiveChannel owns the deadline (brpc gives sub-calls none);
	// the sub-call inherits what describes the request, from what the call
	// took when it started, and the time left, so that its servers see the
	// caller's deadline.
	sc.cntl.SetTimeoutMs(-1)
	if !c.deadline.IsZero() {
		sc.cntl.SetTimeoutMs(max(1, int64(remainingMs(c.deadline))))
	}
	sc.cntl.SetContext(rq.ctx)
	for k, v := range rq.userFields {
		sc.cntl.RequestUserFields()[k] = v
	}
	if rq.hasLogID {
		sc.cntl.SetLogID(rq.logID)
	}
	if rq.hasRequestCode {
		sc.cntl.SetRequestCode(rq.requestCode)
	}
	sc.cntl.SetRequestCompressType(rq.compress)
	sc.cntl.SetRequestChecksumType(rq.checksumType)
	sc.cntl.RequestAttachment().Write(rq.attCopy)
	if !c.attach(a, sc) {
		// The call ended meanwhile; a backup the policy allowed still
		// goes out (see Channel.send), and is abandoned at once.
		if a.backup {
			sub.CallMethod(c.md, &sc.cntl, rq.reqCopy, sc.resp, func() {})
			sc.cntl.StartCancel()
			c.lateBackupSent(a)
		}
		return
	}
	sub.CallMethod(c.md, &sc.cntl, rq.reqCopy, sc.resp, func() { s.subDone(c, a, sc) })
}

// subDone runs when a sub-call ends.
func (s *SelectiveChannel) subDone(c *call, a *attempt, sc *subCall) {
	if sc.cntl.Failed() {
		c.onFailure(a, sc.cntl.ErrorCode(), sc.cntl.ErrorText(), true)
		return
	}
	_, won := c.claim(a, sc.cntl.RemoteSide(), sc.cntl.LocalSide())
	if !won {
		return
	}
	proto.Reset(c.resp)
	proto.Merge(c.resp, sc.resp)
	c.cntl.ResponseAttachment().Reset()
	c.cntl.ResponseAttachment().Write(sc.cntl.ResponseAttachment().Bytes())
	c.st.ResponseUserFields = ctrl.Of(&sc.cntl).ResponseUserFields // the sub-call's own, now the caller's
	c.won(a, 0, "")
}

// release cancels a sub-call that was abandoned (it lost, or the call
// ended); the cancellation is local to this process, as in brpc.
func (s *SelectiveChannel) release(_ *call, _ *attempt, handle any, answered bool) {
	if !answered {
		handle.(*subCall).cntl.StartCancel()
	}
}
