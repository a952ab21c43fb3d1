package grpcgo

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	_ "google.golang.org/grpc/encoding/gzip" // the server decodes gzip, as gRPC negotiates it
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/gobrpc/gobrpc/backup"
	"github.com/gobrpc/gobrpc/channel"
	"github.com/gobrpc/gobrpc/controller"
	gbgrpc "github.com/gobrpc/gobrpc/protocol/grpc"
	"github.com/gobrpc/gobrpc/testsupport/testpb"
)

// grpcGoEcho is a grpc-go handler driven by the request's message.
func grpcGoEcho(name string, calls *atomic.Int64) EchoHandler {
	return func(ctx context.Context, req *testpb.EchoRequest) (*testpb.EchoResponse, error) {
		if calls != nil {
			calls.Add(1)
		}
		msg := req.GetMessage()
		switch {
		case msg == "who":
			return &testpb.EchoResponse{Message: proto.String(name)}, nil
		case msg == "deadline":
			dl, ok := ctx.Deadline()
			if !ok {
				return &testpb.EchoResponse{Message: proto.String("none")}, nil
			}
			return &testpb.EchoResponse{Message: proto.String(time.Until(dl).Round(100 * time.Millisecond).String())}, nil
		case msg == "metadata":
			md, _ := metadata.FromIncomingContext(ctx)
			grpc.SetHeader(ctx, metadata.Pairs("x-header", "h"))
			grpc.SetTrailer(ctx, metadata.Pairs("x-trailer", "t", "x-blob-bin", "\x00\xfe"))
			return &testpb.EchoResponse{Message: proto.String(strings.Join(md.Get("x-user"), ",") + "|" + strings.Join(md.Get("x-raw-bin"), ","))}, nil
		case strings.HasPrefix(msg, "code:"):
			var c int
			fmt.Sscanf(msg, "code:%d", &c)
			return nil, status.Error(codes.Code(c), "asked for "+codes.Code(c).String()+" ü")
		case strings.HasPrefix(msg, "sleep:"):
			d, _ := time.ParseDuration(msg[len("sleep:"):])
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return &testpb.EchoResponse{Message: proto.String(name)}, nil
		}
		return &testpb.EchoResponse{Message: req.Message}, nil
	}
}

func startGRPCGo(t *testing.T, h EchoHandler, opts ...grpc.ServerOption) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := grpc.NewServer(opts...)
	RegisterEcho(s, h)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

func grpcChannel(t *testing.T, target, lb string, mutate func(*channel.Options)) *channel.Channel {
	t.Helper()
	opts := channel.DefaultOptions()
	opts.Protocol = "h2:grpc"
	opts.TimeoutMs = 2000
	if mutate != nil {
		mutate(&opts)
	}
	ch, err := channel.New(target, lb, &opts)
	require.NoError(t, err)
	t.Cleanup(func() { ch.Close() })
	return ch
}

func call(ch *channel.Channel, cntl *controller.Controller, msg string) *testpb.EchoResponse {
	resp := &testpb.EchoResponse{}
	testpb.NewEchoServiceStub(ch).Echo(cntl, &testpb.EchoRequest{Message: proto.String(msg)}, resp, nil)
	return resp
}

func TestGobrpcChannelCallsGRPCGoServer(t *testing.T) {
	addr := startGRPCGo(t, grpcGoEcho("a", nil))
	for _, ct := range []string{"single", "pooled", "short"} {
		t.Run(ct, func(t *testing.T) {
			ch := grpcChannel(t, addr, "", func(o *channel.Options) { o.ConnectionType = ct })
			cntl := controller.New()
			resp := call(ch, cntl, "hello")
			require.False(t, cntl.Failed(), cntl.ErrorText())
			assert.Equal(t, "hello", resp.GetMessage())

			client := testpb.NewEchoServiceClient(ch)
			r, err := client.Echo(context.Background(), echoString("ctx"))
			require.NoError(t, err)
			assert.Equal(t, "ctx", r.GetMessage())
		})
	}
}

func TestGobrpcChannelToGRPCGoDeadlinesMetadataCodes(t *testing.T) {
	addr := startGRPCGo(t, grpcGoEcho("a", nil))
	ch := grpcChannel(t, addr, "", nil)

	t.Run("deadline", func(t *testing.T) {
		cntl := controller.New()
		cntl.SetTimeoutMs(3000)
		resp := call(ch, cntl, "deadline")
		require.False(t, cntl.Failed(), cntl.ErrorText())
		left, err := time.ParseDuration(resp.GetMessage())
		require.NoError(t, err, resp.GetMessage())
		assert.InDelta(t, 3*time.Second, left, float64(time.Second))

		cntl.Reset()
		cntl.SetTimeoutMs(100)
		start := time.Now()
		call(ch, cntl, "sleep:5s")
		assert.Equal(t, controller.ERPCTIMEDOUT, cntl.ErrorCode(), cntl.ErrorText())
		assert.Less(t, time.Since(start), 2*time.Second)

		ctx, cancel := context.WithCancel(context.Background())
		go func() { time.Sleep(50 * time.Millisecond); cancel() }()
		_, err = testpb.NewEchoServiceClient(ch).Echo(ctx, echoString("sleep:5s"))
		assert.ErrorIs(t, err, context.Canceled)
	})

	t.Run("metadata", func(t *testing.T) {
		cntl := controller.New()
		cntl.RequestUserFields()["x-user"] = "bob"
		cntl.RequestUserFields()["x-raw-bin"] = "\x00\x01"
		resp := call(ch, cntl, "metadata")
		require.False(t, cntl.Failed(), cntl.ErrorText())
		assert.Equal(t, "bob|\x00\x01", resp.GetMessage())
		assert.Equal(t, "h", cntl.ResponseUserFields()["x-header"])
		assert.Equal(t, "t", cntl.ResponseUserFields()["x-trailer"])
		assert.Equal(t, "\x00\xfe", cntl.ResponseUserFields()["x-blob-bin"])
	})

	t.Run("codes", func(t *testing.T) {
		for c := codes.Canceled; c <= codes.Unauthenticated; c++ {
			cntl := controller.New()
			cntl.SetMaxRetry(0)
			call(ch, cntl, fmt.Sprintf("code:%d", c))
			require.True(t, cntl.Failed(), c.String())
			assert.Equal(t, gbgrpc.ToErrno(gbgrpc.Code(c)), cntl.ErrorCode(), "%v: %s", c, cntl.ErrorText())
			assert.Equal(t, gbgrpc.Code(c), gbgrpc.StatusOf(cntl), cntl.ErrorText())
			assert.Contains(t, cntl.ErrorText(), "asked for "+c.String()+" ü")
		}
	})

	t.Run("large", func(t *testing.T) {
		big := strings.Repeat("L", 3<<20)
		cntl := controller.New()
		resp := call(ch, cntl, big)
		require.False(t, cntl.Failed(), cntl.ErrorText())
		assert.Equal(t, len(big), len(resp.GetMessage()))

		small := grpcChannel(t, addr, "", func(o *channel.Options) { o.MaxBodySize = 1 << 10 })
		cntl.Reset()
		call(small, cntl, strings.Repeat("L", 4<<10))
		assert.Equal(t, controller.ERESPONSE, cntl.ErrorCode(), cntl.ErrorText())
	})

	t.Run("gzip", func(t *testing.T) {
		big := strings.Repeat("g", 1<<20)
		cntl := controller.New()
		cntl.SetRequestCompressType(controller.CompressGzip)
		resp := call(ch, cntl, big)
		require.False(t, cntl.Failed(), cntl.ErrorText())
		assert.Equal(t, big, resp.GetMessage())
	})
}

func TestBackupWinsAgainstSlowGRPCGoServer(t *testing.T) {
	var slowCalls, fastCalls atomic.Int64
	slow := startGRPCGo(t, func(ctx context.Context, req *testpb.EchoRequest) (*testpb.EchoResponse, error) {
		slowCalls.Add(1)
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return &testpb.EchoResponse{Message: proto.String("slow")}, nil
	})
	fast := startGRPCGo(t, grpcGoEcho("fast", &fastCalls))
	for _, mode := range []string{"ms", "ratio", "adaptive"} {
		t.Run(mode, func(t *testing.T) {
			ch := grpcChannel(t, "list://"+slow+","+fast, "rr", func(o *channel.Options) {
				o.BackupRequestMs = 30
				switch mode {
				case "ratio":
					o.BackupRequestMaxRatio = 0.5
				case "adaptive":
					policy, err := backup.NewAdaptivePolicy(backup.AdaptiveOptions{MaxExtraLoad: 1, MinBackupMs: 30, MaxBackupMs: 30, MinSamples: 1})
					require.NoError(t, err)
					t.Cleanup(policy.Close)
					o.BackupRequestPolicy = policy
				}
			})
			won := 0
			for i := range 8 {
				cntl := controller.New()
				start := time.Now()
				resp := call(ch, cntl, "who")
				require.False(t, cntl.Failed(), cntl.ErrorText())
				if mode == "adaptive" && i < 3 {
					// The adaptive budget is earned by completed calls:
					// the first call to the slow server has none yet.
					continue
				}
				assert.Equal(t, "fast", resp.GetMessage())
				assert.Less(t, time.Since(start), 700*time.Millisecond)
				if cntl.BackupWon() {
					won++
				}
			}
			assert.Positive(t, won, "some call went first to the slow server and its backup won")
		})
	}
}

func TestRetryOnOtherGRPCGoServer(t *testing.T) {
	var unavailable atomic.Int64
	down := startGRPCGo(t, func(ctx context.Context, req *testpb.EchoRequest) (*testpb.EchoResponse, error) {
		unavailable.Add(1)
		return nil, status.Error(codes.Unavailable, "draining")
	})
	up := startGRPCGo(t, grpcGoEcho("up", nil))
	ch := grpcChannel(t, "list://"+down+","+up, "rr", nil)
	for range 4 {
		cntl := controller.New()
		resp := call(ch, cntl, "who")
		require.False(t, cntl.Failed(), cntl.ErrorText())
		assert.Equal(t, "up", resp.GetMessage())
	}
	assert.Positive(t, unavailable.Load())

	// A server that is gone: connection refused, retried elsewhere.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	gone := lis.Addr().String()
	lis.Close()
	ch2 := grpcChannel(t, "list://"+gone+","+up, "rr", nil)
	for range 4 {
		cntl := controller.New()
		resp := call(ch2, cntl, "who")
		require.False(t, cntl.Failed(), cntl.ErrorText())
		assert.Equal(t, "up", resp.GetMessage())
	}
}

func TestSelectiveChannelOverGRPCAndBaiduStd(t *testing.T) {
	grpcAddr := startGRPCGo(t, grpcGoEcho("grpc-go", nil))
	brpcAddr := startGobrpc(t, nil)
	var sc channel.SelectiveChannel
	require.NoError(t, sc.Init("rr", nil))
	defer sc.Close()
	g := grpcChannel(t, grpcAddr, "", nil)
	opts := channel.DefaultOptions()
	b, err := channel.New(brpcAddr, "", &opts)
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	_, err = sc.AddChannel(g, "")
	require.NoError(t, err)
	_, err = sc.AddChannel(b, "")
	require.NoError(t, err)
	seen := map[string]int{}
	for range 6 {
		cntl := controller.New()
		resp := &testpb.EchoResponse{}
		testpb.NewEchoServiceStub(&sc).Echo(cntl, echoString("who"), resp, nil)
		require.False(t, cntl.Failed(), cntl.ErrorText())
		seen[resp.GetMessage()]++
	}
	assert.Equal(t, 3, seen["grpc-go"], seen) // the gobrpc server echoes "who"
	assert.Equal(t, 3, seen["who"], seen)
}

// A stream the server resets alone (RST_STREAM) is retried on another
// server, and the resetting server stays in selection: its connection is
// fine. A server whose connection breaks is taken out.
func TestResetStreamRetriedWithoutEjectingTheServer(t *testing.T) {
	var resets atomic.Int64
	resetting := startHostileHTTP(t, func(w http.ResponseWriter, r *http.Request) {
		resets.Add(1)
		panic(http.ErrAbortHandler) // net/http resets the stream
	})
	up := startGRPCGo(t, grpcGoEcho("up", nil))
	ch := grpcChannel(t, "list://"+resetting+","+up, "rr", nil)
	for range 6 {
		cntl := controller.New()
		resp := call(ch, cntl, "who")
		require.False(t, cntl.Failed(), cntl.ErrorText())
		assert.Equal(t, "up", resp.GetMessage())
	}
	assert.GreaterOrEqual(t, resets.Load(), int64(3), "rr kept selecting the resetting server")
}
