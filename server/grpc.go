package server

import (
	"errors"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/gobrpc/gobrpc/auth"
	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/errno"
	"github.com/gobrpc/gobrpc/internal/ctrl"
	"github.com/gobrpc/gobrpc/protocol/baidustd"
	"github.com/gobrpc/gobrpc/protocol/grpc"
)

// gRPC on the same port (brpc's h2:grpc, unary): a connection that opens
// with the HTTP/2 preface goes to the same net/http server as HTTP/1.1,
// which speaks HTTP/2 to it; a request whose content-type is
// application/grpc comes here, and runs the same handlers through the
// same dispatch (limits, bvars, rpcz) as baidu_std and HTTP requests.

// grpcResponse is what a gRPC answer needs besides the Controller.
type grpcResponse struct {
	w          http.ResponseWriter
	acceptGzip bool
	local      string
}

// fail answers a status with no message (a "trailers-only" response).
func (g *grpcResponse) fail(code grpc.Code, text string) {
	h := g.w.Header()
	h["Content-Type"] = []string{grpc.ContentType}
	h["Grpc-Status"] = []string{strconv.Itoa(int(code))}
	if text != "" {
		h["Grpc-Message"] = []string{grpc.EncodeMessage(text)}
	}
	g.w.WriteHeader(http.StatusOK)
}

// failErrno answers a brpc error code with its status and brpc's text.
func (g *grpcResponse) failErrno(code controller.Errno, reason string) {
	g.fail(grpc.FromErrno(code), baidustd.ServerErrorText(g.local, int32(code), reason))
}

func (s *Server) serveGRPC(w http.ResponseWriter, r *http.Request, internal bool) {
	g := &grpcResponse{w: w, local: localAddr(r)}
	g.acceptGzip = acceptsGzip(r.Header.Get(grpc.HeaderAcceptEncoding))
	if r.Method != http.MethodPost {
		g.fail(grpc.Unimplemented, "gRPC needs POST, not "+clip(r.Method))
		return
	}
	if internal {
		g.failErrno(controller.ENOMETHOD, "The internal port serves builtin services only")
		return
	}
	var ac *auth.Context
	if s.opts.Auth != nil {
		var err error
		if ac, err = s.opts.Auth.VerifyCredential(r.Header.Get("Authorization"), tcpAddr(r.RemoteAddr)); err != nil {
			logAuthFailed.Warn("gobrpc: fail to authenticate", "remote", r.RemoteAddr, "err", err)
			g.fail(grpc.Unauthenticated, errno.Text(controller.ERPCAUTH, "Fail to authenticate: "+clip(err.Error())))
			return
		}
	}
	svcName, methodName, ok := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	if !ok || svcName == "" || methodName == "" || strings.Contains(methodName, "/") {
		g.failErrno(controller.ENOMETHOD, "Fail to find method="+clip(r.URL.Path))
		return
	}
	m, code, text := s.findMethod(svcName, methodName)
	if code != 0 {
		g.failErrno(code, text)
		return
	}
	if s.state.Load() != stateRunning {
		g.failErrno(controller.ELOGOFF, "Server is stopping")
		return
	}
	var timeout time.Duration
	if v := r.Header.Get(grpc.HeaderTimeout); v != "" {
		var err error
		if timeout, err = grpc.DecodeTimeout(v); err != nil {
			g.failErrno(controller.EREQUEST, err.Error())
			return
		}
		if timeout == 0 {
			// Not "no deadline": the client's deadline has passed.
			g.failErrno(controller.ERPCTIMEDOUT, "grpc-timeout is 0: the deadline has passed")
			return
		}
	}
	gzipped := false
	switch enc := r.Header.Get(grpc.HeaderEncoding); enc {
	case "", "identity":
	case "gzip":
		gzipped = true
	default:
		// The spec's answer to an encoding the server does not have.
		w.Header()["Grpc-Accept-Encoding"] = []string{"gzip,identity"}
		g.fail(grpc.Unimplemented, "grpc: compression "+clip(enc)+" is not supported")
		return
	}

	rc := http.NewResponseController(w)
	// A stream may not take longer than the body timeout to send its
	// message. (Not with rc.SetReadDeadline per call: each is a round
	// trip to the connection's goroutine; a deadline in the past is not.)
	bodyTimer := time.AfterFunc(httpBodyTimeout.get(), func() { rc.SetReadDeadline(time.Unix(1, 0)) })
	bufp := getBuf()
	msg, compressed, err := grpc.ReadMessage(r.Body, *bufp, s.opts.MaxBodySize)
	bodyTimer.Stop()
	if err == nil && compressed {
		if !gzipped {
			err = errors.New("grpc: compressed message without grpc-encoding")
		} else {
			// Bounded by max_body_size: a compression bomb fails here.
			var plain []byte
			plain, err = baidustd.DecompressLimit(nil, int32(controller.CompressGzip), msg, s.opts.MaxBodySize)
			if errors.Is(err, baidustd.ErrTooBig) {
				err = grpc.ErrTooLarge
			}
			msg = plain
		}
	}
	if err == nil {
		// A unary request has one message: a second one is refused, as
		// grpc-go refuses it, rather than dropped.
		var one [1]byte
		if n, _ := io.ReadFull(r.Body, one[:]); n > 0 {
			putBuf(bufp)
			g.fail(grpc.Internal, "grpc: more than one request message for a unary method")
			return
		}
	}
	if err != nil {
		putBuf(bufp)
		switch {
		case errors.Is(err, grpc.ErrTooLarge):
			g.fail(grpc.ResourceExhausted, "grpc: received message larger than max_body_size ("+strconv.Itoa(s.opts.MaxBodySize)+" bytes): "+err.Error())
		case err == io.EOF:
			g.failErrno(controller.EREQUEST, "grpc: request has no message")
		default:
			g.failErrno(controller.EREQUEST, "Fail to read request: "+err.Error())
		}
		return
	}
	req := newMessage(m.requestType)
	err = proto.Unmarshal(msg, req)
	putBuf(bufp)
	if err != nil {
		g.failErrno(controller.EREQUEST, "Fail to parse request="+m.fullName+": "+err.Error())
		return
	}
	received := time.Now()
	timeoutMs := int64(-1)
	if timeout > 0 {
		// Whole milliseconds, rounded up, at most MaxInt32 (what
		// baidu_std's timeout_ms carries; 99999999H would overflow).
		timeoutMs = int64(timeout / time.Millisecond)
		if timeout%time.Millisecond != 0 {
			timeoutMs++
		}
		timeoutMs = min(timeoutMs, math.MaxInt32)
	}
	if code, text := s.admit(m, timeoutMs); code != 0 {
		g.failErrno(code, text)
		return
	}
	h := s.newHTTPCall(m, req, received, r, g.local, ac)
	cntl := &h.cntl
	st := ctrl.Of(cntl)
	if timeout > 0 {
		st.Deadline = received.Add(timeout)
		st.TimeoutMsSent = int32(timeoutMs)
	}
	st.RequestUserFields = grpc.MetadataFrom(nil, r.Header)
	if gzipped {
		cntl.SetRequestCompressType(controller.CompressGzip)
		cntl.SetResponseCompressType(controller.CompressGzip) // answered as asked, as grpc-go does
	}
	traceHTTPCall(st, r)
	if !h.runAndWait(r) {
		return // the client left (RST_STREAM, a broken connection)
	}
	if cntl.Failed() {
		code := grpc.StatusOf(cntl)
		grpc.MetadataTo(w.Header(), st.ResponseUserFields)
		g.fail(code, cntl.ErrorText())
		return
	}
	g.answer(h.resp, cntl, m.fullName, rc)
}

// flowControlledAnswer is the size above which an answer is written under
// a timer: a client that stops granting flow-control window must not hold
// the stream (the connection's WriteByteTimeout covers a client that stops
// reading the socket). Smaller answers are written once the handler
// returns, in the same flush as their trailers, and wait at most for the
// connection (its streams are bounded by MaxConcurrentStreams, and Stop
// closes it).
const flowControlledAnswer = 16 << 10

// answer writes a successful response: headers (with the handler's
// response user fields as metadata), one message, then the status in
// trailers.
func (g *grpcResponse) answer(resp proto.Message, cntl *controller.Controller, fullName string, rc *http.ResponseController) {
	bufp := getBuf()
	defer putBuf(bufp)
	out := append((*bufp)[:0], make([]byte, grpc.PrefixSize)...)
	out, err := proto.MarshalOptions{}.MarshalAppend(out, resp)
	if err != nil {
		*bufp = out[:0]
		g.failErrno(controller.ERESPONSE, "Fail to serialize response="+fullName+": "+err.Error())
		return
	}
	h := g.w.Header()
	gz := cntl.ResponseCompressType() == controller.CompressGzip && g.acceptGzip
	if gz {
		z, err := baidustd.Compress(append(out[:0:0], make([]byte, grpc.PrefixSize)...), int32(controller.CompressGzip), out[grpc.PrefixSize:])
		if err != nil {
			*bufp = out[:0]
			g.failErrno(controller.ERESPONSE, "Fail to compress response="+fullName+": "+err.Error())
			return
		}
		*bufp = out[:0]
		out = z
		h["Grpc-Encoding"] = []string{"gzip"}
	} else {
		*bufp = out
	}
	grpc.AppendPrefix(out[:0], gz, len(out)-grpc.PrefixSize)
	h["Content-Type"] = []string{grpc.ContentType}
	grpc.MetadataTo(h, ctrl.Of(cntl).ResponseUserFields)
	g.w.WriteHeader(http.StatusOK)
	if len(out) > flowControlledAnswer {
		// (A deadline in the past resets the stream at once; a deadline
		// set per call would be a round trip to the connection's
		// goroutine.)
		t := time.AfterFunc(httpWriteTimeout.get(), func() { rc.SetWriteDeadline(time.Unix(1, 0)) })
		g.w.Write(out)
		rc.Flush() // the message leaves now; the trailers follow on return
		t.Stop()
	} else {
		g.w.Write(out)
	}
	h[http.TrailerPrefix+"Grpc-Status"] = []string{"0"}
}

// acceptsGzip reads grpc-accept-encoding ("gzip,identity").
func acceptsGzip(v string) bool {
	for part := range strings.SplitSeq(v, ",") {
		if strings.TrimSpace(part) == "gzip" {
			return true
		}
	}
	return false
}
