package channel

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/errno"
	"github.com/gobrpc/gobrpc/flags"
	"github.com/gobrpc/gobrpc/internal/h2client"
	"github.com/gobrpc/gobrpc/internal/transport"
	"github.com/gobrpc/gobrpc/protocol/baidustd"
)

// How a Channel sends attempts: baidu_std frames over connections to its
// servers.

// prepare serializes the request once (and compresses and checksums it)
// into a frame body the call owns, followed by a copy of the attachment;
// every attempt writes that body after its own header and meta.
func (ch *Channel) prepare(c *call) (controller.Errno, string) {
	if ch.opts.grpc {
		return ch.prepareGRPC(c)
	}
	rq := &c.rq
	buf := getBuf()
	msg, err := proto.MarshalOptions{}.MarshalAppend((*buf)[:0], c.req)
	if err != nil {
		*buf = msg[:0]
		putBuf(buf)
		return controller.EREQUEST, errno.Text(errno.EREQUEST, "Fail to serialize request: "+err.Error())
	}
	if rq.compress != controller.CompressNone {
		z, err := baidustd.Compress(nil, int32(rq.compress), msg)
		*buf = msg[:0]
		putBuf(buf) // the body lives in z from here on
		buf = nil
		if err != nil {
			return controller.EREQUEST, errno.Text(errno.EREQUEST, "Fail to compress request: "+err.Error())
		}
		msg = z
	}
	att := c.cntl.RequestAttachment().Bytes()
	switch rq.checksumType {
	case controller.ChecksumNone:
	case controller.ChecksumCRC32C:
		rq.checksum = baidustd.AppendChecksum(nil, msg, att, false)
	default:
		if buf != nil {
			putBuf(buf)
		}
		return controller.EREQUEST, errno.Text(errno.EREQUEST, fmt.Sprintf("unsupported checksum type %d", rq.checksumType))
	}
	rq.msgLen = len(msg)
	rq.body = append(msg, att...)
	if buf != nil {
		*buf = rq.body[:0]
		rq.bodyBuf = buf
	}
	return 0, ""
}

func (ch *Channel) endpointOf(a *attempt) endpoint {
	if a.server != nil {
		return a.server.Value.(*clusterServer).ep
	}
	return ch.single
}

// ready reports whether a connection to a's server is open and free.
func (ch *Channel) ready(a *attempt) bool { return ch.endpointOf(a).Ready() }

// send connects (within the connect timeout, capped by the deadline) and
// writes the frame.
func (ch *Channel) send(c *call, a *attempt) {
	if a.server != nil {
		a.server.Value.(*clusterServer).selected.Add(1)
	}
	if ep, ok := ch.endpointOf(a).(*h2client.Endpoint); ok {
		ch.sendGRPC(c, a, ep)
		return
	}
	ep := ch.endpointOf(a).(*transport.Endpoint)
	connectTimeout := c.connectTimeout
	cutByDeadline := false
	if !c.deadline.IsZero() {
		left := time.Until(c.deadline)
		if left <= 0 {
			left = time.Millisecond // the deadline timer is about to end the call
		}
		if connectTimeout == 0 || left < connectTimeout {
			connectTimeout, cutByDeadline = left, true
		}
	}
	var conn *transport.ClientConn
	var err error
	if a.noDial {
		// A first attempt or a backup never dials where it is sent from
		// (a caller's goroutine, the timer goroutine): if the connection
		// the endpoint had is gone, the dial goes to a goroutine of its own.
		var ok bool
		if conn, ok = ep.TryAcquire(); !ok {
			a.noDial, a.callerReads = false, false // the goroutine is not the caller
			c.sendLater(a)
			return
		}
	} else if conn, err = ep.Acquire(connectTimeout); err != nil {
		code := transport.ErrnoOf(err)
		var cerr *transport.CredentialError
		credential := errors.As(err, &cerr)
		if cutByDeadline && (code == controller.ETIMEDOUT || errors.Is(err, transport.ErrCredentialTimeout)) {
			// The call's own deadline cut the connect (or the credential)
			// short: that says nothing bad of the server, and the deadline
			// timer, firing now, ends the call with ERPCTIMEDOUT.
			return
		}
		switch {
		case ch.closed():
			code = controller.EINVAL
		case credential:
			// Not retried, and says nothing bad of the server.
			c.onFailure(a, controller.ERPCAUTH, errno.Text(controller.ERPCAUTH, err.Error()), false)
			return
		}
		ch.serverFailed(a, code, err.Error())
		c.onFailure(a, code, errno.Text(code, fmt.Sprintf("Fail to connect %s: %v", ep.Addr(), err)), false)
		return
	}
	if !c.attach(a, conn) {
		// The call ended meanwhile. A backup the policy allowed still goes
		// out, as brpc sends it under the call's lock: the policy counted
		// it. Its answer will be dropped.
		if a.backup {
			ch.writeRequest(c, a, conn)
			c.lateBackupSent(a)
		}
		ep.Release(conn, !a.backup)
		return
	}
	reading, err := conn.Register(a.id, a, a.callerReads)
	if err != nil {
		c.onFailure(a, controller.EFAILEDSOCKET, errno.Text(errno.EFAILEDSOCKET, "Connection to "+ep.Addr()+" broke"), false)
		return
	}
	if reading {
		c.readConn = conn // the caller reads the response itself (call.wait)
	}
	if err := ch.writeRequest(c, a, conn); err != nil {
		conn.Unregister(a.id)
		code := transport.ErrnoOf(err)
		c.onFailure(a, code, errno.Text(code, fmt.Sprintf("Fail to write to %s: %v", ep.Addr(), err)), false)
	}
}

// writeRequest writes attempt a's frame: its own header and meta, then the
// body the call built when it started. It never waits for the server.
func (ch *Channel) writeRequest(c *call, a *attempt, conn *transport.ClientConn) error {
	rq := &c.rq
	m := baidustd.Meta{
		HasRequest:    true,
		ServiceName:   rq.service,
		MethodName:    rq.method,
		LogID:         rq.logID,
		HasLogID:      rq.hasLogID, // brpc writes log_id only when set
		CompressType:  int32(rq.compress),
		CorrelationID: a.id,
		ChecksumType:  int32(rq.checksumType),
		ChecksumValue: rq.checksum,
		TraceID:       rq.traceID,
		SpanID:        rq.spanID,
		ParentSpanID:  rq.parentSpanID,
		UserFields:    rq.userFields,
	}
	if !c.deadline.IsZero() && DeliverTimeoutMs.Get() {
		m.TimeoutMs = remainingMs(c.deadline)
	}
	if conn.NeedsCredential() {
		return conn.WriteFirst(func(credential []byte) error {
			m.AuthenticationData = credential
			return writeFrame(conn, &m, rq, a.backup)
		})
	}
	return writeFrame(conn, &m, rq, a.backup)
}

// writeFrame encodes m's header and meta and writes them with the body.
// A backup is written at once (WriteNow): it is sent from the timer
// goroutine, which must not yield to let other writers batch with it (a
// locked thread's yield costs two thread switches: writing a backup took
// 64 µs at p50 instead of 24 in tools/bench backupbench's steady scenario).
func writeFrame(conn *transport.ClientConn, m *baidustd.Meta, rq *request, now bool) error {
	bufp := getBuf()
	head, err := baidustd.AppendFrameHead((*bufp)[:0], m, rq.msgLen, len(rq.body)-rq.msgLen)
	if err == nil {
		if now {
			err = conn.WriteNow(head, rq.body)
		} else {
			err = conn.Write(head, rq.body)
		}
	}
	*bufp = head
	putBuf(bufp)
	return err
}

// DeliverTimeoutMs is brpc's -baidu_std_protocol_deliver_timeout_ms: each
// attempt tells the server the time left until the call's deadline, in
// RpcRequestMeta.timeout_ms, so that the server's cntl.Context() ends with
// it and the budget travels down a chain of calls. brpc defaults to
// false; gobrpc sends it unless turned off (brpc servers only read it).
var DeliverTimeoutMs = flags.DefineBool("baidu_std_protocol_deliver_timeout_ms", true,
	"Send each request's remaining timeout in the baidu_std meta (timeout_ms)", nil)

// remainingMs is the time left until deadline in whole milliseconds,
// rounded up (a server must not see 0, "no timeout", while time is left);
// 0 when it has passed.
func remainingMs(deadline time.Time) int32 {
	left := time.Until(deadline)
	if left <= 0 {
		return 0
	}
	return int32(min((left+time.Millisecond-1)/time.Millisecond, math.MaxInt32))
}

// release gives the attempt's connection back (or closes a pooled or short
// one that could still receive a late answer).
func (ch *Channel) release(c *call, a *attempt, handle any, answered bool) {
	if g, ok := handle.(*grpcAttempt); ok {
		releaseGRPC(g)
		return
	}
	conn := handle.(*transport.ClientConn)
	if !answered {
		conn.Unregister(a.id) // a late answer is dropped silently, as brpc does
	}
	ch.endpointOf(a).(*transport.Endpoint).Release(conn, answered)
}

// serverFailed takes a server of a cluster out of selection after a
// connection-level failure or an ELOGOFF answer; its health check revives
// it. A single-server channel instead reconnects on the next call.
func (ch *Channel) serverFailed(a *attempt, code controller.Errno, reason string) {
	if a.server == nil {
		return
	}
	switch code {
	case controller.ECONNREFUSED, controller.ETIMEDOUT, controller.ECONNRESET, controller.EHOSTDOWN,
		controller.EFAILEDSOCKET, controller.EEOF, controller.ELOGOFF, controller.EPIPE:
		a.server.Value.(*clusterServer).ep.MarkFailed(code.Name() + ": " + reason)
	}
}

// HandleResponse implements transport.ResponseHandler: the answer to
// attempt a arrived on conn. It runs on the connection's reader; msg and
// att are only valid during the call.
func (a *attempt) HandleResponse(conn *transport.ClientConn, m *baidustd.Meta, msg, att []byte) {
	c := a.call
	ch := c.s.(*Channel)
	if m.ErrorCode != 0 {
		code := controller.Errno(m.ErrorCode)
		text := clipServerText(m.ErrorText)
		ch.serverFailed(a, code, text)
		c.onFailure(a, code, errno.Text(code, text), true)
		return
	}
	handle, won := c.claim(a, conn.RemoteAddr(), conn.LocalAddr())
	if !won {
		if handle != nil {
			ch.release(c, a, handle, true)
		}
		return
	}
	code, text := c.decodeResponse(m, msg, att, ch.opts.MaxBodySize)
	if handle != nil {
		ch.release(c, a, handle, true)
	}
	c.won(a, code, text)
}

// decodeResponse fills the user's response and attachment. It runs once,
// by the owner of completion.
func (c *call) decodeResponse(m *baidustd.Meta, msg, att []byte, maxBodySize int) (controller.Errno, string) {
	if m.ChecksumType != 0 {
		if err := baidustd.VerifyChecksum(m, msg, att); err != nil {
			return controller.ERESPONSE, errno.Text(errno.ERESPONSE, err.Error())
		}
	}
	if m.CompressType != 0 {
		var err error
		// Bounded by MaxBodySize, as an uncompressed response is.
		msg, err = baidustd.DecompressLimit(nil, m.CompressType, msg, maxBodySize)
		if err != nil {
			return controller.ERESPONSE, errno.Text(errno.ERESPONSE, "Fail to decompress response: "+err.Error())
		}
	}
	if err := proto.Unmarshal(msg, c.resp); err != nil {
		return controller.ERESPONSE, errno.Text(errno.ERESPONSE, "Fail to parse response: "+err.Error())
	}
	if len(att) > 0 {
		c.cntl.ResponseAttachment().Write(att)
	}
	if len(m.UserFields) > 0 {
		c.st.ResponseUserFields = m.UserFields // decoded for this frame alone
	}
	return 0, ""
}

// Ended implements transport.Waiter: the call is over, whatever a's
// answer will be.
func (a *attempt) Ended() bool { return a.call.over.Load() }

// HandleFailure implements transport.ResponseHandler: the connection broke
// with attempt a on it.
func (a *attempt) HandleFailure(_ *transport.ClientConn, code controller.Errno, text string) {
	c := a.call
	c.s.(*Channel).serverFailed(a, code, text)
	c.onFailure(a, code, errno.Text(code, text), false)
}

// maxServerText bounds the error text a server's answer may put into the
// caller's Controller.
const maxServerText = 4 << 10

func clipServerText(s string) string {
	if len(s) <= maxServerText {
		return s
	}
	return s[:maxServerText] + "...(" + strconv.Itoa(len(s)-maxServerText) + " more bytes)"
}
