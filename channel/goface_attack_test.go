package channel_test

// Attacks on the Go face of the client: context-first clients, call
// options, Controller.SetContext, interceptors, Authenticators, the
// SelectiveChannel and rpcz's hook. Every helper here is prefixed "gfa" so
// as not to collide with the other test files of package channel_test.
//
// Tests whose name contains "Finding" demonstrated a defect (the
// "FINDING n:" comment above each says what it was); each was fixed, and
// its test failed before the fix and passes since. The others are attacks
// that held.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/gobrpc/gobrpc/auth"
	"github.com/gobrpc/gobrpc/channel"
	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/errno"
	"github.com/gobrpc/gobrpc/rpc"
	"github.com/gobrpc/gobrpc/rpcz"
	"github.com/gobrpc/gobrpc/server"
	"github.com/gobrpc/gobrpc/testsupport/echotest"
	"github.com/gobrpc/gobrpc/testsupport/testpb"
)

// ---------------------------------------------------------------------------
// Helpers.

func gfaReq(s string) *testpb.EchoRequest { return &testpb.EchoRequest{Message: proto.String(s)} }

func gfaChannel(t testing.TB, addr string, mutate func(*channel.Options)) *channel.Channel {
	t.Helper()
	opts := channel.DefaultOptions()
	opts.ConnectionGroup = "gfa " + t.Name()
	opts.TimeoutMs = 5000 // generous: a busy machine must not fail held attacks
	if mutate != nil {
		mutate(&opts)
	}
	ch, err := channel.New(addr, "", &opts)
	require.NoError(t, err)
	t.Cleanup(func() { ch.Close() })
	return ch
}

func gfaStartService(t testing.TB, opts *server.Options, impl testpb.EchoServiceServer) *server.Server {
	t.Helper()
	srv := server.New(opts)
	require.NoError(t, testpb.RegisterEchoServiceServer(srv, impl))
	require.NoError(t, srv.Start("127.0.0.1:0"))
	t.Cleanup(func() { srv.Stop(); srv.Join() })
	return srv
}

// gfaWithin runs f on a goroutine and reports whether it returned within d.
// When it did not, the goroutine is left to finish (tests release what it
// waits for in their cleanups).
func gfaWithin(d time.Duration, f func()) bool {
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// gfaFields answers with what its handler saw: the request user field
// "k", the timeout the client delivered; it answers the user field
// "served-by".
type gfaFields struct {
	testpb.UnimplementedEchoServiceServer
	mu      sync.Mutex
	fields  []string
	timeout []int64
}

func (s *gfaFields) Echo(cntl *controller.Controller, req *testpb.EchoRequest, resp *testpb.EchoResponse, done func()) {
	defer done()
	s.mu.Lock()
	s.fields = append(s.fields, cntl.RequestUserFields()["k"])
	s.timeout = append(s.timeout, cntl.ServerTimeoutMs())
	s.mu.Unlock()
	cntl.ResponseUserFields()["served-by"] = "gfa"
	resp.Message = req.Message
}

func (s *gfaFields) last() (string, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.fields) == 0 {
		return "<none>", 0
	}
	return s.fields[len(s.fields)-1], s.timeout[len(s.timeout)-1]
}

// gfaSpans collects rpcz spans through the hook while a test runs.
type gfaSpans struct {
	mu    sync.Mutex
	spans []rpcz.Span
}

func gfaCollectSpans(t *testing.T) *gfaSpans {
	c := &gfaSpans{}
	rpcz.SetHook(func(s rpcz.Span) {
		c.mu.Lock()
		c.spans = append(c.spans, s)
		c.mu.Unlock()
	})
	t.Cleanup(func() { rpcz.SetHook(nil) })
	return c
}

func (c *gfaSpans) snapshot() []rpcz.Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]rpcz.Span(nil), c.spans...)
}

// ---------------------------------------------------------------------------
// Context-first clients, call options, deadlines and cancellation (held).

func TestGoFaceAttackContextEdgeCases(t *testing.T) {
	srv, _ := echotest.StartServer(t, nil)
	ch := gfaChannel(t, srv.ListenAddress().String(), nil)
	client := testpb.NewEchoServiceClient(ch)

	// A nil context is Background, not a panic.
	//lint:ignore SA1012 the attack is the nil context
	resp, err := client.Echo(nil, gfaReq("nil-ctx")) //nolint:staticcheck
	require.NoError(t, err)
	assert.Equal(t, "nil-ctx", resp.GetMessage())

	// A deadline already in the past: ERPCTIMEDOUT, never sent.
	past, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Hour))
	defer cancel()
	_, err = client.Echo(past, gfaReq("past"))
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorIs(t, err, controller.ERPCTIMEDOUT)

	// A cause does not change the code.
	cctx, ccancel := context.WithCancelCause(context.Background())
	time.AfterFunc(50*time.Millisecond, func() { ccancel(errors.New("my cause")) })
	_, err = client.Echo(cctx, gfaReq("sleep:3s"), channel.WithTimeout(10*time.Second))
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, errno.ECANCELED, errno.CodeOf(err))

	// A custom context type (not one of the context package's): its Done
	// is watched, and the watcher goes away with the call (goleak).
	type wrapped struct{ context.Context }
	wctx, wcancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, wcancel)
	_, err = client.Echo(wrapped{wctx}, gfaReq("sleep:3s"), channel.WithTimeout(10*time.Second))
	assert.ErrorIs(t, err, context.Canceled)
	resp, err = client.Echo(wrapped{context.Background()}, gfaReq("custom"))
	require.NoError(t, err)
	assert.Equal(t, "custom", resp.GetMessage())

	// Timeouts at the edges.
	_, err = client.Echo(context.Background(), gfaReq("sleep:2s"), channel.WithTimeout(0))
	assert.ErrorIs(t, err, controller.ERPCTIMEDOUT, "a zero timeout ends at once")
	_, err = client.Echo(context.Background(), gfaReq("x"), channel.WithTimeout(1<<62))
	require.NoError(t, err, "a huge timeout is clamped, not overflowed")
	_, err = client.Echo(context.Background(), gfaReq("x"), channel.WithTimeout(-time.Second))
	require.NoError(t, err, "a negative timeout waits forever")
	ctx, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	_, err = client.Echo(ctx, gfaReq("sleep:3s"), channel.WithTimeout(-time.Second))
	assert.ErrorIs(t, err, context.DeadlineExceeded, "the context caps 'forever'")

	// Odd option values.
	_, err = client.Echo(context.Background(), gfaReq("x"), channel.WithMaxRetry(-5),
		channel.WithBackupRequestMs(-7), channel.WithLogID(-1), rpc.CallOption{},
		channel.WithController(func(c *controller.Controller) {}))
	require.NoError(t, err)
	_, err = client.Echo(context.Background(), gfaReq("x"),
		channel.WithRequestCompressType(controller.CompressType(99)))
	assert.ErrorIs(t, err, controller.EREQUEST)
	_, err = client.Echo(context.Background(), gfaReq("x"),
		channel.WithController(func(c *controller.Controller) { c.SetRequestChecksumType(controller.ChecksumType(42)) }))
	assert.ErrorIs(t, err, controller.EREQUEST)
}

// Many goroutines through the pooled Controllers of rpc.Invoke, with
// cancellations, deadlines, backups and Result: no cross-talk between
// calls (each answer and attachment is its own), no race.
func TestGoFaceAttackPooledControllersNoCrossTalk(t *testing.T) {
	srv, _ := echotest.StartServer(t, nil)
	ch := gfaChannel(t, srv.ListenAddress().String(), nil)
	client := testpb.NewEchoServiceClient(ch)
	var wg sync.WaitGroup
	var bad atomic.Int64
	var badText atomic.Value
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 60 {
				m := fmt.Sprintf("g%d-%d", g, i)
				var res channel.CallResult
				ctx, cancel := context.WithCancel(context.Background())
				opts := []channel.CallOption{channel.WithRequestAttachment([]byte("att-" + m)), channel.Result(&res),
					channel.WithRequestUserField("k", m)}
				switch i % 4 {
				case 1:
					go cancel()
					m2 := "sleep:20ms"
					_, err := client.Echo(ctx, gfaReq(m2), opts...)
					if err != nil && !errors.Is(err, context.Canceled) {
						bad.Add(1)
						badText.Store(err.Error())
					}
					cancel()
					continue
				case 2:
					opts = append(opts, channel.WithBackupRequestMs(1))
				case 3:
					opts = append(opts, channel.WithTimeout(3*time.Second))
				}
				resp, err := client.Echo(ctx, gfaReq(m), opts...)
				cancel()
				if err != nil || resp.GetMessage() != m || string(res.ResponseAttachment) != "att-"+m {
					bad.Add(1)
					badText.Store(fmt.Sprintf("%s: err=%v resp=%q att=%q", m, err, resp.GetMessage(), res.ResponseAttachment))
				}
			}
		}()
	}
	wg.Wait()
	assert.Zero(t, bad.Load(), badText.Load())
}

// A cancelled context ends a call being retried, and one with a backup
// pending on a cluster, at once; ctx deadlines give ERPCTIMEDOUT.
func TestGoFaceAttackCancelDuringRetriesAndBackups(t *testing.T) {
	// A server that accepts and closes at once: every attempt to it fails
	// with EEOF and is retried.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var closerWG sync.WaitGroup
	closerWG.Add(1)
	go func() {
		defer closerWG.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); closerWG.Wait() })

	ch := gfaChannel(t, ln.Addr().String(), func(o *channel.Options) { o.MaxRetry = 1000; o.TimeoutMs = -1 })
	client := testpb.NewEchoServiceClient(ch)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(150*time.Millisecond, cancel)
	var res channel.CallResult
	ok := gfaWithin(3*time.Second, func() { _, err = client.Echo(ctx, gfaReq("x"), channel.Result(&res)) })
	require.True(t, ok, "a call retried forever did not end when its context was cancelled")
	assert.ErrorIs(t, err, context.Canceled)
	assert.Positive(t, res.RetriedCount)

	// Backups on a cluster of two slow servers; the context's deadline
	// ends the call with both attempts pending.
	s1, _ := echotest.StartServer(t, nil)
	s2, _ := echotest.StartServer(t, nil)
	opts := channel.DefaultOptions()
	opts.ConnectionGroup = "gfa-backup"
	opts.TimeoutMs = 10000
	cl, err := channel.New("list://"+s1.ListenAddress().String()+","+s2.ListenAddress().String(), "rr", &opts)
	require.NoError(t, err)
	defer cl.Close()
	cc := testpb.NewEchoServiceClient(cl)
	dctx, dcancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer dcancel()
	ok = gfaWithin(3*time.Second, func() {
		_, err = cc.Echo(dctx, gfaReq("sleep:3s"), channel.WithBackupRequestMs(20), channel.Result(&res))
	})
	require.True(t, ok)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.True(t, res.HasBackupRequest)
}

// Asynchronous brpc-style calls with SetContext, StartCancel and Join
// from other goroutines, and the Controller reused inside done.
func TestGoFaceAttackAsyncContextCancelJoinReuse(t *testing.T) {
	srv, _ := echotest.StartServer(t, nil)
	ch := gfaChannel(t, srv.ListenAddress().String(), nil)
	stub := testpb.NewEchoServiceStub(ch)
	for i := range 30 {
		cntl := controller.New()
		ctx, cancel := context.WithCancel(context.Background())
		cntl.SetContext(ctx)
		var runs atomic.Int64
		second := make(chan controller.Errno, 1)
		resp := &testpb.EchoResponse{}
		cancelsOver := make(chan struct{})
		stub.Echo(cntl, gfaReq("sleep:30ms"), resp, func() {
			runs.Add(1)
			// Reuse inside done: Reset, a new context, a new call. (Not
			// while other goroutines still StartCancel it: that would be
			// the test's race.)
			<-cancelsOver
			cntl.Reset()
			cntl.SetContext(context.Background())
			r2 := &testpb.EchoResponse{}
			stub.Echo(cntl, gfaReq("again"), r2, nil)
			second <- cntl.ErrorCode()
		})
		var wg sync.WaitGroup
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				switch i % 3 {
				case 0:
					cancel()
				case 1:
					cntl.StartCancel()
				}
			}()
		}
		wg.Wait()
		close(cancelsOver)
		select {
		case code := <-second:
			assert.Zero(t, code)
		case <-time.After(5 * time.Second):
			t.Fatal("done did not run")
		}
		cancel()
		assert.Equal(t, int64(1), runs.Load())
	}
}

// ---------------------------------------------------------------------------
// Cancellation while connecting.

// FINDING 1: a synchronous call whose context is cancelled while its first
// attempt is still connecting does not return "at once" (docs/en/go.md:
// "Cancelling a context ends the call at once with ECANCELED"): the call
// ends (endWith -> finish) but the caller's goroutine is the one dialing
// (call.begin -> call.issue -> Channel.send -> Endpoint.Acquire) and
// returns only when the dial gives up, after ConnectTimeoutMs (here 4 s;
// with ConnectTimeoutMs -1 and no deadline, the kernel's ~2 min). The
// deadline case holds only because the deadline caps the connect timeout.
func TestGoFaceAttackFindingCancelWhileConnecting(t *testing.T) {
	hole := raBlackhole(t) // reuse_attack_test.go
	ch := gfaChannel(t, hole, func(o *channel.Options) {
		o.ConnectTimeoutMs = 4000
		o.TimeoutMs = -1
		o.MaxRetry = 0
	})
	client := testpb.NewEchoServiceClient(ch)

	// The deadline case holds: the deadline caps the connect.
	dctx, dcancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer dcancel()
	var err error
	require.True(t, gfaWithin(2*time.Second, func() { _, err = client.Echo(dctx, gfaReq("x")) }))
	assert.ErrorIs(t, err, context.DeadlineExceeded)

	// The cancel case does not.
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	_, err = client.Echo(ctx, gfaReq("x"))
	took := time.Since(start)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Less(t, took, 2*time.Second,
		"the context was cancelled at 100 ms but the caller waited for the connect timeout (%v)", took)
}

// ---------------------------------------------------------------------------
// Interceptors.

func gfaInterceptedChannel(t *testing.T, addr string, ics ...channel.Interceptor) *channel.Channel {
	return gfaChannel(t, addr, func(o *channel.Options) { o.Interceptors = ics })
}

// Interceptors that reject, short-circuit, retry, change the context or
// the method, and asynchronous intercepted calls under StartCancel and
// Join from other goroutines: all held.
func TestGoFaceAttackInterceptorsHeld(t *testing.T) {
	srv, _ := echotest.StartServer(t, nil)
	addr := srv.ListenAddress().String()

	t.Run("never-invokes", func(t *testing.T) {
		ch := gfaInterceptedChannel(t, addr, func(ctx context.Context, md protoreflect.MethodDescriptor,
			cntl *controller.Controller, req, resp proto.Message, invoke channel.Invoker) error {
			resp.(*testpb.EchoResponse).Message = proto.String("cached")
			return nil
		})
		resp, err := testpb.NewEchoServiceClient(ch).Echo(context.Background(), gfaReq("x"))
		require.NoError(t, err)
		assert.Equal(t, "cached", resp.GetMessage())
	})

	t.Run("odd-errors", func(t *testing.T) {
		for _, tc := range []struct {
			err  error
			code errno.Errno
		}{
			{context.DeadlineExceeded, errno.ERPCTIMEDOUT},
			{context.Canceled, errno.ECANCELED},
			{fmt.Errorf("wrapped: %w", errno.New(errno.ELIMIT, "busy")), errno.ELIMIT},
			{errno.EPERM, errno.EPERM},
			{&errno.Error{Code: errno.EREQUEST}, errno.EREQUEST},
			{errors.New(strings.Repeat("x", 1<<20)), errno.EINTERNAL},
		} {
			ch := gfaInterceptedChannel(t, addr, func(context.Context, protoreflect.MethodDescriptor,
				*controller.Controller, proto.Message, proto.Message, channel.Invoker) error {
				return tc.err
			})
			_, err := testpb.NewEchoServiceClient(ch).Echo(context.Background(), gfaReq("x"))
			assert.Equal(t, tc.code, errno.CodeOf(err), "%v", err)
			cntl := controller.New()
			testpb.NewEchoServiceStub(ch).Echo(cntl, gfaReq("x"), &testpb.EchoResponse{}, nil)
			assert.Equal(t, tc.code, cntl.ErrorCode())
		}
	})

	t.Run("retries-sequentially", func(t *testing.T) {
		var n atomic.Int64
		ch := gfaInterceptedChannel(t, addr, func(ctx context.Context, md protoreflect.MethodDescriptor,
			cntl *controller.Controller, req, resp proto.Message, invoke channel.Invoker) error {
			n.Add(1)
			// First a call that fails, then the real one.
			bad := gfaReq("fail:EREQUEST")
			if err := invoke(ctx, md, cntl, bad, resp); !errors.Is(err, controller.EREQUEST) {
				return fmt.Errorf("first invoke: %v", err)
			}
			return invoke(ctx, md, cntl, req, resp)
		})
		var res channel.CallResult
		resp, err := testpb.NewEchoServiceClient(ch).Echo(context.Background(), gfaReq("second"),
			channel.WithRequestAttachment([]byte("att")), channel.Result(&res))
		require.NoError(t, err)
		assert.Equal(t, "second", resp.GetMessage())
		assert.Equal(t, "att", string(res.ResponseAttachment), "the attachment of the second answer alone")
	})

	t.Run("new-context-and-nil-context", func(t *testing.T) {
		ch := gfaInterceptedChannel(t, addr, func(ctx context.Context, md protoreflect.MethodDescriptor,
			cntl *controller.Controller, req, resp proto.Message, invoke channel.Invoker) error {
			if req.(*testpb.EchoRequest).GetMessage() == "nil" {
				//lint:ignore SA1012 the attack is the nil context
				return invoke(nil, md, cntl, req, resp) //nolint:staticcheck
			}
			short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			return invoke(short, md, cntl, req, resp)
		})
		client := testpb.NewEchoServiceClient(ch)
		_, err := client.Echo(context.Background(), gfaReq("sleep:2s"))
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		_, err = client.Echo(context.Background(), gfaReq("nil"))
		require.NoError(t, err)
	})

	t.Run("nil-method", func(t *testing.T) {
		ch := gfaInterceptedChannel(t, addr, func(ctx context.Context, md protoreflect.MethodDescriptor,
			cntl *controller.Controller, req, resp proto.Message, invoke channel.Invoker) error {
			return invoke(ctx, nil, cntl, req, resp)
		})
		_, err := testpb.NewEchoServiceClient(ch).Echo(context.Background(), gfaReq("x"))
		assert.ErrorIs(t, err, controller.EINVAL)
	})

	t.Run("reuse-in-done", func(t *testing.T) {
		ch := gfaInterceptedChannel(t, addr, func(ctx context.Context, md protoreflect.MethodDescriptor,
			cntl *controller.Controller, req, resp proto.Message, invoke channel.Invoker) error {
			return invoke(ctx, md, cntl, req, resp)
		})
		stub := testpb.NewEchoServiceStub(ch)
		cntl := controller.New()
		const n = 20
		var count atomic.Int64
		finished := make(chan struct{})
		var next func()
		next = func() {
			if count.Add(1) == n {
				close(finished)
				return
			}
			cntl.Reset()
			cntl.SetContext(context.Background())
			stub.Echo(cntl, gfaReq("again"), &testpb.EchoResponse{}, next)
		}
		stub.Echo(cntl, gfaReq("first"), &testpb.EchoResponse{}, next)
		select {
		case <-finished:
		case <-time.After(10 * time.Second):
			t.Fatal("the chain of calls started in done stalled")
		}
		assert.False(t, cntl.Failed(), cntl.ErrorText())
	})

	t.Run("async-cancel-join-storm", func(t *testing.T) {
		ch := gfaInterceptedChannel(t, addr, func(ctx context.Context, md protoreflect.MethodDescriptor,
			cntl *controller.Controller, req, resp proto.Message, invoke channel.Invoker) error {
			time.Sleep(time.Millisecond)
			err := invoke(ctx, md, cntl, req, resp)
			if errors.Is(err, controller.ECANCELED) {
				return invoke(ctx, md, cntl, req, resp) // a canceled call stays canceled
			}
			return err
		})
		stub := testpb.NewEchoServiceStub(ch)
		for i := range 40 {
			cntl := controller.New()
			var ran atomic.Int64
			stub.Echo(cntl, gfaReq("sleep:20ms"), &testpb.EchoResponse{}, func() { ran.Add(1) })
			var wg sync.WaitGroup
			for j := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if (i+j)%2 == 0 {
						cntl.StartCancel()
					}
					cntl.Join()
				}()
			}
			require.True(t, gfaWithin(5*time.Second, wg.Wait), "Join did not return")
			assert.Equal(t, int64(1), ran.Load())
			assert.Contains(t, []controller.Errno{0, controller.ECANCELED}, cntl.ErrorCode(), cntl.ErrorText())
		}
	})
}

// FINDING 14: with interceptors, the call's timeout (Options.TimeoutMs,
// WithTimeout, cntl.SetTimeoutMs: "the deadline of the whole RPC, retries
// and backup included") restarts at every invoke: interceptedCall.send
// makes a new call whose setUp takes start = time.Now() and adds the
// timeout, so an interceptor that retries (or waits before invoking, e.g.
// a client-side rate limiter) keeps the caller waiting on peers for a
// multiple of its deadline. Below, WithTimeout(150ms) and an interceptor
// that tries 6 times: the caller waits ~900 ms. Only a context deadline,
// which is absolute, bounds the chain. startIntercepted should fix the
// deadline once, when the chain starts (e.g. derive a context with that
// deadline and hand it to the chain), so later invokes get what is left.
func TestGoFaceAttackFindingTimeoutRestartsAtEachInvoke(t *testing.T) {
	srv, _ := echotest.StartServer(t, nil)
	var tries atomic.Int64
	ch := gfaInterceptedChannel(t, srv.ListenAddress().String(), func(ctx context.Context, md protoreflect.MethodDescriptor,
		cntl *controller.Controller, req, resp proto.Message, invoke channel.Invoker) error {
		var err error
		for range 20 { // retry what timed out: 3 s if each invoke got 150 ms
			tries.Add(1)
			if err = invoke(ctx, md, cntl, req, resp); !errors.Is(err, controller.ERPCTIMEDOUT) {
				return err
			}
		}
		return err
	})
	start := time.Now()
	_, err := testpb.NewEchoServiceClient(ch).Echo(context.Background(), gfaReq("sleep:1s"), channel.WithTimeout(150*time.Millisecond))
	took := time.Since(start)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, took, 1500*time.Millisecond,
		"a call with a 150 ms timeout kept its caller %v (%d invokes of 150 ms each)", took, tries.Load())
}

// FINDING 2: an interceptor returning a non-nil error whose code is 0
// (errno.Errno(0), errno.New(0, ...), &errno.Error{}) makes the call a
// success: setOutcome (channel/intercept.go) writes ErrorCode 0 with the
// error's text, so cntl.Failed() is false and the context-first client
// returns (resp, nil). A rejection without invoke silently "succeeds"
// with an empty response, and an interceptor wrapping a failed call's
// error turns the failure into a success, which Interceptor's doc says it
// cannot do. (Controller.SetFailed maps 0 and -1 to EINTERNAL; setOutcome
// does not.)
func TestGoFaceAttackFindingInterceptorZeroCodeErrorIsSuccess(t *testing.T) {
	srv, _ := echotest.StartServer(t, nil)
	addr := srv.ListenAddress().String()
	for name, ret := range map[string]func(error) error{
		"errno.New(0)": func(error) error { return errno.New(0, "rejected") },
		"Errno(0)":     func(error) error { return errno.Errno(0) },
		"wrap-failure": func(err error) error { return &errno.Error{Text: "wrapped: " + fmt.Sprint(err)} },
	} {
		t.Run(name, func(t *testing.T) {
			ch := gfaInterceptedChannel(t, addr, func(ctx context.Context, md protoreflect.MethodDescriptor,
				cntl *controller.Controller, req, resp proto.Message, invoke channel.Invoker) error {
				if name == "wrap-failure" {
					return ret(invoke(ctx, md, cntl, req, resp))
				}
				return ret(nil)
			})
			_, err := testpb.NewEchoServiceClient(ch).Echo(context.Background(), gfaReq("fail:EREQUEST"))
			assert.Error(t, err, "the interceptor returned an error, the call must fail")
			cntl := controller.New()
			testpb.NewEchoServiceStub(ch).Echo(cntl, gfaReq("fail:EREQUEST"), &testpb.EchoResponse{}, nil)
			assert.True(t, cntl.Failed(), "Failed() is false with ErrorText %q", cntl.ErrorText())
		})
	}
}

// FINDING 3: an interceptor that invokes twice at once with the call's
// Controller (a hedging interceptor) races: both sends (interceptedCall.send)
// write the same Controller's results and the same response from two
// connection readers, and ic.inner keeps only one of them for StartCancel.
// go test -race reports the race; nothing refuses the second concurrent
// invoke.
func TestGoFaceAttackFindingConcurrentInvokeSameController(t *testing.T) {
	srv, _ := echotest.StartServer(t, nil)
	var errs [2]error
	ch := gfaInterceptedChannel(t, srv.ListenAddress().String(), func(ctx context.Context, md protoreflect.MethodDescriptor,
		cntl *controller.Controller, req, resp proto.Message, invoke channel.Invoker) error {
		var wg sync.WaitGroup
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = invoke(ctx, md, cntl, req, resp)
			}()
		}
		wg.Wait()
		if errs[0] != nil {
			return errs[0]
		}
		return errs[1]
	})
	_, _ = testpb.NewEchoServiceClient(ch).Echo(context.Background(), gfaReq("hedge"))
	refused := 0
	for _, err := range errs {
		if errors.Is(err, controller.EINVAL) {
			refused++
		}
	}
	assert.Equal(t, 1, refused, "a second invoke with a Controller that is being sent must be refused (EINVAL); got %v", errs)
}

// FINDING 4: StartCancel does not reach a call an interceptor sends with a
// Controller of its own (intercept.go: the c != cntl branch runs
// startCall directly and never sets ic.inner), although the docs say
// "cntl.Join and cntl.StartCancel work as without interceptors". The
// asynchronous call below is cancelled at 100 ms but runs until the
// server answers (3 s), and then reports success.
func TestGoFaceAttackFindingStartCancelMissesOwnControllerInvoke(t *testing.T) {
	srv, _ := echotest.StartServer(t, nil)
	ch := gfaInterceptedChannel(t, srv.ListenAddress().String(), func(ctx context.Context, md protoreflect.MethodDescriptor,
		cntl *controller.Controller, req, resp proto.Message, invoke channel.Invoker) error {
		own := controller.New() // e.g. to keep the caller's results clean
		own.SetTimeoutMs(10000)
		return invoke(ctx, md, own, req, resp)
	})
	stub := testpb.NewEchoServiceStub(ch)
	cntl := controller.New()
	done := make(chan struct{})
	stub.Echo(cntl, gfaReq("sleep:3s"), &testpb.EchoResponse{}, func() { close(done) })
	time.Sleep(100 * time.Millisecond)
	cntl.StartCancel()
	select {
	case <-done:
		assert.Equal(t, controller.ECANCELED, cntl.ErrorCode(), cntl.ErrorText())
	case <-time.After(2 * time.Second):
		t.Error("StartCancel did not end the call the interceptor sent with its own Controller")
		<-done
	}
}

// FINDING 5: invoke called after the interceptor chain returned (an
// interceptor that "fires and forgets" on a goroutine) still sends with
// the caller's Controller and writes its results into it, though the
// caller has it back (and may have Reset it, or rpc.Invoke may have put it
// back in its pool for another call). Nothing in startIntercepted marks
// the chain as over, so a late invoke silently corrupts a Controller that
// now belongs to someone else; it should be refused (EINVAL) instead.
func TestGoFaceAttackFindingInvokeAfterChainReturned(t *testing.T) {
	srv, _ := echotest.StartServer(t, nil)
	release := make(chan struct{})
	lateErr := make(chan error, 1)
	ch := gfaInterceptedChannel(t, srv.ListenAddress().String(), func(ctx context.Context, md protoreflect.MethodDescriptor,
		cntl *controller.Controller, req, resp proto.Message, invoke channel.Invoker) error {
		go func() {
			<-release
			lateErr <- invoke(ctx, md, cntl, req, resp)
		}()
		return nil // "sent"
	})
	stub := testpb.NewEchoServiceStub(ch)
	cntl := controller.New()
	stub.Echo(cntl, gfaReq("late"), &testpb.EchoResponse{}, nil)
	require.False(t, cntl.Failed())
	// The caller owns its Controller again: it resets it for something else.
	cntl.Reset()
	close(release)
	var err error
	select {
	case err = <-lateErr:
	case <-time.After(5 * time.Second):
		t.Fatal("the late invoke did not return")
	}
	assert.ErrorIs(t, err, controller.EINVAL, "an invoke after the chain returned must be refused")
	assert.Nil(t, cntl.RemoteSide(), "the late invoke wrote results into a Controller the caller had Reset")
}

// FINDING 6: a synchronous call whose interceptor panics leaves the
// Controller "in use" with a call whose results never come: the panic
// propagates to the caller (fine, as in grpc-go), but if the caller
// recovers, cntl.Join() (and a CallMethod reusing the Controller without
// Reset, which is supposed to fail with EINVAL) hang forever in
// interceptedCall.resultsIn/finished.Wait (startIntercepted's run never
// reaches ic.resultsIn.Done). run should mark the call over in a defer
// even when the chain panics. The scenario runs in a child process, so
// that its hung goroutines do not trip this package's goleak check.
//
// (Observed too, logged, not asserted: for an asynchronous call the same
// panic kills the process, since the chain runs on a goroutine of
// gobrpc's with no recover, whereas a server handler's panic is
// recovered and answered EINTERNAL.)
func TestGoFaceAttackFindingPanickingInterceptorLeavesJoinHanging(t *testing.T) {
	if mode := os.Getenv("GFA_CHILD"); mode != "" {
		gfaPanicChild(t, mode)
		return
	}
	run := func(mode string) (string, int) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestGoFaceAttackFindingPanickingInterceptorLeavesJoinHanging$", "-test.count=1")
		cmd.Env = append(os.Environ(), "GFA_CHILD="+mode)
		out, _ := cmd.CombinedOutput()
		return string(out), cmd.ProcessState.ExitCode()
	}
	out, code := run("join")
	assert.Equal(t, 0, code, "child output:\n%s", out)
	out, code = run("async")
	if code != 0 {
		i := strings.Index(out, "panic:")
		if i < 0 {
			i = 0
		}
		t.Logf("observation: an asynchronous call's panicking interceptor killed the process (exit %d): %.200s", code, out[i:])
	}
}

func gfaPanicChild(t *testing.T, mode string) {
	srv, _ := echotest.StartServer(t, nil)
	opts := channel.DefaultOptions()
	opts.Interceptors = []channel.Interceptor{func(context.Context, protoreflect.MethodDescriptor,
		*controller.Controller, proto.Message, proto.Message, channel.Invoker) error {
		panic("interceptor bug")
	}}
	ch, err := channel.New(srv.ListenAddress().String(), "", &opts)
	if err != nil {
		fmt.Println("init:", err)
		os.Exit(4)
	}
	stub := testpb.NewEchoServiceStub(ch)
	cntl := controller.New()
	switch mode {
	case "join":
		func() {
			defer func() { recover() }()
			stub.Echo(cntl, gfaReq("x"), &testpb.EchoResponse{}, nil)
		}()
		if !gfaWithin(2*time.Second, cntl.Join) {
			fmt.Println("Join hangs after a recovered interceptor panic")
			os.Exit(3)
		}
		if !gfaWithin(2*time.Second, func() { stub.Echo(cntl, gfaReq("x"), &testpb.EchoResponse{}, nil) }) {
			fmt.Println("reusing the Controller without Reset hangs instead of failing with EINVAL")
			os.Exit(3)
		}
	case "async":
		stub.Echo(cntl, gfaReq("x"), &testpb.EchoResponse{}, func() {})
		time.Sleep(500 * time.Millisecond)
	}
	os.Exit(0) // skip cleanups and goleak: this process is thrown away
}

// ---------------------------------------------------------------------------
// SelectiveChannel.

func gfaSelective(t *testing.T, addr string, mutate func(*channel.Options)) *channel.SelectiveChannel {
	t.Helper()
	opts := channel.DefaultOptions()
	opts.TimeoutMs = 5000
	if mutate != nil {
		mutate(&opts)
	}
	var sc channel.SelectiveChannel
	require.NoError(t, sc.Init("rr", &opts))
	t.Cleanup(func() { sc.Close() })
	sub, err := channel.New(addr, "", nil)
	require.NoError(t, err)
	_, err = sc.AddChannel(sub, "")
	require.NoError(t, err)
	return &sc
}

// FINDING 7: a call through a SelectiveChannel loses the response's user
// fields: SelectiveChannel.subDone copies the winner's response and
// attachment into the caller's, but not sc.cntl's ResponseUserFields, so
// CallResult.ResponseUserFields / cntl.ResponseUserFields() are empty
// through a SelectiveChannel while a Channel delivers them. (The request
// direction was fixed in 2719270; this test checks both.)
func TestGoFaceAttackFindingSelectiveChannelDropsUserFields(t *testing.T) {
	svc := &gfaFields{}
	srv := gfaStartService(t, nil, svc)
	sc := gfaSelective(t, srv.ListenAddress().String(), nil)
	var res channel.CallResult
	_, err := testpb.NewEchoServiceClient(sc).Echo(context.Background(), gfaReq("x"),
		channel.WithRequestUserField("k", "v"), channel.Result(&res))
	require.NoError(t, err)
	got, _ := svc.last()
	assert.Equal(t, "v", got, "the request user field did not reach the server")
	assert.Equal(t, "gfa", res.ResponseUserFields["served-by"], "the response user field did not come back")
}

// FINDING 8: a call through a SelectiveChannel does not make its sub-call
// a child of its own rpcz span: SelectiveChannel.send hands the sub-call
// the caller's ctx (since 2719270) but not the SelectiveChannel call's
// span, so with a root call (rpcz on or a hook set) the SelectiveChannel
// span is trace T1 while the sub-call and the server it reaches start a
// new trace T2 (ParentSpanID 0): the trace breaks at every
// SelectiveChannel. The sub-call should get ctrl.WithTrace(ctx,
// {c.rq.traceID, c.rq.spanID}). (The time-left part of this test, which
// failed before 2719270, now holds.)
func TestGoFaceAttackFindingSelectiveChannelDropsDeadlineAndTrace(t *testing.T) {
	spans := gfaCollectSpans(t)
	svc := &gfaFields{}
	srv := gfaStartService(t, nil, svc)
	sc := gfaSelective(t, srv.ListenAddress().String(), nil)
	_, err := testpb.NewEchoServiceClient(sc).Echo(context.Background(), gfaReq("x"), channel.WithTimeout(3*time.Second))
	require.NoError(t, err)
	_, timeout := svc.last()
	assert.Positive(t, timeout, "the server got no timeout_ms through the SelectiveChannel")
	assert.LessOrEqual(t, timeout, int64(3000))

	var selective, server []rpcz.Span
	require.Eventually(t, func() bool {
		selective, server = nil, nil
		for _, s := range spans.snapshot() {
			if !strings.HasSuffix(s.Method, "EchoService.Echo") {
				continue
			}
			if s.Server {
				server = append(server, s)
			} else if len(s.Attempts) > 0 && strings.HasPrefix(s.Attempts[0].Server, "sub-channel-") {
				selective = append(selective, s)
			}
		}
		return len(selective) == 1 && len(server) == 1
	}, 5*time.Second, 5*time.Millisecond)
	assert.Equal(t, selective[0].TraceID, server[0].TraceID,
		"the server span is not in the SelectiveChannel call's trace")
}

// FINDING 9: Options.Interceptors is silently ignored by a
// SelectiveChannel: SelectiveChannel.CallMethod calls startCall directly,
// never startIntercepted, although Options.Interceptors says
// "Interceptors wrap every call made through the channel" and
// SelectiveChannel.Init lists only the connection type, protocol and
// naming options as not applying. Init should run them, or refuse them.
func TestGoFaceAttackFindingSelectiveChannelIgnoresInterceptors(t *testing.T) {
	srv, _ := echotest.StartServer(t, nil)
	var n atomic.Int64
	sc := gfaSelective(t, srv.ListenAddress().String(), func(o *channel.Options) {
		o.Interceptors = []channel.Interceptor{func(ctx context.Context, md protoreflect.MethodDescriptor,
			cntl *controller.Controller, req, resp proto.Message, invoke channel.Invoker) error {
			n.Add(1)
			return errno.New(controller.EPERM, "interceptor says no")
		}}
	})
	_, err := testpb.NewEchoServiceClient(sc).Echo(context.Background(), gfaReq("x"))
	assert.Equal(t, int64(1), n.Load(), "the SelectiveChannel's interceptor never ran")
	assert.ErrorIs(t, err, controller.EPERM)
}

// ---------------------------------------------------------------------------
// Authenticators.

// gfaBlockingAuth generates its credential only once released (a token
// fetched from a slow key service).
type gfaBlockingAuth struct {
	release chan struct{}
	calls   atomic.Int64
}

func (a *gfaBlockingAuth) GenerateCredential() (string, error) {
	a.calls.Add(1)
	<-a.release
	return "s3cret", nil
}

func (a *gfaBlockingAuth) VerifyCredential(c string, _ net.Addr) (*auth.Context, error) {
	return nil, errors.New("client side only")
}

// FINDING 10: a slow GenerateCredential holds callers past their
// deadlines. ClientConn.WriteFirst calls it under credentialMu on the
// caller's goroutine (call.begin -> issue -> Channel.send ->
// writeRequest), so (a) a synchronous call with a 200 ms context returns
// only when the credential comes (the deadline timer ends the call, the
// caller is still blocked), (b) every other caller on that connection
// blocks on credentialMu meanwhile, and (c) an asynchronous CallMethod,
// which "returns to its caller at once", blocks too once the connection
// is open (Endpoint.Ready is true, so send runs on the caller's
// goroutine). The credential's wait should be bounded by the call's
// deadline (or done off the caller's goroutine, as connecting is for
// asynchronous calls).
func TestGoFaceAttackFindingSlowCredentialBlocksPastDeadline(t *testing.T) {
	srv := gfaStartService(t, &server.Options{Auth: auth.Token("s3cret")}, whoAmIForGfa{})
	a := &gfaBlockingAuth{release: make(chan struct{})}
	ch := gfaChannel(t, srv.ListenAddress().String(), func(o *channel.Options) { o.Auth = a })
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(a.release) }) }
	t.Cleanup(release) // runs before the channel's Close

	client := testpb.NewEchoServiceClient(ch)
	results := make(chan error, 2)
	start := time.Now()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		_, err := client.Echo(ctx, gfaReq("first"))
		results <- err
	}()
	require.Eventually(t, func() bool { return a.calls.Load() == 1 }, 5*time.Second, time.Millisecond)

	// (c) An asynchronous call on the open connection.
	stub := testpb.NewEchoServiceStub(ch)
	cntl := controller.New()
	cntl.SetTimeoutMs(200)
	asyncDone := make(chan struct{})
	returned := gfaWithin(1500*time.Millisecond, func() {
		stub.Echo(cntl, gfaReq("async"), &testpb.EchoResponse{}, func() { close(asyncDone) })
	})
	assert.True(t, returned, "an asynchronous CallMethod blocked on another call's credential")

	// (a) The synchronous call with a 200 ms deadline.
	select {
	case err := <-results:
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Less(t, time.Since(start), 2500*time.Millisecond)
	case <-time.After(2500 * time.Millisecond):
		t.Error("a call with a 200 ms context was still blocked after 2.5 s, in GenerateCredential")
	}
	release()
	select {
	case <-asyncDone:
	case <-time.After(5 * time.Second):
		t.Error("the asynchronous call never ended")
	}
}

type whoAmIForGfa struct {
	testpb.UnimplementedEchoServiceServer
}

func (whoAmIForGfa) Echo(cntl *controller.Controller, req *testpb.EchoRequest, resp *testpb.EchoResponse, done func()) {
	defer done()
	if ac := cntl.AuthContext(); ac != nil {
		resp.Message = proto.String(ac.User)
	}
}

// gfaFuncAuth is an Authenticator made of a func (a comparable-looking
// wrapper around it is what breaks the socket map).
type gfaFuncAuth func() (string, error)

func (f gfaFuncAuth) GenerateCredential() (string, error) { return f() }
func (f gfaFuncAuth) VerifyCredential(string, net.Addr) (*auth.Context, error) {
	return nil, errors.New("client side only")
}

// gfaWrappedAuth is a struct type (so reflect says Comparable) holding an
// Authenticator whose dynamic value is a func: not hashable.
type gfaWrappedAuth struct{ inner auth.Authenticator }

func (w gfaWrappedAuth) GenerateCredential() (string, error) { return w.inner.GenerateCredential() }
func (w gfaWrappedAuth) VerifyCredential(c string, a net.Addr) (*auth.Context, error) {
	return w.inner.VerifyCredential(c, a)
}

// FINDING 11: channel.New / Channel.Init panics ("runtime error: hash of
// unhashable type") when Options.Auth is a value of a comparable type
// holding a non-comparable value, e.g. a struct wrapping an Authenticator
// that is a func. transport.GetEndpoint (socketmap.go) checks
// reflect.TypeOf(opts.Auth).Comparable(), which is true for a struct with
// an interface field, then uses the value as a map key. For a cluster the
// same panic happens in Channel.updateServers, on the naming service's
// goroutine for later updates, which kills the process. Check
// reflect.ValueOf(a).Comparable() (Go 1.20+), which looks at the dynamic
// values, or key on a per-channel token.
func TestGoFaceAttackFindingUnhashableAuthenticatorPanics(t *testing.T) {
	srv := gfaStartService(t, &server.Options{Auth: auth.Token("s3cret")}, whoAmIForGfa{})
	a := gfaWrappedAuth{inner: gfaFuncAuth(func() (string, error) { return "s3cret", nil })}
	var ch *channel.Channel
	var err error
	var panicked any
	func() {
		defer func() { panicked = recover() }()
		opts := channel.DefaultOptions()
		opts.Auth = a
		ch, err = channel.New(srv.ListenAddress().String(), "", &opts)
	}()
	require.Nil(t, panicked, "channel.New panicked")
	require.NoError(t, err)
	defer ch.Close()
	resp, err := testpb.NewEchoServiceClient(ch).Echo(context.Background(), gfaReq("x"))
	require.NoError(t, err)
	assert.Equal(t, "token", resp.GetMessage())
}

// FINDING 12: with a refused credential, concurrent callers get EEOF /
// EFAILEDSOCKET ("Got EOF"), not ERPCAUTH, and each retries on new
// connections. Only the first writer's request carries the credential
// and gets the ERPCAUTH answer; the others (written right after it, see
// ClientConn.WriteFirst: "writers that come meanwhile wait until it is
// written (not answered)") are dropped by the server (onRequest: "the
// connection is closing") and fail when it closes 200 ms later; EEOF is
// retryable, so they reconnect, resend credentials and fail the same way.
// brpc makes the other callers wait for the authenticating call's
// outcome (Socket::FightAuthentication/SetAuthentication) and fails them
// with its error. Either do that, or have the server answer every request
// of a refused connection with ERPCAUTH.
func TestGoFaceAttackFindingRefusedCredentialConcurrentCallersGetEOF(t *testing.T) {
	srv := gfaStartService(t, &server.Options{Auth: auth.Token("right")}, whoAmIForGfa{})
	ch := gfaChannel(t, srv.ListenAddress().String(), func(o *channel.Options) {
		o.Auth = auth.Token("wrong")
		o.TimeoutMs = 10000
	})
	client := testpb.NewEchoServiceClient(ch)
	const n = 16
	var wg sync.WaitGroup
	gate := make(chan struct{})
	codes := make(chan errno.Errno, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			_, err := client.Echo(context.Background(), gfaReq("x"))
			codes <- errno.CodeOf(err)
		}()
	}
	close(gate)
	wg.Wait()
	close(codes)
	tally := map[string]int{}
	for c := range codes {
		tally[c.Name()]++
	}
	assert.Equal(t, map[string]int{"ERPCAUTH": n}, tally, "every caller with a refused credential should see ERPCAUTH")
}

// Authenticators and connection sharing: channels with equal
// Authenticators share a connection (one credential), different ones do
// not (each is verified as itself); pooled and short connections carry a
// credential each; a server answer to a credential-less connection is
// ERPCAUTH. All held.
func TestGoFaceAttackAuthSharingHeld(t *testing.T) {
	users := &gfaUserAuth{}
	srv := gfaStartService(t, &server.Options{Auth: users}, whoAmIForGfa{})
	addr := srv.ListenAddress().String()
	mk := func(a auth.Authenticator, ct string) testpb.EchoServiceClient {
		opts := channel.DefaultOptions()
		opts.Auth, opts.ConnectionType, opts.ConnectionGroup = a, ct, "gfa-share"
		opts.TimeoutMs = 5000
		ch, err := channel.New(addr, "", &opts)
		require.NoError(t, err)
		t.Cleanup(func() { ch.Close() })
		return testpb.NewEchoServiceClient(ch)
	}
	alice1, alice2, bob := mk(auth.Token("alice"), ""), mk(auth.Token("alice"), ""), mk(auth.Token("bob"), "")
	for _, c := range []struct {
		client testpb.EchoServiceClient
		want   string
	}{{alice1, "alice"}, {bob, "bob"}, {alice2, "alice"}, {bob, "bob"}} {
		resp, err := c.client.Echo(context.Background(), gfaReq("x"))
		require.NoError(t, err)
		assert.Equal(t, c.want, resp.GetMessage())
	}
	assert.Equal(t, int64(2), users.verified.Load(), "alice's two channels share one connection, bob has his own")

	for _, ct := range []string{"pooled", "short"} {
		c := mk(auth.Token("carol-"+ct), ct)
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := c.Echo(context.Background(), gfaReq("x"))
				if assert.NoError(t, err) {
					assert.Equal(t, "carol-"+ct, resp.GetMessage())
				}
			}()
		}
		wg.Wait()
	}
	// A bad credential on a pooled connection: ERPCAUTH, not retried into
	// a success, and the next good call works.
	_, err := mk(auth.Token("mallory"), "pooled").Echo(context.Background(), gfaReq("x"))
	assert.ErrorIs(t, err, controller.ERPCAUTH)
}

// gfaUserAuth accepts any credential but "mallory" and names the user
// after it.
type gfaUserAuth struct{ verified atomic.Int64 }

func (a *gfaUserAuth) GenerateCredential() (string, error) { return "", errors.New("server side only") }
func (a *gfaUserAuth) VerifyCredential(c string, _ net.Addr) (*auth.Context, error) {
	a.verified.Add(1)
	if c == "" || c == "mallory" {
		return nil, errors.New("unknown user")
	}
	return &auth.Context{User: c}, nil
}

// ---------------------------------------------------------------------------
// rpcz: the hook, set and cleared while calls run, sees every span; a
// panicking-free hook that makes a call itself does not deadlock. Held.
func TestGoFaceAttackRpczHookHeld(t *testing.T) {
	srv, _ := echotest.StartServer(t, nil)
	client := testpb.NewEchoServiceClient(gfaChannel(t, srv.ListenAddress().String(), nil))
	stop := make(chan struct{})
	var flips sync.WaitGroup
	flips.Add(1)
	var seen atomic.Int64
	go func() {
		defer flips.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			rpcz.SetHook(func(rpcz.Span) { seen.Add(1) })
			rpcz.SetHook(nil)
		}
	}()
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				_, err := client.Echo(context.Background(), gfaReq("x"))
				assert.NoError(t, err)
			}
		}()
	}
	wg.Wait()
	close(stop)
	flips.Wait()
	rpcz.SetHook(nil)

	// A hook that calls back into gobrpc (an exporter using an
	// asynchronous call) does not deadlock the call that ended.
	stub := testpb.NewEchoServiceStub(gfaChannel(t, srv.ListenAddress().String(), func(o *channel.Options) {
		o.ConnectionGroup = "gfa-exporter"
	}))
	var exported sync.WaitGroup
	var exporting atomic.Bool
	rpcz.SetHook(func(s rpcz.Span) {
		if s.Server || !exporting.CompareAndSwap(false, true) {
			return
		}
		exported.Add(1)
		cntl := controller.New()
		stub.Echo(cntl, gfaReq("export"), &testpb.EchoResponse{}, exported.Done)
	})
	defer rpcz.SetHook(nil)
	require.True(t, gfaWithin(5*time.Second, func() {
		_, err := client.Echo(context.Background(), gfaReq("x"))
		assert.NoError(t, err)
	}))
	require.True(t, gfaWithin(5*time.Second, exported.Wait))
}
