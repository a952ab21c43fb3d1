package server_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/gobrpc/gobrpc/channel"
	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/protocol/baidustd"
	"github.com/gobrpc/gobrpc/server"
	"github.com/gobrpc/gobrpc/testsupport/echotest"
	"github.com/gobrpc/gobrpc/testsupport/testpb"
)

// Tests of issue 13's server items: each failed (most by crashing or
// hanging the test process) before the fix.

// echoOnce makes one call through a fresh channel and fails the test if it
// does not succeed: the server still serves.
func echoOnce(t *testing.T, addr string) {
	t.Helper()
	opts := channel.DefaultOptions()
	opts.TimeoutMs = 5000
	var ch channel.Channel
	require.NoError(t, ch.Init(addr, "", &opts))
	defer ch.Close()
	cntl := controller.New()
	resp := &testpb.EchoResponse{}
	testpb.NewEchoServiceStub(&ch).Echo(cntl, &testpb.EchoRequest{Message: proto.String("alive")}, resp, nil)
	require.NoError(t, cntl.Err())
	assert.Equal(t, "alive", resp.GetMessage())
}

// resetConn connects and sends a TCP reset after sending head.
func resetConn(t *testing.T, addr string, head []byte) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	require.NoError(t, err)
	tc := c.(*net.TCPConn)
	if len(head) > 0 {
		_, err = tc.Write(head)
		require.NoError(t, err)
	}
	require.NoError(t, tc.SetLinger(0)) // close sends RST
	require.NoError(t, tc.Close())
}

// Item 1: a reset before the first byte (a port scanner, a TCP health
// check) used to panic the server with slice bounds out of range [:-1].
func TestResetBeforeFirstByteDoesNotKillTheServer(t *testing.T) {
	srv, _ := echotest.StartServer(t, nil)
	addr := srv.ListenAddress().String()
	for range 20 {
		resetConn(t, addr, nil)
		resetConn(t, addr, []byte("PR"))
		resetConn(t, addr, []byte("GE"))
	}
	echoOnce(t, addr)
}

// Item 1: the sniff deadline and Stop end the peek of a silent
// connection; neither may panic.
func TestSilentConnectionsAtTheSniffDeadlineAndAtStop(t *testing.T) {
	defer server.SetTimeoutsForTest(200*time.Millisecond, time.Minute, time.Minute)()
	srv := server.New(nil)
	require.NoError(t, testpb.RegisterEchoServiceServer(srv, &echotest.Service{}))
	require.NoError(t, srv.Start("127.0.0.1:0"))
	addr := srv.ListenAddress().String()

	timedOut := dialRawAddr(t, addr)
	timedOut.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := timedOut.Read(make([]byte, 1))
	assert.ErrorIs(t, err, io.EOF, "the server closes a connection silent past the sniff deadline")

	for range 10 {
		dialRawAddr(t, addr) // silent until Stop
		c := dialRawAddr(t, addr)
		c.Write([]byte("P"))
	}
	require.Eventually(t, func() bool { return true }, time.Second, 10*time.Millisecond)
	joined := make(chan struct{})
	go func() {
		srv.Stop()
		srv.Join()
		close(joined)
	}()
	select {
	case <-joined:
	case <-time.After(10 * time.Second):
		t.Fatal("Stop+Join did not return with silent connections open")
	}
}

func dialRawAddr(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// Item 3: a client that never reads its answers used to hang Join (done
// blocked in the socket write, so the requests never left in-flight).
func TestJoinDoesNotWaitForAClientThatNeverReads(t *testing.T) {
	srv := server.New(nil)
	svc := &echotest.Service{}
	require.NoError(t, testpb.RegisterEchoServiceServer(srv, svc))
	require.NoError(t, srv.Start("127.0.0.1:0"))
	c := dialRawAddr(t, srv.ListenAddress().String())
	att := bytes.Repeat([]byte("x"), 1<<20)
	const n = 64 // 64 MB of answers: far more than the socket buffers take
	for i := range n {
		_, err := c.Write(requestFrame(t, "gobrpc.test.EchoService", "Echo", int64(i+1), echoPayload(t, "big"), att))
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return svc.Calls.Load() == n }, 20*time.Second, 5*time.Millisecond,
		"every request reached its handler")

	joined := make(chan time.Duration)
	go func() {
		start := time.Now()
		srv.Stop()
		srv.Join()
		joined <- time.Since(start)
	}()
	select {
	case d := <-joined:
		t.Logf("Stop+Join took %v", d)
	case <-time.After(15 * time.Second):
		t.Fatal("Join waits for a client that never reads")
	}
}

// Item 10: decompression is bounded by the server's MaxBodySize: a
// compressed request whose message is larger is refused (EREQUEST), as the
// same request uncompressed is (its frame is too big: the connection
// closes).
func TestCompressedRequestBoundedByMaxBodySize(t *testing.T) {
	srv, svc := echotest.StartServer(t, &server.Options{MaxBodySize: 1 << 20})
	big := echoPayload(t, strings.Repeat("z", 2<<20))
	for _, ct := range []int32{baidustd.CompressGzip, baidustd.CompressZlib, baidustd.CompressSnappy} {
		z, err := baidustd.Compress(nil, ct, big)
		require.NoError(t, err)
		require.Less(t, len(z), 1<<20)
		m := baidustd.Meta{HasRequest: true, ServiceName: "gobrpc.test.EchoService", MethodName: "Echo",
			CorrelationID: 7, CompressType: ct}
		frame, err := baidustd.AppendFrame(nil, &m, z, nil)
		require.NoError(t, err)
		c := dialRaw(t, srv)
		c.send(frame)
		reply := c.readFrame()
		require.NotNil(t, reply, "compress type %d: the connection was closed", ct)
		rm, _, _ := decode(t, reply)
		assert.Equal(t, int32(controller.EREQUEST), rm.ErrorCode, "compress type %d", ct)
		assert.Contains(t, rm.ErrorText, "larger than 1048576 bytes")
	}
	assert.Zero(t, svc.Calls.Load(), "no handler ran")

	plain := requestFrame(t, "gobrpc.test.EchoService", "Echo", 8, big, nil)
	c := dialRaw(t, srv)
	c.Write(plain) // the server may close before it has all: the header says too big
	c.expectClosed()
}

// Item 11: a 10 MB service name comes back clipped in the error text,
// and the connection keeps serving. (That an idle connection keeps no
// reference to the name is TestMetaKeepsNoLongNames in protocol/baidustd
// and the Reset after each frame in transport.Conn.)
func TestHugeNamesAreClippedInErrors(t *testing.T) {
	srv, _ := echotest.StartServer(t, nil)
	c := dialRaw(t, srv)
	for i, names := range [][2]string{
		{strings.Repeat("n", 10<<20), "Echo"},
		{"gobrpc.test.EchoService", strings.Repeat("m", 10<<20)},
	} {
		c.send(requestFrame(t, names[0], names[1], int64(i+1), echoPayload(t, "x"), nil))
		reply := c.readFrame()
		require.NotNil(t, reply)
		rm, _, _ := decode(t, reply)
		assert.NotZero(t, rm.ErrorCode)
		assert.Less(t, len(reply), 4<<10, "the error text does not carry the whole name back")
		assert.Contains(t, rm.ErrorText, "more bytes)")
	}
	c.send(requestFrame(t, "gobrpc.test.EchoService", "Echo", 9, echoPayload(t, "after"), nil))
	rm, msg, _ := decode(t, c.readFrame())
	require.Zero(t, rm.ErrorCode)
	var resp testpb.EchoResponse
	require.NoError(t, proto.Unmarshal(msg, &resp))
	assert.Equal(t, "after", resp.GetMessage())
}

// Item 11: an HTTP handler that never calls done used to leak its
// net/http goroutine after the client left.
func TestHTTPHandlerWithoutDoneLeaksNothingWhenTheClientLeaves(t *testing.T) {
	srv, svc := echotest.StartServer(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost,
		"http://"+srv.ListenAddress().String()+"/gobrpc.test.EchoService/Echo", strings.NewReader(`{"message":"hold"}`))
	require.NoError(t, err)
	client := &http.Client{Transport: &http.Transport{}}
	_, err = client.Do(req)
	require.Error(t, err, "the handler never answers")
	select {
	case done := <-svc.Held:
		// The call ends when done comes, late; then Stop+Join return.
		t.Cleanup(done)
	case <-time.After(5 * time.Second):
		t.Fatal("the handler did not run")
	}
	client.CloseIdleConnections()
	require.Eventually(t, func() bool { return !goroutineRunning("server.(*Server).servePB") }, 5*time.Second, 10*time.Millisecond,
		"the HTTP goroutine still waits for a done that never comes")
}

func goroutineRunning(fn string) bool {
	buf := make([]byte, 1<<20)
	return bytes.Contains(buf[:runtime.Stack(buf, true)], []byte(fn))
}

// Item 11: a slow HTTP body, and an idle keep-alive connection, are
// closed at their deadlines.
func TestHTTPDeadlines(t *testing.T) {
	defer server.SetTimeoutsForTest(time.Second, 300*time.Millisecond, 300*time.Millisecond)()
	srv, svc := echotest.StartServer(t, nil)
	addr := srv.ListenAddress().String()

	slow := dialRawAddr(t, addr)
	_, err := io.WriteString(slow, "POST /gobrpc.test.EchoService/Echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
	require.NoError(t, err)
	slow.SetReadDeadline(time.Now().Add(10 * time.Second))
	answer, _ := io.ReadAll(slow) // until the server closes
	assert.NotContains(t, string(answer), "200 OK")
	assert.Zero(t, svc.Calls.Load())

	idle := dialRawAddr(t, addr)
	_, err = io.WriteString(idle, "POST /gobrpc.test.EchoService/Echo HTTP/1.1\r\nHost: x\r\nContent-Length: 15\r\n\r\n{\"message\":\"a\"}")
	require.NoError(t, err)
	idle.SetReadDeadline(time.Now().Add(10 * time.Second))
	answer, err = io.ReadAll(idle) // the answer, then the close of an idle keep-alive connection
	require.NoError(t, err, "the idle connection is closed before the test's deadline")
	assert.Contains(t, string(answer), "200 OK")
}

// Item 11: malformed connections are logged at a bounded rate.
func TestMalformedConnectionsLogAtABoundedRate(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&lockedWriter{w: &buf, mu: &mu}, nil)))
	defer slog.SetDefault(old)

	srv, _ := echotest.StartServer(t, nil)
	for range 200 {
		c := dialRawAddr(t, srv.ListenAddress().String())
		c.Write([]byte("XXXX"))
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		io.ReadAll(c)
		c.Close()
	}
	mu.Lock()
	lines := strings.Count(buf.String(), "unknown protocol")
	mu.Unlock()
	assert.GreaterOrEqual(t, lines, 1)
	assert.LessOrEqual(t, lines, 10, "200 bad connections in a few seconds are a few lines")
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Item 12: the internal port serves builtin services only, over baidu_std
// as over HTTP.
func TestInternalPortRefusesUserServicesOverBaiduStd(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	srv, svc := echotest.StartServer(t, &server.Options{InternalPort: port})
	internal := srv.InternalAddress().String()

	opts := channel.DefaultOptions()
	opts.MaxRetry = 0
	var ch channel.Channel
	require.NoError(t, ch.Init(internal, "", &opts))
	defer ch.Close()
	cntl := controller.New()
	testpb.NewEchoServiceStub(&ch).Echo(cntl, &testpb.EchoRequest{Message: proto.String("x")}, &testpb.EchoResponse{}, nil)
	assert.Equal(t, controller.ENOMETHOD, cntl.ErrorCode(), cntl.ErrorText())
	assert.Contains(t, cntl.ErrorText(), "builtin services only")
	assert.Zero(t, svc.Calls.Load())
	echoOnce(t, srv.ListenAddress().String())
}

// IdleTimeoutSec is brpc's idle_timeout_sec: a baidu_std connection that
// carried no request for that long, and has none in flight, is closed.
func TestIdleTimeoutClosesIdleConnections(t *testing.T) {
	srv, svc := echotest.StartServer(t, &server.Options{IdleTimeoutSec: 1})
	idle := dialRaw(t, srv)
	idle.send(requestFrame(t, "gobrpc.test.EchoService", "Echo", 1, echoPayload(t, "x"), nil))
	require.NotNil(t, idle.readFrame())
	busy := dialRaw(t, srv)
	busy.send(requestFrame(t, "gobrpc.test.EchoService", "Echo", 1, echoPayload(t, "hold"), nil))
	var done func()
	select {
	case done = <-svc.Held:
	case <-time.After(5 * time.Second):
		t.Fatal("the handler did not run")
	}

	idle.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := idle.Read(make([]byte, 1))
	assert.ErrorIs(t, err, io.EOF, "closed when idle")

	done() // the busy connection was kept: its answer arrives
	require.NotNil(t, busy.readFrame())
}
