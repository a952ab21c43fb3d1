package channel_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/gobrpc/gobrpc/bvar"
	"github.com/gobrpc/gobrpc/channel"
	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/protocol/grpc"
	"github.com/gobrpc/gobrpc/server"
	"github.com/gobrpc/gobrpc/testsupport/echotest"
	"github.com/gobrpc/gobrpc/testsupport/testpb"
)

// gRPC between gobrpc's own channel and server (the interop tests with
// grpc-go are in interop/grpcgo).

func grpcOptions(connType string) *channel.Options {
	opts := channel.DefaultOptions()
	opts.Protocol = "h2:grpc"
	opts.ConnectionType = connType
	return &opts
}

func TestGRPCEchoEveryConnectionType(t *testing.T) {
	srv, _ := echotest.StartServer(t, nil)
	for _, ct := range []string{"single", "pooled", "short"} {
		t.Run(ct, func(t *testing.T) {
			ch, err := channel.New(srv.ListenAddress().String(), "", grpcOptions(ct))
			require.NoError(t, err)
			defer ch.Close()
			stub := testpb.NewEchoServiceStub(ch)
			for i := range 3 {
				cntl := controller.New()
				cntl.RequestUserFields()["x-who"] = "me"
				resp := &testpb.EchoResponse{}
				stub.Echo(cntl, &testpb.EchoRequest{Message: proto.String("hi")}, resp, nil)
				require.False(t, cntl.Failed(), "call %d: %s", i, cntl.ErrorText())
				assert.Equal(t, "hi", resp.GetMessage())
				assert.Equal(t, srv.ListenAddress().String(), cntl.RemoteSide().String())
			}
			// Asynchronous calls, in parallel.
			var cntls [20]controller.Controller
			resps := make([]testpb.EchoResponse, 20)
			for i := range cntls {
				stub.Echo(&cntls[i], &testpb.EchoRequest{Message: proto.String("a")}, &resps[i], func() {})
			}
			for i := range cntls {
				cntls[i].Join()
				require.False(t, cntls[i].Failed(), cntls[i].ErrorText())
				assert.Equal(t, "a", resps[i].GetMessage())
			}
		})
	}
}

func TestGRPCErrorsAndStatus(t *testing.T) {
	srv, _ := echotest.StartServer(t, nil)
	ch, err := channel.New(srv.ListenAddress().String(), "", grpcOptions(""))
	require.NoError(t, err)
	defer ch.Close()
	stub := testpb.NewEchoServiceStub(ch)
	cntl := controller.New()
	cntl.SetMaxRetry(0)
	stub.Echo(cntl, &testpb.EchoRequest{Message: proto.String("fail:EREQUEST")}, &testpb.EchoResponse{}, nil)
	require.True(t, cntl.Failed())
	assert.Equal(t, controller.EINVAL, cntl.ErrorCode(), cntl.ErrorText()) // INVALID_ARGUMENT back
	assert.Equal(t, grpc.InvalidArgument, grpc.StatusOf(cntl))
	assert.Contains(t, cntl.ErrorText(), "asked to fail with EREQUEST")

	cntl.Reset()
	cntl.SetTimeoutMs(50)
	stub.Echo(cntl, &testpb.EchoRequest{Message: proto.String("sleep:1s")}, &testpb.EchoResponse{}, nil)
	assert.Equal(t, controller.ERPCTIMEDOUT, cntl.ErrorCode(), cntl.ErrorText())
}

func TestGRPCContextClient(t *testing.T) {
	srv, _ := echotest.StartServer(t, nil)
	ch, err := channel.New(srv.ListenAddress().String(), "", grpcOptions(""))
	require.NoError(t, err)
	defer ch.Close()
	client := testpb.NewEchoServiceClient(ch)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = client.Echo(ctx, &testpb.EchoRequest{Message: proto.String("sleep:2s")})
	require.Error(t, err)
	assert.True(t, errors.Is(err, context.DeadlineExceeded), err)
	assert.Less(t, time.Since(start), 1500*time.Millisecond)
	resp, err := client.Echo(context.Background(), &testpb.EchoRequest{Message: proto.String(strings.Repeat("x", 1<<20))})
	require.NoError(t, err)
	assert.Len(t, resp.GetMessage(), 1<<20)
}

// The server's dispatch sees gRPC calls as any other: the method's bvars,
// its limit (answered RESOURCE_EXHAUSTED, retried elsewhere as ELIMIT) and
// the status page.
func TestGRPCCallsCountInServerStatsAndLimits(t *testing.T) {
	srv, svc := echotest.StartServer(t, &server.Options{MaxConcurrency: 1})
	ch, err := channel.New(srv.ListenAddress().String(), "", grpcOptions(""))
	require.NoError(t, err)
	defer ch.Close()
	stub := testpb.NewEchoServiceStub(ch)
	for range 3 {
		cntl := controller.New()
		stub.Echo(cntl, &testpb.EchoRequest{Message: proto.String("x")}, &testpb.EchoResponse{}, nil)
		require.False(t, cntl.Failed(), cntl.ErrorText())
	}
	port := srv.ListenAddress().(*net.TCPAddr).Port
	v, ok := bvar.Describe("rpc_server_" + strconv.Itoa(port) + "_gobrpc_test_echo_service_echo_count")
	require.True(t, ok)
	assert.Equal(t, "3", v)

	// One call holds the only slot; the next is refused by the limit.
	held := controller.New()
	stub.Echo(held, &testpb.EchoRequest{Message: proto.String("hold")}, &testpb.EchoResponse{}, func() {})
	done := <-svc.Held
	cntl := controller.New()
	cntl.SetMaxRetry(0)
	stub.Echo(cntl, &testpb.EchoRequest{Message: proto.String("x")}, &testpb.EchoResponse{}, nil)
	assert.Equal(t, controller.ELIMIT, cntl.ErrorCode(), cntl.ErrorText())
	assert.Equal(t, grpc.ResourceExhausted, grpc.StatusOf(cntl))
	done() // (with no message set: the held call fails to serialize its answer)
	held.Join()

	resp, err := http.Get("http://" + srv.ListenAddress().String() + "/status")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Contains(t, string(body), "gobrpc.test.EchoService")
}
