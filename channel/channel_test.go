package channel_test

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/gobrpc/gobrpc/channel"
	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/example/echo/echopb"
	"github.com/gobrpc/gobrpc/protocol/baidustd"
	"github.com/gobrpc/gobrpc/testsupport/echotest"
	"github.com/gobrpc/gobrpc/testsupport/testpb"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, echotest.LeakOptions()...)
}

func newChannel(t testing.TB, addr string, mutate func(*channel.Options)) *testpb.EchoServiceStub {
	t.Helper()
	opts := channel.DefaultOptions()
	if mutate != nil {
		mutate(&opts)
	}
	ch := &channel.Channel{}
	require.NoError(t, ch.Init(addr, "", &opts))
	t.Cleanup(func() { ch.Close() })
	return testpb.NewEchoServiceStub(ch)
}

func echo(stub *testpb.EchoServiceStub, cntl *controller.Controller, msg string) *testpb.EchoResponse {
	resp := &testpb.EchoResponse{}
	stub.Echo(cntl, &testpb.EchoRequest{Message: proto.String(msg)}, resp, nil)
	return resp
}

func TestEchoEveryConnectionType(t *testing.T) {
	srv, _ := echotest.StartServer(t, nil)
	for _, ct := range []string{"single", "pooled", "short"} {
		t.Run(ct, func(t *testing.T) {
			stub := newChannel(t, srv.ListenAddress().String(), func(o *channel.Options) { o.ConnectionType = ct })
			var wg sync.WaitGroup
			for i := range 20 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for j := range 20 {
						cntl := controller.New()
						msg := string(rune('a'+i)) + string(rune('a'+j))
						cntl.RequestAttachment().WriteString("att-" + msg)
						resp := echo(stub, cntl, msg)
						if !assert.NoError(t, cntl.Err()) {
							return
						}
						assert.Equal(t, msg, resp.GetMessage())
						assert.Equal(t, "att-"+msg, cntl.ResponseAttachment().String())
						assert.Equal(t, srv.ListenAddress().String(), cntl.RemoteSide().String())
						assert.NotNil(t, cntl.LocalSide())
						assert.Positive(t, cntl.LatencyUs())
					}
				}()
			}
			wg.Wait()
		})
	}
}

func TestAsyncCallRunsDoneOnce(t *testing.T) {
	srv, _ := echotest.StartServer(t, nil)
	stub := newChannel(t, srv.ListenAddress().String(), nil)
	cntl := controller.New()
	resp := &testpb.EchoResponse{}
	var runs atomic.Int32
	stub.Echo(cntl, &testpb.EchoRequest{Message: proto.String("sleep:50ms")}, resp, func() {
		runs.Add(1)
		assert.Equal(t, "sleep:50ms", resp.GetMessage(), "done runs after resp is filled")
	})
	cntl.Join()
	assert.Equal(t, int32(1), runs.Load())
	require.NoError(t, cntl.Err())
}

func TestCompressionAndChecksum(t *testing.T) {
	srv, _ := echotest.StartServer(t, nil)
	stub := newChannel(t, srv.ListenAddress().String(), nil)
	for _, ct := range []controller.CompressType{controller.CompressNone, controller.CompressGzip, controller.CompressZlib, controller.CompressSnappy} {
		for _, sum := range []controller.ChecksumType{controller.ChecksumNone, controller.ChecksumCRC32C} {
			cntl := controller.New()
			cntl.SetRequestCompressType(ct)
			cntl.SetRequestChecksumType(sum)
			cntl.RequestAttachment().WriteString("ATT")
			resp := echo(stub, cntl, "hello compressed world hello compressed world")
			require.NoError(t, cntl.Err(), "%v %v", ct, sum)
			assert.Equal(t, "hello compressed world hello compressed world", resp.GetMessage())
			assert.Equal(t, "ATT", cntl.ResponseAttachment().String())
		}
	}
	cntl := controller.New()
	cntl.SetRequestCompressType(controller.CompressLZ4)
	echo(stub, cntl, "x")
	assert.Equal(t, controller.EREQUEST, cntl.ErrorCode())
	assert.Contains(t, cntl.ErrorText(), "unsupported compress type 4")
}

func TestTimeout(t *testing.T) {
	srv, svc := echotest.StartServer(t, nil)
	stub := newChannel(t, srv.ListenAddress().String(), func(o *channel.Options) { o.TimeoutMs = 100 })
	cntl := controller.New()
	echo(stub, cntl, "sleep:1s")
	assert.Equal(t, controller.ERPCTIMEDOUT, cntl.ErrorCode())
	assert.Contains(t, cntl.ErrorText(), "[E1008]Reached timeout=100ms")
	assert.GreaterOrEqual(t, cntl.LatencyUs(), int64(100_000))
	assert.Equal(t, 0, cntl.RetriedCount(), "ERPCTIMEDOUT is never retried")
	assert.Equal(t, int64(1), svc.Calls.Load())

	// The Controller's timeout beats the channel's.
	cntl = controller.New()
	cntl.SetTimeoutMs(30)
	echo(stub, cntl, "sleep:1s")
	assert.Equal(t, controller.ERPCTIMEDOUT, cntl.ErrorCode())
	assert.Contains(t, cntl.ErrorText(), "timeout=30ms")

	// The connection is still good afterwards.
	cntl = controller.New()
	assert.Equal(t, "ok", echo(stub, cntl, "ok").GetMessage())
}

func TestServerErrorsAndRetries(t *testing.T) {
	srv, svc := echotest.StartServer(t, nil)
	addr := srv.ListenAddress().String()
	stub := newChannel(t, addr, func(o *channel.Options) { o.MaxRetry = 2 })

	cntl := controller.New()
	echo(stub, cntl, "fail:EINTERNAL")
	assert.Equal(t, controller.EINTERNAL, cntl.ErrorCode())
	assert.Equal(t, "[E2001]["+addr+"][E2001]asked to fail with EINTERNAL", cntl.ErrorText())
	assert.Equal(t, 0, cntl.RetriedCount(), "EINTERNAL is not retryable")

	svc.Calls.Store(0)
	cntl = controller.New()
	echo(stub, cntl, "fail:ELIMIT")
	assert.Equal(t, controller.ELIMIT, cntl.ErrorCode())
	assert.Equal(t, 2, cntl.RetriedCount())
	assert.Equal(t, int64(3), svc.Calls.Load(), "ELIMIT is retried MaxRetry times")
	assert.Contains(t, cntl.ErrorText(), "[R1][E2004]")
	assert.Contains(t, cntl.ErrorText(), "[R2][E2004]")

	cntl = controller.New()
	cntl.SetMaxRetry(0)
	echo(stub, cntl, "fail:ELOGOFF")
	assert.Equal(t, controller.ELOGOFF, cntl.ErrorCode())
	assert.Equal(t, 0, cntl.RetriedCount(), "the Controller's MaxRetry beats the channel's")
}

func TestConnectionRefusedIsRetried(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	stub := newChannel(t, addr, func(o *channel.Options) { o.MaxRetry = 2 })
	cntl := controller.New()
	echo(stub, cntl, "x")
	assert.Equal(t, controller.ECONNREFUSED, cntl.ErrorCode())
	assert.Equal(t, 2, cntl.RetriedCount())
}

// fakeServer speaks baidu_std by hand: it answers every request with an
// echo, except that it closes the first connection on its first request.
type fakeServer struct {
	ln       net.Listener
	requests chan []byte
	conns    atomic.Int32
	wg       sync.WaitGroup
}

func startFakeServer(t *testing.T, dropFirst bool) *fakeServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	fs := &fakeServer{ln: ln, requests: make(chan []byte, 100)}
	fs.wg.Add(1)
	go func() {
		defer fs.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n := fs.conns.Add(1)
			fs.wg.Add(1)
			go func() {
				defer fs.wg.Done()
				defer c.Close()
				for {
					hdr := make([]byte, 12)
					if _, err := io.ReadFull(c, hdr); err != nil {
						return
					}
					body := make([]byte, binary.BigEndian.Uint32(hdr[4:]))
					if _, err := io.ReadFull(c, body); err != nil {
						return
					}
					frame := append(hdr, body...)
					fs.requests <- frame
					if dropFirst && n == 1 {
						return
					}
					var m baidustd.Meta
					msg, att, err := baidustd.DecodeFrame(frame, &m)
					if err != nil {
						return
					}
					resp := baidustd.Meta{HasResponse: true, CorrelationID: m.CorrelationID, AttachmentSize: int32(len(att))}
					out, _ := baidustd.AppendFrame(nil, &resp, msg, att) // EchoRequest and EchoResponse share their layout
					c.Write(out)
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); fs.wg.Wait() })
	return fs
}

func TestRetryReconnectsAfterBrokenConnection(t *testing.T) {
	fs := startFakeServer(t, true)
	stub := newChannel(t, fs.ln.Addr().String(), nil)
	cntl := controller.New()
	resp := echo(stub, cntl, "again")
	require.NoError(t, cntl.Err())
	assert.Equal(t, "again", resp.GetMessage())
	assert.Equal(t, 1, cntl.RetriedCount())
	assert.Equal(t, int32(2), fs.conns.Load())
}

// Our client's request frames are byte-identical to C++ brpc's echo
// client's, correlation id aside.
func TestRequestBytesMatchBrpc(t *testing.T) {
	dir := filepath.Join("..", "protocol", "baidustd", "testdata", "brpc-wire")
	fs := startFakeServer(t, false)
	// The frames were recorded from brpc's echo_client, calling brpc's
	// example.EchoService, with brpc's default of not delivering the
	// timeout (TestRequestDeliversTimeoutMs checks gobrpc's default).
	channel.DeliverTimeoutMs.SetValue(false)
	t.Cleanup(func() { channel.DeliverTimeoutMs.SetValue(true) })
	opts := channel.DefaultOptions()
	ch := &channel.Channel{}
	require.NoError(t, ch.Init(fs.ln.Addr().String(), "", &opts))
	t.Cleanup(func() { ch.Close() })
	stub := echopb.NewEchoServiceStub(ch)
	cases := map[string]func(*controller.Controller){
		"plain":      func(*controller.Controller) {},
		"attachment": func(c *controller.Controller) { c.RequestAttachment().WriteString("ATTACHMENT-BYTES") },
		"checksum": func(c *controller.Controller) { // brpc's echo client ran with an attachment here too
			c.SetRequestChecksumType(controller.ChecksumCRC32C)
			c.RequestAttachment().WriteString("ATTACHMENT-BYTES")
		},
	}
	for name, setup := range cases {
		t.Run(name, func(t *testing.T) {
			want, err := os.ReadFile(filepath.Join(dir, name+".request.bin"))
			require.NoError(t, err)
			cntl := controller.New()
			cntl.SetLogID(0) // brpc's echo_client sets log ids 0, 1, 2 ...
			setup(cntl)
			stub.Echo(cntl, &echopb.EchoRequest{Message: proto.String("hello world")}, &echopb.EchoResponse{}, nil)
			require.NoError(t, cntl.Err())
			got := <-fs.requests
			var gm, wm baidustd.Meta
			gmsg, gatt, err := baidustd.DecodeFrame(got, &gm)
			require.NoError(t, err)
			_, _, err = baidustd.DecodeFrame(want, &wm)
			require.NoError(t, err)
			gm.CorrelationID = wm.CorrelationID
			normalised, err := baidustd.AppendFrame(nil, &gm, gmsg, gatt)
			require.NoError(t, err)
			assert.Equal(t, want, normalised)
		})
	}
}

func TestStartCancel(t *testing.T) {
	srv, _ := echotest.StartServer(t, nil)
	stub := newChannel(t, srv.ListenAddress().String(), func(o *channel.Options) { o.TimeoutMs = 5000 })

	cntl := controller.New()
	var runs atomic.Int32
	stub.Echo(cntl, &testpb.EchoRequest{Message: proto.String("sleep:2s")}, &testpb.EchoResponse{}, func() { runs.Add(1) })
	time.Sleep(20 * time.Millisecond)
	cntl.StartCancel()
	cntl.Join()
	assert.Equal(t, controller.ECANCELED, cntl.ErrorCode())
	assert.Less(t, cntl.LatencyUs(), int64(2_000_000))
	assert.Equal(t, int32(1), runs.Load())

	// Cancelled before it starts: fails at once.
	cntl = controller.New()
	cntl.StartCancel()
	echo(stub, cntl, "x")
	assert.Equal(t, controller.ECANCELED, cntl.ErrorCode())
}

func TestControllerReuse(t *testing.T) {
	srv, _ := echotest.StartServer(t, nil)
	stub := newChannel(t, srv.ListenAddress().String(), nil)
	cntl := controller.New()
	echo(stub, cntl, "one")
	require.NoError(t, cntl.Err())
	echo(stub, cntl, "two")
	assert.Equal(t, controller.EINVAL, cntl.ErrorCode(), "a Controller must be Reset before reuse")
	cntl.Reset()
	assert.Equal(t, "three", echo(stub, cntl, "three").GetMessage())
	assert.NoError(t, cntl.Err())
}

func TestCloseFailsCallsAndReleasesConnections(t *testing.T) {
	srv, _ := echotest.StartServer(t, nil)
	var ch channel.Channel
	require.NoError(t, ch.Init(srv.ListenAddress().String(), "", nil))
	stub := testpb.NewEchoServiceStub(&ch)

	inflight := controller.New()
	stub.Echo(inflight, &testpb.EchoRequest{Message: proto.String("sleep:300ms")}, &testpb.EchoResponse{}, func() {})
	time.Sleep(30 * time.Millisecond)
	require.NoError(t, ch.Close())
	inflight.Join()
	assert.True(t, inflight.Failed())

	cntl := controller.New()
	echo(stub, cntl, "x")
	assert.Equal(t, controller.EINVAL, cntl.ErrorCode())
}

func TestInitErrors(t *testing.T) {
	bad := channel.DefaultOptions()
	cases := []struct {
		name, target, lb string
		mutate           func(*channel.Options)
	}{
		{"no port", "127.0.0.1", "", nil},
		{"port zero", "127.0.0.1:0", "", nil},
		{"bad port", "127.0.0.1:http2x", "", nil},
		{"unresolvable host", "no-such-host.invalid:80", "", nil},
		{"unknown protocol", "127.0.0.1:80", "", func(o *channel.Options) { o.Protocol = "nshead" }},
		{"unknown connection type", "127.0.0.1:80", "", func(o *channel.Options) { o.ConnectionType = "multi" }},
		{"bad timeout", "127.0.0.1:80", "", func(o *channel.Options) { o.TimeoutMs = -5 }},
		{"negative max retry", "127.0.0.1:80", "", func(o *channel.Options) { o.MaxRetry = -1 }},
		{"lb without naming service", "127.0.0.1:80", "rr", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			opts := bad
			if tc.mutate != nil {
				tc.mutate(&opts)
			}
			var ch channel.Channel
			assert.Error(t, ch.Init(tc.target, tc.lb, &opts))
		})
	}
	var ch channel.Channel
	require.NoError(t, ch.Init("localhost:8000", "", nil))
	assert.Error(t, ch.Init("localhost:8000", "", nil), "Init twice")
	assert.Equal(t, int32(500), ch.Options().TimeoutMs)
	ch.Close()

	// A literal's zero fields mean brpc's defaults where unambiguous.
	var lit channel.Channel
	require.NoError(t, lit.Init("127.0.0.1:8000", "", &channel.Options{}))
	assert.Equal(t, int32(500), lit.Options().TimeoutMs)
	assert.Equal(t, int32(200), lit.Options().ConnectTimeoutMs)
	assert.Equal(t, "single", lit.Options().ConnectionType)
	lit.Close()
}

// fullBacklogListener listens with a backlog of 0 and never accepts: once
// the queue is full the kernel drops further SYNs, so a connect hangs
// until the client's connect timeout.
func fullBacklogListener(t *testing.T) string {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	require.NoError(t, err)
	t.Cleanup(func() { syscall.Close(fd) })
	require.NoError(t, syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}))
	require.NoError(t, syscall.Listen(fd, 0))
	sa, err := syscall.Getsockname(fd)
	require.NoError(t, err)
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	// Fill the accept queue.
	for range 4 {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err != nil {
			break
		}
		t.Cleanup(func() { c.Close() })
	}
	return addr
}

func TestConnectTimeout(t *testing.T) {
	addr := fullBacklogListener(t)
	stub := newChannel(t, addr, func(o *channel.Options) {
		o.ConnectTimeoutMs = 50
		o.TimeoutMs = 2000
		o.MaxRetry = 1
	})
	cntl := controller.New()
	echo(stub, cntl, "x")
	assert.Equal(t, controller.ETIMEDOUT, cntl.ErrorCode(), cntl.ErrorText())
	assert.Equal(t, 1, cntl.RetriedCount(), "a connect timeout is retried")
	// Two connect attempts of 50 ms, far from the 2 s deadline.
	assert.Less(t, cntl.LatencyUs(), int64(1_000_000))
}

// With the timeout delivered (gobrpc's default, brpc's
// -baidu_std_protocol_deliver_timeout_ms=true), a request is what brpc's
// echo_client sends with that flag and -timeout_ms=500: timeout_ms in
// RpcRequestMeta, right after log_id. Recorded from brpc 71871ee9.
func TestRequestDeliversTimeoutMs(t *testing.T) {
	want, err := os.ReadFile(filepath.Join("testdata", "brpc-deliver-timeout.request.bin"))
	require.NoError(t, err)
	fs := startFakeServer(t, false)
	opts := channel.DefaultOptions() // TimeoutMs 500, as the recording
	ch := &channel.Channel{}
	require.NoError(t, ch.Init(fs.ln.Addr().String(), "", &opts))
	t.Cleanup(func() { ch.Close() })
	cntl := controller.New()
	cntl.SetLogID(0)
	echopb.NewEchoServiceStub(ch).Echo(cntl, &echopb.EchoRequest{Message: proto.String("hello world")}, &echopb.EchoResponse{}, nil)
	require.NoError(t, cntl.Err())
	got := <-fs.requests
	var gm, wm baidustd.Meta
	gmsg, gatt, err := baidustd.DecodeFrame(got, &gm)
	require.NoError(t, err)
	_, _, err = baidustd.DecodeFrame(want, &wm)
	require.NoError(t, err)
	assert.Equal(t, int32(500), wm.TimeoutMs)
	assert.Greater(t, gm.TimeoutMs, int32(400), "the time left of a 500 ms call")
	assert.LessOrEqual(t, gm.TimeoutMs, int32(500))
	gm.CorrelationID, gm.TimeoutMs = wm.CorrelationID, wm.TimeoutMs
	normalised, err := baidustd.AppendFrame(nil, &gm, gmsg, gatt)
	require.NoError(t, err)
	assert.Equal(t, want, normalised)
}
