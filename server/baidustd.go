package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cloudwego/netpoll"
	"google.golang.org/protobuf/proto"

	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/internal/ctrl"
	"github.com/gobrpc/gobrpc/internal/transport"
	"github.com/gobrpc/gobrpc/protocol/baidustd"
)

// serverConn is one accepted baidu_std connection.
type serverConn struct {
	conn   netpoll.Connection
	remote net.Addr
	local  net.Addr
	ctx    context.Context // cancelled when the connection closes
	cancel context.CancelFunc
	writer *transport.FrameWriter
	// inflight counts the requests read and not yet answered: with more
	// than one, other answers are likely to be written soon (FrameWriter).
	inflight atomic.Int32
	created  time.Time
	// overcrowdLogged: a dropped response was logged (once per connection).
	overcrowdLogged atomic.Bool

	// readMeta is reused for every frame read; only the connection's
	// reader touches it. Reuse also keeps the decoder's cache of service
	// and method names, so decoding them does not allocate.
	readMeta baidustd.Meta
}

// serveBaiduStd moves an accepted connection to netpoll: its socket is
// duplicated into a netpoll connection (which then reads it from the first
// byte, only peeked so far) and Go's copy is closed.
func (s *Server) serveBaiduStd(c *net.TCPConn, l *listener) error {
	remote, local := c.RemoteAddr(), c.LocalAddr()
	raw, err := c.SyscallConn()
	if err != nil {
		c.Close()
		return err
	}
	fd, dupErr := -1, error(nil)
	err = raw.Control(func(f uintptr) {
		syscall.ForkLock.RLock()
		fd, dupErr = syscall.Dup(int(f))
		if dupErr == nil {
			syscall.CloseOnExec(fd)
		}
		syscall.ForkLock.RUnlock()
	})
	c.Close()
	if err == nil {
		err = dupErr
	}
	if err != nil {
		return err
	}
	conn, err := netpoll.NewFDConnection(fd)
	if err != nil {
		syscall.Close(fd)
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	sc := &serverConn{conn: conn, remote: remote, local: local, ctx: ctx, cancel: cancel, created: time.Now()}
	sc.writer = transport.NewFrameWriter(conn, func(err error) { s.writeFailed(sc, err) })
	if s.opts.IdleTimeoutSec > 0 {
		conn.SetIdleTimeout(time.Duration(s.opts.IdleTimeoutSec) * time.Second)
	}
	s.mu.Lock()
	if s.state.Load() == stateStopped {
		s.mu.Unlock()
		conn.Close()
		return nil
	}
	s.conns[sc] = struct{}{}
	s.mu.Unlock()
	conn.AddCloseCallback(func(netpoll.Connection) error {
		cancel()
		s.mu.Lock()
		delete(s.conns, sc)
		s.mu.Unlock()
		return nil
	})
	return conn.SetOnRequest(func(context.Context, netpoll.Connection) error { return s.onRequest(sc) })
}

// onRequest runs on netpoll's handler goroutine whenever data arrives. It
// consumes every complete frame; it blocks only while the rest of a frame
// already started is on its way. Handlers run on their own goroutines.
func (s *Server) onRequest(sc *serverConn) error {
	r := sc.conn.Reader()
	for r.Len() > 0 {
		frame, err := transport.NextFrame(r, s.opts.MaxBodySize)
		if err != nil {
			return s.closeConn(sc, err)
		}
		err = s.processFrame(sc, frame)
		r.Release()
		if err != nil {
			return s.closeConn(sc, err)
		}
	}
	return nil
}

func (s *Server) closeConn(sc *serverConn, err error) error {
	if !errors.Is(err, netpoll.ErrEOF) && !errors.Is(err, netpoll.ErrConnClosed) {
		slog.Warn("gobrpc: closing connection", "remote", sc.remote.String(), "err", err)
	}
	sc.conn.Close()
	return err
}

// request is one request being served. The Controller lives inside it:
// one allocation for both.
type request struct {
	cntl     controller.Controller
	s        *Server
	sc       *serverConn
	m        *method
	req      proto.Message
	resp     proto.Message
	corrID   int64
	checksum []byte
	received time.Time
	answered atomic.Bool
}

// processFrame handles one complete frame. An error closes the connection;
// every other failure is answered with brpc's error reply.
func (s *Server) processFrame(sc *serverConn, frame []byte) error {
	meta := &sc.readMeta
	meta.Reset()
	msg, att, err := baidustd.DecodeFrame(frame, meta)
	if err != nil && !errors.Is(err, baidustd.ErrBadAttachmentSize) {
		return fmt.Errorf("bad request frame: %w", err)
	}
	if !meta.HasRequest {
		return errors.New("bad request frame: the meta has no request")
	}
	if err != nil { // attachment_size larger than the payload (brpc step 5)
		return s.reject(sc, meta, controller.EREQUEST, err.Error())
	}
	if s.state.Load() != stateRunning {
		return s.reject(sc, meta, controller.ELOGOFF, "Server is stopping")
	}
	m, code, text := s.findMethod(meta.ServiceName, meta.MethodName)
	if code != 0 {
		return s.reject(sc, meta, code, text)
	}

	if meta.ChecksumType != 0 {
		if err := baidustd.VerifyChecksum(meta, msg, att); err != nil {
			return s.reject(sc, meta, controller.EREQUEST, "Fail to parse request="+m.fullName+": "+err.Error())
		}
	}
	if meta.CompressType != 0 {
		msg, err = baidustd.Decompress(nil, meta.CompressType, msg)
		if err != nil {
			return s.reject(sc, meta, controller.EREQUEST, "Fail to parse request="+m.fullName+": "+err.Error())
		}
	}
	req := newMessage(m.requestType)
	if err := proto.Unmarshal(msg, req); err != nil {
		return s.reject(sc, meta, controller.EREQUEST, "Fail to parse request="+m.fullName+": "+err.Error())
	}
	received := time.Now()
	timeoutMs := int64(-1)
	if meta.TimeoutMs > 0 {
		timeoutMs = int64(meta.TimeoutMs)
	}
	if code, text := s.admit(m, timeoutMs); code != 0 {
		return s.reject(sc, meta, code, text)
	}

	r := &request{
		s: s, sc: sc, m: m, req: req, resp: newMessage(m.respType), received: received,
		corrID: meta.CorrelationID, checksum: cloneBytes(meta.ChecksumValue),
	}
	st := ctrl.Of(&r.cntl)
	st.Server = true
	st.LogID, st.HasLogID = meta.LogID, meta.HasLogID
	st.ServiceName, st.MethodName = meta.ServiceName, meta.MethodName
	st.RemoteSide, st.LocalSide = sc.remote, sc.local
	st.Ctx = sc.ctx
	st.TimeoutMsSent = meta.TimeoutMs
	r.cntl.SetRequestCompressType(controller.CompressType(meta.CompressType))
	if len(att) > 0 {
		r.cntl.RequestAttachment().Write(att)
	}
	sc.inflight.Add(1)
	s.workers.run(r)
	return nil
}

// reject answers a request that never reaches a handler with brpc's error
// reply; the connection stays open.
func (s *Server) reject(sc *serverConn, req *baidustd.Meta, code controller.Errno, reason string) error {
	s.writeError(sc, req, code, reason)
	return nil
}

// findMethod applies brpc's lookup rules: a service name without a dot is
// a short name (ENOSERVICE when unknown); otherwise an unknown service or
// method is ENOMETHOD.
func (s *Server) findMethod(svcName, methodName string) (*method, controller.Errno, string) {
	var svc *service
	if !containsDot(svcName) {
		svc = s.byShort[svcName]
		if svc == nil {
			return nil, controller.ENOSERVICE, "Fail to find service=" + svcName
		}
	} else {
		svc = s.services[svcName]
	}
	if svc != nil {
		if m := svc.methods[methodName]; m != nil {
			return m, 0, ""
		}
	}
	return nil, controller.ENOMETHOD, "Fail to find method=" + svcName + "/" + methodName
}

func containsDot(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == '.' {
			return true
		}
	}
	return false
}

func (r *request) run() {
	defer func() {
		if p := recover(); p != nil {
			slog.Error("gobrpc: handler panicked", "method", r.m.fullName, "panic", p, "stack", string(debug.Stack()))
			if !r.answered.Load() {
				r.cntl.SetFailed(controller.EINTERNAL, "handler of %s panicked: %v", r.m.fullName, p)
				r.done()
			}
		}
	}()
	r.m.handler(&r.cntl, r.req, r.resp, r.done)
}

// done sends the response; it is the `done` handed to the handler.
func (r *request) done() {
	if r.answered.Swap(true) {
		slog.Warn("gobrpc: done called more than once", "method", r.m.fullName)
		return
	}
	defer r.sc.inflight.Add(-1)
	cntl := &r.cntl
	defer r.recordStats()
	m := baidustd.Meta{
		HasResponse:   true,
		CorrelationID: r.corrID,
		ChecksumValue: r.checksum, // brpc echoes the request's value
	}
	if cntl.Failed() {
		m.ErrorCode = int32(cntl.ErrorCode())
		m.ErrorText = cntl.ErrorText()
		r.s.write(r.sc, &m, nil, nil)
		return
	}
	if !r.resp.ProtoReflect().IsValid() {
		r.resp = newMessage(r.m.respType)
	}
	bufp := getBuf()
	defer putBuf(bufp)
	payload, err := proto.MarshalOptions{}.MarshalAppend((*bufp)[:0], r.resp)
	if err != nil {
		cntl.SetFailed(controller.ERESPONSE, "Fail to serialize response=%s: %v", r.m.fullName, err)
		m.ErrorCode, m.ErrorText = int32(cntl.ErrorCode()), cntl.ErrorText()
		r.s.write(r.sc, &m, nil, nil)
		return
	}
	*bufp = payload
	if ct := cntl.ResponseCompressType(); ct != controller.CompressNone {
		compressed, err := baidustd.Compress(nil, int32(ct), payload)
		if err != nil {
			cntl.SetFailed(controller.ERESPONSE, "Fail to compress response=%s: %v", r.m.fullName, err)
			m.ErrorCode, m.ErrorText = int32(cntl.ErrorCode()), cntl.ErrorText()
			r.s.write(r.sc, &m, nil, nil)
			return
		}
		payload = compressed
		m.CompressType = int32(ct)
	}
	r.s.write(r.sc, &m, payload, cntl.ResponseAttachment().Bytes())
}

// recordStats counts the finished request in the method's bvars.
func (r *request) recordStats() { r.s.endCall(r.m, r.received, &r.cntl) }

// writeError answers a request that never reached a handler.
func (s *Server) writeError(sc *serverConn, req *baidustd.Meta, code controller.Errno, reason string) {
	m := baidustd.Meta{
		HasResponse:   true,
		ErrorCode:     int32(code),
		ErrorText:     baidustd.ServerErrorText(sc.local.String(), int32(code), reason),
		CorrelationID: req.CorrelationID,
		ChecksumValue: req.ChecksumValue,
	}
	s.write(sc, &m, nil, nil)
}

func (s *Server) write(sc *serverConn, m *baidustd.Meta, payload, att []byte) {
	bufp := getBuf()
	defer putBuf(bufp)
	frame, err := baidustd.AppendFrame((*bufp)[:0], m, payload, att)
	if err != nil {
		slog.Error("gobrpc: cannot encode response", "err", err)
		return
	}
	*bufp = frame
	err = sc.writer.Write(frame, sc.inflight.Load() > 1)
	switch {
	case errors.Is(err, transport.ErrOvercrowded):
		// As brpc: the client reads too slowly; this answer is dropped (its
		// call times out) and the connection keeps serving.
		if !sc.overcrowdLogged.Swap(true) {
			slog.Warn("gobrpc: dropped a response: the client does not read fast enough (socket_max_unwritten_bytes)",
				"remote", sc.remote.String())
		}
	case err != nil:
		s.writeFailed(sc, err)
	}
}

// writeFailed closes a connection whose write failed: the responses queued
// on it are lost, and its client sees the connection break.
func (s *Server) writeFailed(sc *serverConn, err error) {
	if sc.conn.IsActive() && !errors.Is(err, netpoll.ErrConnClosed) { // log the first failure only
		slog.Warn("gobrpc: cannot write response; closing the connection", "remote", sc.remote.String(), "err", err)
	}
	sc.conn.Close()
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
