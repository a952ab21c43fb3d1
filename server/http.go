package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/gobrpc/gobrpc/auth"
	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/errno"
	"github.com/gobrpc/gobrpc/internal/ctrl"
	"github.com/gobrpc/gobrpc/protocol/baidustd"
	"github.com/gobrpc/gobrpc/protocol/grpc"
	"github.com/gobrpc/gobrpc/server/builtin"
)

// HTTP on the same port: net/http parses HTTP/1.1 (a connection is handed
// to it after its first bytes were peeked); this handler routes builtin
// pages and calls protobuf services with JSON or protobuf bodies, as
// brpc's HTTP protocol does.

type connInfoKey struct{}

// taggedConn remembers which port a connection came in on.
type taggedConn struct {
	net.Conn
	internal bool
}

func (s *Server) newHTTPServer() {
	// s.httpConns was made by New: the bvar sampler may be reading it already.
	s.httpLn, s.h2Ln = newChanListener(s.addr), newChanListener(s.addr)
	// Two servers, each with one protocol: the accept loop has told them
	// apart already. (One server with both would peek for HTTP/2's
	// preface itself, and wait for 14 bytes that a short HTTP/1 request
	// never sends.)
	var h1, h2 http.Protocols
	h1.SetHTTP1(true)
	h2.SetUnencryptedHTTP2(true) // HTTP/2 with prior knowledge: gRPC without TLS
	s.http, s.h2 = s.newNetHTTPServer(&h1), s.newNetHTTPServer(&h2)
	for _, p := range []struct {
		srv *http.Server
		ln  *chanListener
	}{{s.http, s.httpLn}, {s.h2, s.h2Ln}} {
		s.loops.Add(1)
		go func() {
			defer s.loops.Done()
			_ = p.srv.Serve(p.ln)
		}()
	}
}

func (s *Server) newNetHTTPServer(protocols *http.Protocols) *http.Server {
	idle := httpIdleTimeout.get()
	if s.opts.IdleTimeoutSec > 0 {
		idle = time.Duration(s.opts.IdleTimeoutSec) * time.Second
	}
	return &http.Server{
		Handler:   s,
		Protocols: protocols,
		HTTP2: &http.HTTP2Config{
			// A peer that stops reading loses its connection.
			WriteByteTimeout: httpWriteTimeout.get(),
		},
		ReadHeaderTimeout: s.sniffDeadline(),
		IdleTimeout:       idle,
		ErrorLog:          slog.NewLogLogger(slog.Default().Handler(), slog.LevelWarn),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			tc, _ := c.(*taggedConn)
			return context.WithValue(ctx, connInfoKey{}, tc)
		},
		ConnState: func(c net.Conn, state http.ConnState) {
			s.mu.Lock()
			defer s.mu.Unlock()
			switch state {
			case http.StateNew:
				s.httpConns[c] = time.Now()
			case http.StateClosed, http.StateHijacked:
				delete(s.httpConns, c)
			}
		},
	}
}

// serveHTTPConn hands a connection to net/http: HTTP/1.1, or HTTP/2 when
// it opened with the preface.
func (s *Server) serveHTTPConn(c *net.TCPConn, l *listener, h2 bool) {
	ln := s.httpLn
	if h2 {
		ln = s.h2Ln
	}
	if !ln.offer(&taggedConn{Conn: c, internal: l.internal}) {
		c.Close()
	}
}

// ServeHTTP routes an HTTP request: a builtin page, or a call to
// /pkg.Service/Method (or /Service/Method).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tc, _ := r.Context().Value(connInfoKey{}).(*taggedConn)
	internal := tc != nil && tc.internal
	if r.ProtoMajor == 2 && grpc.IsGRPC(r.Header.Get("Content-Type")) {
		s.serveGRPC(w, r, internal)
		return
	}
	builtinPage := s.pages != nil && builtin.IsBuiltinPath(r.URL.Path)
	var ac *auth.Context
	if s.opts.Auth != nil && !(builtinPage && internal) {
		// As brpc: every call and the builtin pages of the main port need
		// the credential, in the Authorization header; the internal port's
		// pages do not.
		var err error
		if ac, err = s.opts.Auth.VerifyCredential(r.Header.Get("Authorization"), tcpAddr(r.RemoteAddr)); err != nil {
			// 403, as brpc's SendUnauthorizedResponse answers (its status
			// table's 401 is not what it sends).
			logAuthFailed.Warn("gobrpc: fail to authenticate", "remote", r.RemoteAddr, "err", err)
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusForbidden)
			io.WriteString(w, errno.Text(controller.ERPCAUTH, "Fail to authenticate: "+clip(err.Error())))
			return
		}
	}
	if builtinPage {
		if s.internalLn != nil && !internal {
			writeHTTPError(w, controller.EPERM, errno.Text(controller.EPERM, "Builtin services are only served on the internal port "+s.internalLn.ln.Addr().String()))
			return
		}
		s.pages.ServeHTTP(w, r)
		return
	}
	if internal {
		writeHTTPError(w, controller.ENOMETHOD, errno.Text(controller.ENOMETHOD, "The internal port serves builtin services only"))
		return
	}
	s.servePB(w, r, ac)
}

// headerID reads a decimal id header; 0 when absent or malformed.
func headerID(r *http.Request, name string) int64 {
	v, err := strconv.ParseUint(r.Header.Get(name), 10, 64)
	if err != nil {
		return 0
	}
	return int64(v)
}

func writeHTTPError(w http.ResponseWriter, code controller.Errno, text string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code.HTTPStatus())
	io.WriteString(w, text)
}

// isProtoContent tells protobuf bodies from JSON ones (the default).
func isProtoContent(ct string) bool {
	ct = strings.ToLower(ct)
	return strings.Contains(ct, "proto")
}

// Deadlines of an HTTP connection, so that a slow or silent client cannot
// hold one open: reading a request's headers (sniffTimeout), reading its
// body, writing an RPC's answer, and waiting for the next request
// (Options.IdleTimeoutSec when set). Variables for tests.
var (
	httpBodyTimeout  = newSetting(60 * time.Second)
	httpWriteTimeout = newSetting(60 * time.Second)
	httpIdleTimeout  = newSetting(60 * time.Second)
)

// httpCall is a request that came over HTTP. The handler runs on net/http's
// goroutine, which then waits for done (or for the client to leave) and
// writes the answer.
type httpCall struct {
	serverCall
	answered chan struct{}
}

// reply implements replier: the waiting HTTP goroutine writes the answer.
func (h *httpCall) reply(*serverCall) { close(h.answered) }

// newHTTPCall makes the call of a request that came over HTTP/1.1 or
// HTTP/2 (gRPC), admitted already.
func (s *Server) newHTTPCall(m *method, req proto.Message, received time.Time, r *http.Request, local string, ac *auth.Context) *httpCall {
	h := &httpCall{
		serverCall: serverCall{s: s, m: m, req: req, resp: newMessage(m.respType), received: received},
		answered:   make(chan struct{}),
	}
	h.replier = h
	st := ctrl.Of(&h.cntl)
	st.Server = true
	st.ServiceName, st.MethodName = string(m.desc.Parent().FullName()), string(m.desc.Name())
	st.RemoteSide = tcpAddr(r.RemoteAddr)
	st.LocalSide = tcpAddr(local)
	st.ConnCtx = r.Context()
	st.Auth = ac
	return h
}

// traceHTTPCall joins the client's trace: brpc's HTTP clients (and
// gobrpc's gRPC channel) send it in x-bd-* headers, in decimal.
func traceHTTPCall(st *ctrl.State, r *http.Request) {
	traceServerCall(st, headerID(r, "x-bd-trace-id"), headerID(r, "x-bd-span-id"), headerID(r, "x-bd-parent-span-id"))
}

// runAndWait runs the handler on net/http's goroutine and waits for done;
// false when the client left first (nobody waits for the answer; the call
// still ends, and counts, when the handler calls done).
func (h *httpCall) runAndWait(r *http.Request) bool {
	h.Run()
	select {
	case <-h.answered:
		return true
	case <-r.Context().Done():
		return false
	}
}

func (s *Server) servePB(w http.ResponseWriter, r *http.Request, ac *auth.Context) {
	local := localAddr(r)
	fail := func(code controller.Errno, reason string) {
		writeHTTPError(w, code, baidustd.ServerErrorText(local, int32(code), reason))
	}
	path := strings.Trim(r.URL.Path, "/")
	svcName, methodName, ok := strings.Cut(path, "/")
	if !ok || svcName == "" || methodName == "" || strings.Contains(methodName, "/") {
		fail(controller.ENOMETHOD, "Fail to find method="+clip(path))
		return
	}
	m, code, text := s.findMethod(svcName, methodName)
	if code != 0 {
		fail(code, text)
		return
	}
	if s.state.Load() != stateRunning {
		fail(controller.ELOGOFF, "Server is stopping")
		return
	}
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(httpBodyTimeout.get()))
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(s.opts.MaxBodySize)))
	rc.SetReadDeadline(time.Time{}) // the handler may take its time
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			w.Header().Set("Connection", "close")
			http.Error(w, "request body exceeds max_body_size", http.StatusRequestEntityTooLarge)
			return
		}
		fail(controller.EREQUEST, "Fail to read request body: "+err.Error())
		return
	}
	protoBody := isProtoContent(r.Header.Get("Content-Type"))
	req := newMessage(m.requestType)
	if protoBody {
		err = proto.Unmarshal(body, req)
	} else if len(body) > 0 {
		err = protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(body, req)
	}
	if err == nil {
		err = proto.CheckInitialized(req)
	}
	if err != nil {
		fail(controller.EREQUEST, "Fail to parse request="+m.fullName+": "+err.Error())
		return
	}
	received := time.Now()
	if code, text := s.admit(m, -1); code != 0 {
		fail(code, text)
		return
	}
	h := s.newHTTPCall(m, req, received, r, local, ac)
	cntl := &h.cntl
	traceHTTPCall(ctrl.Of(cntl), r)
	if !h.runAndWait(r) {
		return
	}

	rc.SetWriteDeadline(time.Now().Add(httpWriteTimeout.get()))
	if cntl.Failed() {
		writeHTTPError(w, cntl.ErrorCode(), cntl.ErrorText())
		return
	}
	var out []byte
	if protoBody {
		out, err = proto.Marshal(h.resp)
		w.Header().Set("Content-Type", "application/proto")
	} else {
		out, err = protojson.Marshal(h.resp)
		w.Header().Set("Content-Type", "application/json")
	}
	if err != nil {
		fail(controller.ERESPONSE, "Fail to serialize response="+m.fullName+": "+err.Error())
		return
	}
	w.Write(out)
}

func localAddr(r *http.Request) string {
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		return a.String()
	}
	return ""
}

// tcpAddr parses "ip:port" (what net/http gives as addresses) without a
// resolver.
func tcpAddr(s string) net.Addr {
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return nil
	}
	return net.TCPAddrFromAddrPort(ap)
}
