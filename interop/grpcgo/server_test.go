package grpcgo

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/gobrpc/gobrpc/controller"
	gbgrpc "github.com/gobrpc/gobrpc/protocol/grpc"
	"github.com/gobrpc/gobrpc/server"
	"github.com/gobrpc/gobrpc/testsupport/testpb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// gobrpcEcho is a gobrpc handler driven by the request's message.
type gobrpcEcho struct{}

func (gobrpcEcho) Echo(cntl *controller.Controller, req *testpb.EchoRequest, resp *testpb.EchoResponse, done func()) {
	defer done()
	switch msg := req.GetMessage(); {
	case msg == "deadline":
		dl, ok := cntl.Context().Deadline()
		if !ok {
			resp.Message = proto.String("none")
			return
		}
		resp.Message = proto.String(time.Until(dl).Round(100 * time.Millisecond).String())
	case msg == "metadata":
		resp.Message = proto.String(cntl.RequestUserFields()["x-user"] + "|" + cntl.RequestUserFields()["x-raw-bin"])
		cntl.ResponseUserFields()["x-answer"] = "42"
	case msg == "limit":
		cntl.SetFailed(controller.ELIMIT, "too many")
	case msg == "notfound":
		gbgrpc.SetStatus(cntl, gbgrpc.NotFound, "no such thing: 100%")
	case msg == "compressed?":
		resp.Message = proto.String(cntl.RequestCompressType().String())
	case strings.HasPrefix(msg, "sleep:"):
		d, _ := time.ParseDuration(msg[len("sleep:"):])
		select {
		case <-time.After(d):
			resp.Message = proto.String(msg)
		case <-cntl.Context().Done():
			// The client's deadline (grpc-timeout) passed: no answer
			// would be on time, and an OK here could reach the client a
			// moment before its own deadline fires.
			cntl.SetFailed(controller.ERPCTIMEDOUT, "deadline passed")
		}
	default:
		resp.Message = req.Message
	}
}

func startGobrpc(t *testing.T, opts *server.Options) string {
	t.Helper()
	srv := server.New(opts)
	require.NoError(t, testpb.RegisterEchoServiceServer(srv, gobrpcEcho{}))
	require.NoError(t, srv.Start("127.0.0.1:0"))
	t.Cleanup(func() { srv.Stop(); srv.Join() })
	return srv.ListenAddress().String()
}

func dialGRPC(t *testing.T, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+addr, append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	require.NoError(t, err)
	t.Cleanup(func() { cc.Close() })
	return cc
}

func echoString(s string) *testpb.EchoRequest { return &testpb.EchoRequest{Message: proto.String(s)} }

func TestGRPCGoClientCallsGobrpcServer(t *testing.T) {
	addr := startGobrpc(t, nil)
	cc := dialGRPC(t, addr)
	ctx := context.Background()

	resp, err := Echo(ctx, cc, echoString("hello"))
	require.NoError(t, err)
	assert.Equal(t, "hello", resp.GetMessage())

	t.Run("deadline", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		resp, err := Echo(ctx, cc, echoString("deadline"))
		require.NoError(t, err)
		left, err := time.ParseDuration(resp.GetMessage())
		require.NoError(t, err, resp.GetMessage())
		assert.InDelta(t, 3*time.Second, left, float64(time.Second))

		ctx, cancel = context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		_, err = Echo(ctx, cc, echoString("sleep:5s"))
		assert.Equal(t, codes.DeadlineExceeded, status.Code(err), err)
	})

	t.Run("metadata", func(t *testing.T) {
		md := metadata.Pairs("x-user", "ann", "x-raw-bin", "\x00\x01\xff")
		var header metadata.MD
		resp, err := Echo(metadata.NewOutgoingContext(ctx, md), cc, echoString("metadata"), grpc.Header(&header))
		require.NoError(t, err)
		assert.Equal(t, "ann|\x00\x01\xff", resp.GetMessage())
		assert.Equal(t, []string{"42"}, header.Get("x-answer"))
	})

	t.Run("errors", func(t *testing.T) {
		_, err := Echo(ctx, cc, echoString("limit"))
		assert.Equal(t, codes.ResourceExhausted, status.Code(err), err)
		_, err = Echo(ctx, cc, echoString("notfound"))
		assert.Equal(t, codes.NotFound, status.Code(err), err)
		assert.Contains(t, status.Convert(err).Message(), "no such thing: 100%")
		err = cc.Invoke(ctx, "/gobrpc.test.EchoService/Nope", echoString("x"), new(testpb.EchoResponse))
		assert.Equal(t, codes.Unimplemented, status.Code(err), err)
		err = cc.Invoke(ctx, "/gobrpc.test.Nope/Echo", echoString("x"), new(testpb.EchoResponse))
		assert.Equal(t, codes.Unimplemented, status.Code(err), err)
	})

	t.Run("large", func(t *testing.T) {
		big := strings.Repeat("b", 3<<20) // under grpc-go's 4 MiB default
		resp, err := Echo(ctx, cc, echoString(big))
		require.NoError(t, err)
		assert.Equal(t, len(big), len(resp.GetMessage()))
	})

	t.Run("gzip", func(t *testing.T) {
		resp, err := Echo(ctx, cc, echoString("compressed?"), grpc.UseCompressor(gzip.Name))
		require.NoError(t, err)
		assert.Equal(t, controller.CompressGzip.String(), resp.GetMessage())
		big := strings.Repeat("z", 1<<20)
		resp, err = Echo(ctx, cc, echoString(big), grpc.UseCompressor(gzip.Name))
		require.NoError(t, err)
		assert.Equal(t, big, resp.GetMessage())
	})
}

func TestGobrpcServerRefusesMessagesOverMaxBodySize(t *testing.T) {
	addr := startGobrpc(t, &server.Options{MaxBodySize: 1 << 10})
	cc := dialGRPC(t, addr)
	ctx := context.Background()
	_, err := Echo(ctx, cc, echoString(strings.Repeat("x", 2<<10)))
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), err)
	// A gzip bomb: small on the wire, over the limit once inflated.
	_, err = Echo(ctx, cc, echoString(strings.Repeat("x", 1<<20)), grpc.UseCompressor(gzip.Name))
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), err)
	// The connection is still good.
	resp, err := Echo(ctx, cc, echoString("small"))
	require.NoError(t, err)
	assert.Equal(t, "small", resp.GetMessage())
}
