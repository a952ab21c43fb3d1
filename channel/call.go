package channel

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/internal/ctrl"
	"github.com/gobrpc/gobrpc/internal/transport"
	"github.com/gobrpc/gobrpc/protocol/baidustd"
)

// call is the state machine of one RPC. Events (a response, a failed
// attempt, the deadline, a cancel) may race; mu orders them and ended
// makes exactly one of them the owner of completion. mu is never held
// across I/O.
type call struct {
	ch   *Channel
	cntl *controller.Controller
	st   *ctrl.State
	md   protoreflect.MethodDescriptor
	resp proto.Message
	done func()

	payload    []byte  // the serialized (and compressed) request, shared by every attempt
	payloadBuf *[]byte // pooled storage behind payload, released once no attempt is being sent
	attachment []byte
	checksum   []byte

	start          time.Time
	deadline       time.Time // zero: none
	timeoutMs      int64
	maxRetry       int
	connectTimeout time.Duration

	mu      sync.Mutex
	ended   bool
	nretry  int
	issuing int // attempts being connected or written; the payload lives while > 0
	current *attempt
	first   attempt // the first attempt, allocated with the call
	timer   *time.Timer
	errText strings.Builder
	remote  net.Addr // the last server talked to
	local   net.Addr
}

// attempt is one send of the request, to one server, with its own
// correlation id.
type attempt struct {
	call *call
	id   int64
	conn *transport.ClientConn // set once connected; guarded by call.mu
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

func startCall(ch *Channel, md protoreflect.MethodDescriptor, cntl *controller.Controller,
	req, resp proto.Message, done func()) {
	st := ctrl.Of(cntl)
	c := &call{ch: ch, cntl: cntl, st: st, md: md, resp: resp, done: done, start: time.Now()}

	st.Mu.Lock()
	reused := st.InUse
	st.InUse = true
	if !reused {
		st.Call = c
	}
	canceled := st.CancelRequested
	st.Mu.Unlock()
	if reused {
		// A Controller serves one call until Reset, as in brpc: results of
		// the previous call must not be mixed with this one's.
		st.ErrorCode = int32(controller.EINVAL)
		st.ErrorText = "[E22]Controller was used by another call; call Reset before reusing it"
		if done != nil {
			go done()
		}
		return
	}
	st.Done.Add(1)

	c.mu.Lock() // held until the call is set up, so no event can end it half-built
	code, text := c.setUp(req, canceled)
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

func (c *call) wait() {
	if c.done == nil {
		c.st.Done.Wait()
	}
}

// setUp resolves the settings and serializes the request. It returns a
// non-zero code when the call cannot start.
func (c *call) setUp(req proto.Message, canceled bool) (controller.Errno, string) {
	ch, cntl := c.ch, c.cntl
	if ch == nil || ch.closed() {
		return controller.EINVAL, "[E22]Channel is not initialized or closed"
	}
	if canceled {
		return controller.ECANCELED, "[E125]RPC was canceled before it started"
	}
	if c.md == nil {
		return controller.EINVAL, "[E22]nil method descriptor"
	}
	opts := &ch.opts

	var set bool
	if c.timeoutMs, set = cntl.TimeoutMsSetting(); !set {
		c.timeoutMs = int64(opts.TimeoutMs)
	}
	if c.maxRetry, set = cntl.MaxRetrySetting(); !set {
		c.maxRetry = opts.MaxRetry
	}
	if c.timeoutMs >= 0 {
		c.deadline = c.start.Add(time.Duration(c.timeoutMs) * time.Millisecond)
	}
	if opts.ConnectTimeoutMs > 0 {
		c.connectTimeout = time.Duration(opts.ConnectTimeoutMs) * time.Millisecond
	}

	var err error
	c.payloadBuf = getBuf()
	c.payload, err = proto.MarshalOptions{}.MarshalAppend((*c.payloadBuf)[:0], req)
	*c.payloadBuf = c.payload[:0]
	if err != nil {
		return controller.EREQUEST, "[E1003]Fail to serialize request: " + err.Error()
	}
	if ct := cntl.RequestCompressType(); ct != controller.CompressNone {
		c.payload, err = baidustd.Compress(nil, int32(ct), c.payload)
		if err != nil {
			return controller.EREQUEST, "[E1003]Fail to compress request: " + err.Error()
		}
	}
	c.attachment = cntl.RequestAttachment().Bytes()
	if cntl.RequestChecksumType() == controller.ChecksumCRC32C {
		c.checksum = baidustd.AppendChecksum(nil, c.payload, c.attachment, false)
	} else if cntl.RequestChecksumType() != controller.ChecksumNone {
		return controller.EREQUEST, fmt.Sprintf("[E1003]unsupported checksum type %d", cntl.RequestChecksumType())
	}

	if c.timeoutMs >= 0 {
		c.timer = time.AfterFunc(time.Duration(c.timeoutMs)*time.Millisecond, c.onTimeout)
	}
	return 0, ""
}

func (c *call) newAttemptLocked() *attempt {
	a := &c.first
	if c.current != nil {
		a = &attempt{}
	}
	a.call, a.id = c, nextCorrelationID.Add(1)
	c.current = a
	return a
}

// issued marks the end of an issue; the last one out after the call ended
// returns the payload's buffer to the pool.
func (c *call) issued() {
	c.mu.Lock()
	c.issuing--
	buf := c.takePayloadLocked()
	c.mu.Unlock()
	if buf != nil {
		putBuf(buf)
	}
}

// takePayloadLocked hands over the payload's pooled buffer once the call
// has ended and no attempt is being sent any more; exactly one caller gets
// it.
func (c *call) takePayloadLocked() *[]byte {
	if !c.ended || c.issuing != 0 || c.payloadBuf == nil {
		return nil
	}
	buf := c.payloadBuf
	c.payloadBuf, c.payload = nil, nil
	return buf
}

// issue connects and sends attempt a. It runs on the caller's goroutine
// for the first attempt and on a short-lived goroutine for retries, never
// on a connection's reader.
func (c *call) issue(a *attempt) {
	defer c.issued()
	connectTimeout := c.connectTimeout
	if !c.deadline.IsZero() {
		left := time.Until(c.deadline)
		if left <= 0 {
			left = time.Millisecond // the deadline timer is about to end the call
		}
		if connectTimeout == 0 || left < connectTimeout {
			connectTimeout = left
		}
	}
	ep := c.ch.ep
	conn, err := ep.Acquire(connectTimeout)
	if err != nil {
		code := transport.ErrnoOf(err)
		if c.ch.closed() {
			code = controller.EINVAL
		}
		c.onAttemptFailed(a, code, fmt.Sprintf("[E%d]Fail to connect %s: %v", code, ep.Addr(), err))
		return
	}

	c.mu.Lock()
	if c.ended || c.current != a {
		c.mu.Unlock()
		ep.Release(conn, true)
		return
	}
	a.conn = conn
	c.mu.Unlock()

	if err := conn.Register(a.id, a); err != nil {
		c.onAttemptFailed(a, controller.EFAILEDSOCKET,
			fmt.Sprintf("[E1009]Connection to %s broke", ep.Addr()))
		return
	}

	bufp := getBuf()
	m := baidustd.Meta{
		HasRequest:    true,
		ServiceName:   string(c.md.Parent().FullName()),
		MethodName:    string(c.md.Name()),
		LogID:         c.cntl.LogID(),
		HasLogID:      c.cntl.HasLogID(), // brpc writes log_id only when set
		CompressType:  int32(c.cntl.RequestCompressType()),
		CorrelationID: a.id,
		ChecksumType:  int32(c.cntl.RequestChecksumType()),
		ChecksumValue: c.checksum,
	}
	frame, err := baidustd.AppendFrame((*bufp)[:0], &m, c.payload, c.attachment)
	if err == nil {
		err = conn.Write(frame)
	}
	*bufp = frame
	putBuf(bufp)
	if err != nil {
		conn.Unregister(a.id)
		code := transport.ErrnoOf(err)
		conn.Close() // a failed write leaves the stream in an unknown state
		c.onAttemptFailed(a, code, fmt.Sprintf("[E%d]Fail to write to %s: %v", code, ep.Addr(), err))
	}
}

// HandleResponse implements transport.ResponseHandler.
func (a *attempt) HandleResponse(conn *transport.ClientConn, m *baidustd.Meta, msg, att []byte) {
	c := a.call
	if m.ErrorCode != 0 {
		code := controller.Errno(m.ErrorCode)
		a.call.onAttemptFailedAfterResponse(a, code, "[E"+strconv.Itoa(int(code))+"]"+m.ErrorText)
		return
	}
	c.mu.Lock()
	if c.ended || c.current != a {
		stale := c.takeConnLocked(a)
		c.mu.Unlock()
		if stale != nil {
			c.ch.ep.Release(stale, true) // it answered: the connection is clean
		}
		return
	}
	c.ended = true
	c.noteSidesLocked(conn)
	a.conn = nil
	c.mu.Unlock()

	code := c.decodeResponse(m, msg, att)
	c.ch.ep.Release(conn, true)
	c.finish(code)
}

// decodeResponse fills the user's response and attachment. It runs once,
// by the owner of completion.
func (c *call) decodeResponse(m *baidustd.Meta, msg, att []byte) controller.Errno {
	if m.ChecksumType != 0 {
		if err := baidustd.VerifyChecksum(m, msg, att); err != nil {
			c.errText.WriteString("[E2002]" + err.Error())
			return controller.ERESPONSE
		}
	}
	if m.CompressType != 0 {
		var err error
		msg, err = baidustd.Decompress(nil, m.CompressType, msg)
		if err != nil {
			c.errText.WriteString("[E2002]Fail to decompress response: " + err.Error())
			return controller.ERESPONSE
		}
	}
	if err := proto.Unmarshal(msg, c.resp); err != nil {
		c.errText.WriteString("[E2002]Fail to parse response: " + err.Error())
		return controller.ERESPONSE
	}
	if len(att) > 0 {
		c.cntl.ResponseAttachment().Write(att)
	}
	return 0
}

// HandleFailure implements transport.ResponseHandler.
func (a *attempt) HandleFailure(_ *transport.ClientConn, code controller.Errno, text string) {
	a.call.onAttemptFailed(a, code, "[E"+strconv.Itoa(int(code))+"]"+text)
}

func (c *call) onAttemptFailedAfterResponse(a *attempt, code controller.Errno, text string) {
	c.onAttempt(a, code, text, true)
}

func (c *call) onAttemptFailed(a *attempt, code controller.Errno, text string) {
	c.onAttempt(a, code, text, false)
}

// onAttempt handles a failed attempt: retry on a retryable error while
// retries and time remain, else end the call. answered tells whether the
// server replied (the connection is then still usable).
func (c *call) onAttempt(a *attempt, code controller.Errno, text string, answered bool) {
	c.mu.Lock()
	conn := c.takeConnLocked(a)
	if c.ended || c.current != a {
		c.mu.Unlock()
		if conn != nil {
			c.ch.ep.Release(conn, answered)
		}
		return
	}
	c.appendErrorLocked(text)
	c.noteSidesLocked(conn)
	retry := retryable(code) && c.nretry < c.maxRetry && !c.ch.closed() &&
		(c.deadline.IsZero() || time.Now().Before(c.deadline))
	if !retry {
		c.ended = true
		c.mu.Unlock()
		if conn != nil {
			c.ch.ep.Release(conn, answered)
		}
		c.finish(code)
		return
	}
	c.nretry++
	next := c.newAttemptLocked()
	c.issuing++
	c.mu.Unlock()
	if conn != nil {
		c.ch.ep.Release(conn, answered)
	}
	go c.issue(next) // never connect on a reader or closer goroutine
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

func (c *call) onTimeout() {
	c.endWith(controller.ERPCTIMEDOUT, fmt.Sprintf("[E1008]Reached timeout=%dms @%s", c.timeoutMs, c.ch.ep.Addr()))
}

// Cancel implements ctrl.Canceler (Controller.StartCancel).
func (c *call) Cancel() {
	c.endWith(controller.ECANCELED, "[E125]RPC was canceled")
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

// takeConnLocked hands a's connection to the caller, who must Release
// it; whoever takes it owns its release, so it happens exactly once.
func (c *call) takeConnLocked(a *attempt) *transport.ClientConn {
	conn := a.conn
	a.conn = nil
	return conn
}

// noteSidesLocked records the last server talked to, for RemoteSide.
func (c *call) noteSidesLocked(conn *transport.ClientConn) {
	if conn != nil {
		c.remote, c.local = conn.RemoteAddr(), conn.LocalAddr()
	}
}

// finish runs once, by the owner of completion, after ended was set:
// release what an abandoned attempt still holds, write the results, run
// done.
func (c *call) finish(code controller.Errno) {
	if c.timer != nil {
		c.timer.Stop()
	}
	c.mu.Lock()
	var abandoned *transport.ClientConn
	var abandonedID int64
	if cur := c.current; cur != nil {
		abandoned, abandonedID = c.takeConnLocked(cur), cur.id
		c.noteSidesLocked(abandoned)
	}
	payloadBuf := c.takePayloadLocked()
	c.mu.Unlock()
	if payloadBuf != nil {
		putBuf(payloadBuf)
	}
	if abandoned != nil {
		// Drop its late response, and close a pooled or short connection
		// that could still receive it.
		abandoned.Unregister(abandonedID)
		c.ch.ep.Release(abandoned, false)
	}

	st := c.st
	st.RemoteSide, st.LocalSide = c.remote, c.local
	st.ErrorCode = int32(code)
	if code != 0 {
		st.ErrorText = c.errText.String()
	} else {
		st.ErrorText = ""
	}
	st.RetriedCount = c.nretry
	st.LatencyUs = time.Since(c.start).Microseconds()

	st.Mu.Lock()
	st.Call = nil
	st.Mu.Unlock()

	if c.done != nil {
		go func() {
			c.done()
			st.Done.Done()
		}()
		return
	}
	st.Done.Done()
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

func getBuf() *[]byte { return bufPool.Get().(*[]byte) }

func putBuf(b *[]byte) {
	if cap(*b) <= 64<<10 { // do not pin huge buffers
		bufPool.Put(b)
	}
}
