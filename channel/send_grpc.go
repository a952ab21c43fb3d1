package channel

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/errno"
	"github.com/gobrpc/gobrpc/internal/h2client"
	"github.com/gobrpc/gobrpc/internal/transport"
	"github.com/gobrpc/gobrpc/protocol/baidustd"
	"github.com/gobrpc/gobrpc/protocol/grpc"
)

// How a Channel with Protocol "h2:grpc" sends attempts: unary gRPC calls
// over net/http's HTTP/2 connections (internal/h2client). Each attempt is
// one HTTP/2 stream; net/http's RoundTrip waits for the answer, so it
// runs on a goroutine of its own, or on a synchronous caller's goroutine
// for its first attempt (call.wait), as baidu_std's caller reads its own
// response. The call's state machine (deadline, retries, backups, who
// wins) is the same as baidu_std's: an abandoned attempt's stream is
// cancelled (RST_STREAM) and the connection stays usable.

// prepareGRPC builds the length-prefixed message every attempt sends (in
// memory of its own: net/http may read a request body after the call
// ended) and the metadata headers.
func (ch *Channel) prepareGRPC(c *call) (controller.Errno, string) {
	rq := &c.rq
	if c.cntl.RequestAttachment().Len() > 0 {
		return controller.EREQUEST, errno.Text(errno.EREQUEST, "gRPC carries no attachment (h2:grpc)")
	}
	msg, err := proto.MarshalOptions{}.MarshalAppend(make([]byte, grpc.PrefixSize, grpc.PrefixSize+64), c.req)
	if err != nil {
		return controller.EREQUEST, errno.Text(errno.EREQUEST, "Fail to serialize request: "+err.Error())
	}
	switch rq.compress {
	case controller.CompressNone:
	case controller.CompressGzip:
		z, err := baidustd.Compress(make([]byte, grpc.PrefixSize, grpc.PrefixSize+len(msg)/2), int32(controller.CompressGzip), msg[grpc.PrefixSize:])
		if err != nil {
			return controller.EREQUEST, errno.Text(errno.EREQUEST, "Fail to compress request: "+err.Error())
		}
		msg = z
	default:
		return controller.EREQUEST, errno.Text(errno.EREQUEST, "gRPC compresses with gzip only, not "+rq.compress.String())
	}
	grpc.AppendPrefix(msg[:0], rq.compress == controller.CompressGzip, len(msg)-grpc.PrefixSize)
	rq.body, rq.msgLen = msg, len(msg)

	h := make(http.Header, 8)
	h["Content-Type"] = []string{grpc.ContentType}
	h["Te"] = []string{"trailers"}
	h["User-Agent"] = []string{"gobrpc"}
	h["Grpc-Accept-Encoding"] = []string{"gzip"}
	if rq.compress == controller.CompressGzip {
		h["Grpc-Encoding"] = []string{"gzip"}
	}
	if bad := grpc.MetadataTo(h, rq.userFields); len(bad) > 0 {
		return controller.EREQUEST, errno.Text(errno.EREQUEST, fmt.Sprintf("user fields %q cannot be gRPC metadata (keys: lower-case letters, digits, -_.; values: printable ASCII unless the key ends in -bin)", bad))
	}
	if rq.traceID != 0 {
		// As brpc's HTTP and h2 clients send the trace.
		h["X-Bd-Trace-Id"] = []string{strconv.FormatUint(uint64(rq.traceID), 10)}
		h["X-Bd-Span-Id"] = []string{strconv.FormatUint(uint64(rq.spanID), 10)}
		if rq.parentSpanID != 0 {
			h["X-Bd-Parent-Span-Id"] = []string{strconv.FormatUint(uint64(rq.parentSpanID), 10)}
		}
	}
	if a := ch.opts.Auth; a != nil {
		credential, err := a.GenerateCredential()
		if err != nil {
			return controller.ERPCAUTH, errno.Text(errno.ERPCAUTH, "Fail to generate credential: "+err.Error())
		}
		h["Authorization"] = []string{credential}
	}
	rq.grpcHeader = h
	rq.grpcPath = "/" + rq.service + "/" + rq.method
	return 0, ""
}

// grpcAttempt is what an attempt holds while its stream is open.
type grpcAttempt struct {
	ep     *h2client.Endpoint
	cc     *http.ClientConn
	ctx    context.Context
	cancel context.CancelFunc // resets the stream of an abandoned attempt
	req    *http.Request
}

// sendGRPC takes a connection (never dialing where a must not wait), then
// starts the stream on a goroutine of its own, or leaves it to the
// synchronous caller (call.wait).
func (ch *Channel) sendGRPC(c *call, a *attempt, ep *h2client.Endpoint) {
	var cc *http.ClientConn
	if a.noDial {
		var ok bool
		if cc, ok = ep.TryAcquire(); !ok {
			a.noDial, a.callerReads = false, false
			c.sendLater(a)
			return
		}
	} else {
		connectTimeout, cutByDeadline := c.connectTimeout, false
		if !c.deadline.IsZero() {
			left := max(time.Until(c.deadline), time.Millisecond)
			if connectTimeout == 0 || left < connectTimeout {
				connectTimeout, cutByDeadline = left, true
			}
		}
		var err error
		if cc, err = ep.Acquire(connectTimeout); err != nil {
			code := dialErrno(err)
			if cutByDeadline && code == controller.ETIMEDOUT {
				// The call's own deadline cut the connect short (the
				// socket's deadline, or the wait for another caller's
				// dial): that says nothing bad of the server, and the
				// deadline timer ends the call with ERPCTIMEDOUT.
				return
			}
			if ch.closed() {
				code = controller.EINVAL
			}
			ch.serverFailed(a, code, err.Error())
			c.onFailure(a, code, errno.Text(code, fmt.Sprintf("Fail to connect %s: %v", ep.Addr(), err)), false)
			return
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	g := &grpcAttempt{ep: ep, cc: cc, ctx: ctx, cancel: cancel}
	rq := &c.rq
	header := rq.grpcHeader
	if !c.deadline.IsZero() {
		header = header.Clone()
		header["Grpc-Timeout"] = []string{grpc.EncodeTimeout(time.Until(c.deadline))}
	}
	g.req = &http.Request{
		Method:        http.MethodPost,
		URL:           &url.URL{Scheme: "http", Host: ep.Addr(), Path: rq.grpcPath},
		Proto:         "HTTP/2.0",
		ProtoMajor:    2,
		Header:        header,
		Body:          io.NopCloser(bytes.NewReader(rq.body)),
		ContentLength: int64(len(rq.body)),
		Host:          ep.Addr(),
	}
	g.req = g.req.WithContext(ctx)
	if !c.attach(a, g) {
		cancel()
		ep.Release(cc)
		if a.backup {
			c.lateBackupSent(a)
		}
		return
	}
	if a.callerReads {
		c.callerTrip = func() { ch.roundTrip(c, a, g) }
		return
	}
	go ch.roundTrip(c, a, g)
}

// roundTrip sends the request and reads the answer: one message and the
// status in trailers, or a status alone.
func (ch *Channel) roundTrip(c *call, a *attempt, g *grpcAttempt) {
	resp, err := g.cc.RoundTrip(g.req)
	if err != nil {
		if g.ctx.Err() != nil {
			return // abandoned: the call has moved on
		}
		if c.pastDeadline() {
			// A gRPC server resets the stream at the deadline it was
			// given, which may come a moment before the call's own
			// timer: the call timed out all the same.
			c.onTimeout()
			return
		}
		code := streamErrno(err)
		ch.connectionFailed(a, g, code, err)
		c.onFailure(a, code, errno.Text(code, fmt.Sprintf("Fail to call %s: %v", g.ep.Addr(), err)), false)
		return
	}
	defer resp.Body.Close()
	status, text, msg, compressed, err := readGRPCResponse(resp, ch.opts.MaxBodySize)
	if err != nil {
		if g.ctx.Err() != nil {
			return
		}
		if c.pastDeadline() {
			c.onTimeout() // as above
			return
		}
		code := streamErrno(err)
		if errors.Is(err, grpc.ErrTooLarge) || errors.Is(err, errBadResponse) {
			code = controller.ERESPONSE
		} else {
			ch.connectionFailed(a, g, code, err)
		}
		c.onFailure(a, code, errno.Text(code, fmt.Sprintf("Fail to read the answer of %s: %v", g.ep.Addr(), err)), false)
		return
	}
	if status != grpc.OK {
		// An answer: the server is well, and the error is retried only as
		// its code says (UNAVAILABLE and RESOURCE_EXHAUSTED are).
		code := grpc.ToErrno(status)
		c.mu.Lock()
		if c.liveLocked(a) && !c.ended {
			c.grpcStatus = uint32(status)
		}
		c.mu.Unlock()
		c.onFailure(a, code, errno.Text(code, fmt.Sprintf("[%s] %s: %s", g.ep.Addr(), status, text)), true)
		return
	}
	handle, won := c.claim(a, g.ep.RemoteAddr(), nil)
	if handle != nil {
		ch.release(c, a, handle, true)
	}
	if !won {
		return
	}
	code, etext := c.decodeGRPC(resp, msg, compressed, ch.opts.MaxBodySize)
	c.won(a, code, etext)
}

// connectionFailed takes the server out of selection when the attempt's
// connection broke; a stream the server reset alone (RST_STREAM, a
// refused stream) is retried without that.
func (ch *Channel) connectionFailed(a *attempt, g *grpcAttempt, code controller.Errno, err error) {
	if g.cc.Err() != nil {
		ch.serverFailed(a, code, err.Error())
	}
}

// pastDeadline reports whether the call's deadline has passed.
func (c *call) pastDeadline() bool {
	return !c.deadline.IsZero() && !time.Now().Before(c.deadline)
}

var errBadResponse = errors.New("not a gRPC response")

// readGRPCResponse reads an answer: its status (from the trailers, or the
// headers of a trailers-only answer) and its message.
func readGRPCResponse(resp *http.Response, maxBodySize int) (status grpc.Code, text string, msg []byte, compressed bool, err error) {
	if resp.StatusCode != http.StatusOK {
		// Not from a gRPC server's handler (a proxy, an HTTP server): the
		// spec's mapping of HTTP statuses.
		return httpStatusCode(resp.StatusCode), "HTTP status " + strconv.Itoa(resp.StatusCode), nil, false, nil
	}
	if s := resp.Header.Get(grpc.HeaderStatus); s != "" {
		// Trailers-only: a status and no message, which an OK cannot be.
		status, text = parseStatus(s, resp.Header.Get(grpc.HeaderMessage))
		if status == grpc.OK {
			return 0, "", nil, false, fmt.Errorf("%w: OK without a message (status in the headers)", errBadResponse)
		}
		return status, text, nil, false, nil
	}
	if !grpc.IsGRPC(resp.Header.Get("Content-Type")) {
		return 0, "", nil, false, fmt.Errorf("%w: content-type %q", errBadResponse, resp.Header.Get("Content-Type"))
	}
	msg, compressed, err = grpc.ReadMessage(resp.Body, nil, maxBodySize)
	if err == io.EOF {
		msg, err = nil, nil // no message: the status says why
	}
	if err != nil {
		return 0, "", nil, false, brokenStream(err)
	}
	// The trailers come after the body's end, which must be the stream's
	// (END_STREAM: io.EOF), not a connection that broke.
	var one [1]byte
	if n, err := resp.Body.Read(one[:]); n > 0 {
		return 0, "", nil, false, fmt.Errorf("%w: more than one message in a unary answer", errBadResponse)
	} else if err == nil {
		if n, err = io.ReadFull(resp.Body, one[:]); n > 0 {
			return 0, "", nil, false, fmt.Errorf("%w: more than one message in a unary answer", errBadResponse)
		} else if err != io.EOF {
			return 0, "", nil, false, brokenStream(err)
		}
	} else if err != io.EOF {
		return 0, "", nil, false, brokenStream(err)
	}
	s := resp.Trailer.Get(grpc.HeaderStatus)
	if s == "" {
		return 0, "", nil, false, fmt.Errorf("%w: no grpc-status in trailers", errBadResponse)
	}
	status, text = parseStatus(s, resp.Trailer.Get(grpc.HeaderMessage))
	if status == grpc.OK && msg == nil {
		return 0, "", nil, false, fmt.Errorf("%w: OK without a message", errBadResponse)
	}
	return status, text, msg, compressed, nil
}

func parseStatus(s, msg string) (grpc.Code, string) {
	v, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return grpc.Unknown, "malformed grpc-status " + strconv.Quote(clipServerText(s))
	}
	return grpc.Code(v), strings.ToValidUTF8(clipServerText(grpc.DecodeMessage(msg)), "\uFFFD")
}

// errStreamBroke is a stream that ended inside its answer (the connection
// closed or broke): EFAILEDSOCKET, retried on another server.
var errStreamBroke = errors.New("the stream ended before the answer's end")

// brokenStream says that err, met while reading an answer, is the stream's
// or the connection's end (an answer cut short), not a malformed answer.
func brokenStream(err error) error {
	if err == io.ErrUnexpectedEOF || err == io.EOF {
		return fmt.Errorf("%w: %w", errStreamBroke, err)
	}
	return err
}

// httpStatusCode is the gRPC spec's mapping of an HTTP status that no
// gRPC server sent (doc/http-grpc-status-mapping.md).
func httpStatusCode(s int) grpc.Code {
	switch s {
	case http.StatusBadRequest:
		return grpc.Internal
	case http.StatusUnauthorized:
		return grpc.Unauthenticated
	case http.StatusForbidden:
		return grpc.PermissionDenied
	case http.StatusNotFound:
		return grpc.Unimplemented
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return grpc.Unavailable
	}
	return grpc.Unknown
}

// decodeGRPC fills the user's response and the response user fields (the
// answer's metadata). It runs once, by the owner of completion.
func (c *call) decodeGRPC(resp *http.Response, msg []byte, compressed bool, maxBodySize int) (controller.Errno, string) {
	if compressed {
		if enc := resp.Header.Get(grpc.HeaderEncoding); enc != "gzip" {
			return controller.ERESPONSE, errno.Text(errno.ERESPONSE, "compressed response with grpc-encoding "+strconv.Quote(clipServerText(enc)))
		}
		var err error
		if msg, err = baidustd.DecompressLimit(nil, int32(controller.CompressGzip), msg, maxBodySize); err != nil {
			return controller.ERESPONSE, errno.Text(errno.ERESPONSE, "Fail to decompress response: "+err.Error())
		}
	}
	if err := proto.Unmarshal(msg, c.resp); err != nil {
		return controller.ERESPONSE, errno.Text(errno.ERESPONSE, "Fail to parse response: "+err.Error())
	}
	fields := grpc.MetadataFrom(nil, resp.Header)
	c.st.ResponseUserFields = grpc.MetadataFrom(fields, resp.Trailer)
	return 0, ""
}

// releaseGRPC ends an attempt's stream (reset unless it completed) and
// gives its connection back.
func releaseGRPC(g *grpcAttempt) {
	g.cancel()
	g.ep.Release(g.cc)
}

// dialErrno is the code of a failed connect.
func dialErrno(err error) controller.Errno {
	if errors.Is(err, context.DeadlineExceeded) {
		return controller.ETIMEDOUT
	}
	if errors.Is(err, h2client.ErrClosed) {
		return controller.EINVAL
	}
	return transport.ErrnoOf(err)
}

// streamErrno is the code of a stream that broke: a reset or a closed
// connection (EFAILEDSOCKET, retried on another server).
func streamErrno(err error) controller.Errno {
	code := transport.ErrnoOf(err)
	if code == 0 || code == controller.EINTERNAL {
		return controller.EFAILEDSOCKET
	}
	return code
}
