package server_test

import (
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/gobrpc/gobrpc/bvar"
	"github.com/gobrpc/gobrpc/channel"
	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/server"
	"github.com/gobrpc/gobrpc/testsupport/echotest"
	"github.com/gobrpc/gobrpc/testsupport/testpb"
)

// concurrentCalls runs n slow calls at once and returns their controllers.
func concurrentCalls(t *testing.T, addr string, n int) []*controller.Controller {
	opts := channel.DefaultOptions()
	opts.MaxRetry = 0
	opts.TimeoutMs = 2000
	var ch channel.Channel
	require.NoError(t, ch.Init(addr, "", &opts))
	defer ch.Close()
	stub := testpb.NewEchoServiceStub(&ch)
	cntls := make([]*controller.Controller, n)
	var wg sync.WaitGroup
	for i := range cntls {
		cntls[i] = controller.New()
		wg.Add(1)
		stub.Echo(cntls[i], &testpb.EchoRequest{Message: proto.String("sleep:200ms")}, &testpb.EchoResponse{}, wg.Done)
	}
	wg.Wait()
	return cntls
}

func TestServerMaxConcurrency(t *testing.T) {
	srv, _ := echotest.StartServer(t, &server.Options{MaxConcurrency: 2})
	limited := 0
	for _, c := range concurrentCalls(t, srv.ListenAddress().String(), 6) {
		if c.Failed() {
			assert.Equal(t, controller.ELIMIT, c.ErrorCode())
			assert.Contains(t, c.ErrorText(), "Reached server's max_concurrency=2")
			limited++
		}
	}
	assert.Equal(t, 4, limited)
}

func TestMethodMaxConcurrency(t *testing.T) {
	srv := server.New(nil)
	require.NoError(t, testpb.RegisterEchoServiceServer(srv, &echotest.Service{}))
	require.NoError(t, srv.MaxConcurrencyOf("gobrpc.test.EchoService.Echo").Set(1))
	require.NoError(t, srv.Start("127.0.0.1:0"))
	defer func() { srv.Stop(); srv.Join() }()
	port := strconv.Itoa(srv.ListenAddress().(*net.TCPAddr).Port)
	v, ok := bvar.Describe("rpc_server_" + port + "_gobrpc_test_echo_service_echo_max_concurrency")
	require.True(t, ok)
	assert.Equal(t, "1", v)

	limited := 0
	for _, c := range concurrentCalls(t, srv.ListenAddress().String(), 3) {
		if c.Failed() {
			assert.Equal(t, controller.ELIMIT, c.ErrorCode())
			assert.Contains(t, c.ErrorText(), "Rejected by gobrpc.test.EchoService.Echo's ConcurrencyLimiter, concurrency=")
			limited++
		}
	}
	assert.Equal(t, 2, limited)

	// Builtin pages are never limited.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); concurrentCalls(t, srv.ListenAddress().String(), 1) }()
	time.Sleep(50 * time.Millisecond)
	resp, err := http.Get("http://" + srv.ListenAddress().String() + "/health")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode)
	wg.Wait()
}

func TestMaxConcurrencyOfErrors(t *testing.T) {
	srv := server.New(nil)
	require.NoError(t, testpb.RegisterEchoServiceServer(srv, &echotest.Service{}))
	assert.Error(t, srv.MaxConcurrencyOf("gobrpc.test.EchoService.Nope").Set(3))
	assert.Error(t, srv.MaxConcurrencyOf("Echo").Set(3))
	assert.Error(t, srv.MaxConcurrencyOf("gobrpc.test.EchoService.Echo").Set("nosuch"))
	assert.Error(t, srv.MaxConcurrencyOf("gobrpc.test.EchoService.Echo").Set(-1))
	assert.Error(t, srv.MaxConcurrencyOf("gobrpc.test.EchoService.Echo").Set(1.5))
	for _, v := range []any{"unlimited", 0, "auto", "bbr", "timeout", int64(10), "10"} {
		assert.NoError(t, srv.MaxConcurrencyOf("gobrpc.test.EchoService.Echo").Set(v), "%v", v)
	}
	require.NoError(t, srv.Start("127.0.0.1:0"))
	defer func() { srv.Stop(); srv.Join() }()
	assert.Error(t, srv.MaxConcurrencyOf("gobrpc.test.EchoService.Echo").Set(3), "after Start")
}
