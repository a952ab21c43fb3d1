package server

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/gobrpc/gobrpc/auth"
	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/internal/ctrl"
	"github.com/gobrpc/gobrpc/internal/ratelog"
	"github.com/gobrpc/gobrpc/internal/transport"
	"github.com/gobrpc/gobrpc/protocol/baidustd"
	"github.com/gobrpc/gobrpc/rpcz"
)

// baidu_std on the server: transport reads the frames of an accepted
// connection, onRequest parses and admits each request, and baiduCall
// sends the answer when the handler calls done.

// serveBaiduStd hands an accepted connection to transport.
func (s *Server) serveBaiduStd(c *net.TCPConn, l *listener) error {
	sc, err := transport.Serve(c, transport.ServeOptions{
		MaxBodySize: s.opts.MaxBodySize,
		Internal:    l.internal,
		OnRequest:   s.onRequest,
		OnClose: func(sc *transport.ServerConn) {
			s.mu.Lock()
			delete(s.conns, sc)
			s.mu.Unlock()
		},
	})
	if err != nil {
		return err
	}
	s.mu.Lock()
	if s.state.Load() == stateStopped {
		s.mu.Unlock()
		sc.Close()
		return nil
	}
	s.conns[sc] = struct{}{}
	s.mu.Unlock()
	if sc.Closed() { // closed before it was listed: OnClose found nothing to delete
		s.mu.Lock()
		delete(s.conns, sc)
		s.mu.Unlock()
	}
	return nil
}

// baiduCall is a request that came over baidu_std.
type baiduCall struct {
	serverCall
	sc       *transport.ServerConn
	corrID   int64
	checksum []byte
}

// onRequest handles one frame, on the connection's reader. An error closes
// the connection; every other failure is answered with brpc's error reply.
func (s *Server) onRequest(sc *transport.ServerConn, meta *baidustd.Meta, msg, att []byte, err error) (transport.Task, error) {
	if err != nil && !errors.Is(err, baidustd.ErrBadAttachmentSize) {
		return nil, fmt.Errorf("bad request frame: %w", err)
	}
	if !meta.HasRequest {
		return nil, errors.New("bad request frame: the meta has no request")
	}
	sess := session(sc)
	if s.opts.Auth != nil && !sess.verified {
		if sess.rejected {
			// The connection is closing: the requests written behind the
			// refused one get the same answer, not the close's EOF (which
			// a client would retry).
			s.refuseCredential(sc, meta, sess.refusal)
			return nil, nil
		}
		if !s.authenticate(sc, sess, meta) {
			return nil, nil
		}
	}
	if err != nil { // attachment_size larger than the payload (brpc step 5)
		return nil, s.reject(sc, meta, controller.EREQUEST, err.Error())
	}
	if s.state.Load() != stateRunning {
		return nil, s.reject(sc, meta, controller.ELOGOFF, "Server is stopping")
	}
	if sc.Internal() {
		return nil, s.reject(sc, meta, controller.ENOMETHOD, "The internal port serves builtin services only")
	}
	m, code, text := s.findMethod(meta.ServiceName, meta.MethodName)
	if code != 0 {
		return nil, s.reject(sc, meta, code, text)
	}

	if meta.ChecksumType != 0 {
		if err := baidustd.VerifyChecksum(meta, msg, att); err != nil {
			return nil, s.reject(sc, meta, controller.EREQUEST, "Fail to parse request="+m.fullName+": "+err.Error())
		}
	}
	if meta.CompressType != 0 {
		// Bounded by max_body_size, as an uncompressed request is: a
		// compression bomb fails here instead of filling memory.
		msg, err = baidustd.DecompressLimit(nil, meta.CompressType, msg, s.opts.MaxBodySize)
		if err != nil {
			return nil, s.reject(sc, meta, controller.EREQUEST, "Fail to parse request="+m.fullName+": "+err.Error())
		}
	}
	req := newMessage(m.requestType)
	if err := proto.Unmarshal(msg, req); err != nil {
		return nil, s.reject(sc, meta, controller.EREQUEST, "Fail to parse request="+m.fullName+": "+err.Error())
	}
	received := time.Now()
	timeoutMs := int64(-1)
	if meta.TimeoutMs > 0 {
		timeoutMs = int64(meta.TimeoutMs)
	}
	if code, text := s.admit(m, timeoutMs); code != 0 {
		return nil, s.reject(sc, meta, code, text)
	}

	r := &baiduCall{
		serverCall: serverCall{s: s, m: m, req: req, resp: newMessage(m.respType), received: received},
		sc:         sc, corrID: meta.CorrelationID, checksum: cloneBytes(meta.ChecksumValue),
	}
	r.replier = r
	st := ctrl.Of(&r.cntl)
	st.Server = true
	st.LogID, st.HasLogID = meta.LogID, meta.HasLogID
	st.ServiceName, st.MethodName = string(m.desc.Parent().FullName()), string(m.desc.Name())
	st.RemoteSide, st.LocalSide = sc.RemoteAddr(), sc.LocalAddr()
	st.ConnCtx = sc.Context()
	st.TimeoutMsSent = meta.TimeoutMs
	if meta.TimeoutMs > 0 {
		st.Deadline = received.Add(time.Duration(meta.TimeoutMs) * time.Millisecond)
	}
	st.Auth = sess.auth
	st.RequestUserFields = meta.UserFields // decoded for this frame alone
	traceServerCall(st, meta.TraceID, meta.SpanID, meta.ParentSpanID)
	r.cntl.SetRequestCompressType(controller.CompressType(meta.CompressType))
	if len(att) > 0 {
		r.cntl.RequestAttachment().Write(att)
	}
	// Nothing else of the connection waits: the reader runs the request
	// itself (see transport.ServerConn.RunsInPlace).
	inPlace := sc.RunsInPlace()
	sc.RequestStarted()
	if inPlace {
		return &r.serverCall, nil
	}
	s.workers.run(&r.serverCall)
	return nil, nil
}

// reject answers a request that never reaches a handler with brpc's error
// reply; the connection stays open.
func (s *Server) reject(sc *transport.ServerConn, req *baidustd.Meta, code controller.Errno, reason string) error {
	m := baidustd.Meta{
		HasResponse:   true,
		ErrorCode:     int32(code),
		ErrorText:     baidustd.ServerErrorText(sc.LocalAddr().String(), int32(code), reason),
		CorrelationID: req.CorrelationID,
		ChecksumValue: req.ChecksumValue,
	}
	s.writeFrame(sc, &m, nil, nil)
	return nil
}

// reply sends the handler's answer; it implements replier.
func (r *baiduCall) reply(c *serverCall) {
	defer r.sc.RequestDone()
	cntl := &c.cntl
	m := baidustd.Meta{
		HasResponse:   true,
		CorrelationID: r.corrID,
		ChecksumValue: r.checksum, // brpc echoes the request's value
		UserFields:    ctrl.Of(cntl).ResponseUserFields,
	}
	fail := func() {
		m.ErrorCode, m.ErrorText = int32(cntl.ErrorCode()), cntl.ErrorText()
		c.s.writeFrame(r.sc, &m, nil, nil)
	}
	if cntl.Failed() {
		fail()
		return
	}
	if !c.resp.ProtoReflect().IsValid() {
		c.resp = newMessage(c.m.respType)
	}
	bufp := getBuf()
	defer putBuf(bufp)
	payload, err := proto.MarshalOptions{}.MarshalAppend((*bufp)[:0], c.resp)
	if err != nil {
		cntl.SetFailed(controller.ERESPONSE, "Fail to serialize response=%s: %v", c.m.fullName, err)
		fail()
		return
	}
	*bufp = payload
	if ct := cntl.ResponseCompressType(); ct != controller.CompressNone {
		compressed, err := baidustd.Compress(nil, int32(ct), payload)
		if err != nil {
			cntl.SetFailed(controller.ERESPONSE, "Fail to compress response=%s: %v", c.m.fullName, err)
			fail()
			return
		}
		payload = compressed
		m.CompressType = int32(ct)
	}
	c.s.writeFrame(r.sc, &m, payload, cntl.ResponseAttachment().Bytes())
}

// writeFrame encodes one answer and hands it to the connection, which
// never waits for the client: the head and the message are copied into one
// buffer, the attachment is written from where it is.
func (s *Server) writeFrame(sc *transport.ServerConn, m *baidustd.Meta, payload, att []byte) {
	bufp := getBuf()
	defer putBuf(bufp)
	head, err := baidustd.AppendFrameHead((*bufp)[:0], m, len(payload), len(att))
	if err != nil {
		slog.Error("gobrpc: cannot encode response", "err", err)
		return
	}
	head = append(head, payload...)
	*bufp = head
	sc.Reply(head, att) // an overcrowded answer is dropped; a failed write closes the connection
}

// connSession is what the server keeps about a baidu_std connection; only
// the connection's reader touches it.
type connSession struct {
	verified bool          // the Authenticator accepted the first request
	rejected bool          // it did not: ERPCAUTH was answered, the connection is closing
	refusal  string        // why
	auth     *auth.Context // what it verified
}

func session(sc *transport.ServerConn) *connSession {
	if s, ok := sc.Session.(*connSession); ok {
		return s
	}
	s := &connSession{}
	sc.Session = s
	return s
}

// authenticateCloseDelay is how long a connection whose credential was
// refused stays open after the ERPCAUTH answer, so that the answer reaches
// the client before the close (a close with unread requests resets the
// connection, and a reset can destroy the answer in flight).
const authenticateCloseDelay = 200 * time.Millisecond

// authenticate verifies the credential of a connection's first request,
// as brpc's VerifyRpcRequest: on failure it answers ERPCAUTH ("Fail to
// authenticate: <reason>"), drops the connection's later requests and
// closes it. It reports whether the request may be served.
func (s *Server) authenticate(sc *transport.ServerConn, sess *connSession, meta *baidustd.Meta) bool {
	ac, err := s.opts.Auth.VerifyCredential(string(meta.AuthenticationData), sc.RemoteAddr())
	if err == nil {
		sess.verified, sess.auth = true, ac
		return true
	}
	sess.rejected, sess.refusal = true, "Fail to authenticate: "+clip(err.Error())
	s.refuseCredential(sc, meta, sess.refusal)
	logAuthFailed.Warn("gobrpc: fail to authenticate", "remote", sc.RemoteAddr().String(), "err", err)
	time.AfterFunc(authenticateCloseDelay, sc.Close)
	return false
}

// refuseCredential answers a request of a refused connection with
// ERPCAUTH, as brpc answers the refused one.
func (s *Server) refuseCredential(sc *transport.ServerConn, req *baidustd.Meta, text string) {
	m := baidustd.Meta{
		HasResponse:   true,
		ErrorCode:     int32(controller.ERPCAUTH),
		ErrorText:     text,
		CorrelationID: req.CorrelationID,
	}
	s.writeFrame(sc, &m, nil, nil)
}

var logAuthFailed = ratelog.New(time.Second)

// traceServerCall gives a call its rpcz span: the client's (brpc's server
// span shares the client span's id), or a new trace when rpcz is on, so
// calls the handler makes with cntl.Context() join it.
func traceServerCall(st *ctrl.State, traceID, spanID, parentSpanID int64) {
	switch {
	case traceID != 0:
		st.Trace = ctrl.Trace{TraceID: traceID, SpanID: spanID}
		st.ParentSpanID = parentSpanID
	case rpcz.On():
		st.Trace = ctrl.Trace{TraceID: rpcz.NewID(), SpanID: rpcz.NewID()}
	}
}

func cloneBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append(make([]byte, 0, len(b)), b...)
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

func getBuf() *[]byte { return bufPool.Get().(*[]byte) }

func putBuf(b *[]byte) {
	if cap(*b) <= 64<<10 {
		bufPool.Put(b)
	}
}
