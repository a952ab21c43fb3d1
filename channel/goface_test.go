package channel_test

import (
	"context"
	"errors"
	"fmt"
	"net"
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
	"github.com/gobrpc/gobrpc/rpcz"
	"github.com/gobrpc/gobrpc/server"
	"github.com/gobrpc/gobrpc/testsupport/echotest"
	"github.com/gobrpc/gobrpc/testsupport/testpb"
)

// newClient returns the context-first client of a channel to addr.
func newClient(t testing.TB, addr string, mutate func(*channel.Options)) testpb.EchoServiceClient {
	t.Helper()
	opts := channel.DefaultOptions()
	if mutate != nil {
		mutate(&opts)
	}
	ch, err := channel.New(addr, "", &opts)
	require.NoError(t, err)
	t.Cleanup(func() { ch.Close() })
	return testpb.NewEchoServiceClient(ch)
}

func msg(s string) *testpb.EchoRequest { return &testpb.EchoRequest{Message: proto.String(s)} }

func TestContextClientReturnsResponseAndResults(t *testing.T) {
	srv, _ := echotest.StartServer(t, nil)
	client := newClient(t, srv.ListenAddress().String(), nil)
	var res channel.CallResult
	resp, err := client.Echo(context.Background(), msg("hi"),
		channel.WithRequestAttachment([]byte("att")), channel.WithLogID(7), channel.Result(&res))
	require.NoError(t, err)
	assert.Equal(t, "hi", resp.GetMessage())
	assert.Equal(t, []byte("att"), res.ResponseAttachment)
	assert.Equal(t, srv.ListenAddress().String(), res.RemoteSide.String())
	assert.Positive(t, res.LatencyUs)
	assert.False(t, res.HasBackupRequest)
}

func TestContextClientErrorsMatchCodesAndContextErrors(t *testing.T) {
	srv, _ := echotest.StartServer(t, nil)
	client := newClient(t, srv.ListenAddress().String(), nil)

	_, err := client.Echo(context.Background(), msg("fail:EREQUEST"))
	require.Error(t, err)
	assert.ErrorIs(t, err, controller.EREQUEST)
	assert.ErrorIs(t, err, errno.EREQUEST)
	assert.Equal(t, errno.EREQUEST, errno.CodeOf(err))

	// The context's deadline caps the call's 5 s timeout.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = client.Echo(ctx, msg("sleep:5s"), channel.WithTimeout(5*time.Second))
	assert.Less(t, time.Since(start), 2500*time.Millisecond)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorIs(t, err, controller.ERPCTIMEDOUT)

	// Cancelling the context ends the call with ECANCELED.
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(30*time.Millisecond, cancel)
	_, err = client.Echo(ctx, msg("sleep:2s"), channel.WithTimeout(5*time.Second))
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorIs(t, err, controller.ECANCELED)

	// A context done before the call never sends it.
	_, err = client.Echo(ctx, msg("hi"))
	assert.ErrorIs(t, err, context.Canceled)
}

// A cancelled context also cancels a pending backup: the call ends at once
// with ECANCELED, and the channel's policy hears of it exactly once.
func TestContextCancelEndsCallWithPendingBackup(t *testing.T) {
	srv, _ := echotest.StartServer(t, nil)
	pol := &endCountingPolicy{}
	client := newClient(t, srv.ListenAddress().String(), func(o *channel.Options) {
		o.BackupRequestMs = 10
		o.TimeoutMs = 5000
		o.BackupRequestPolicy = pol
	})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(60*time.Millisecond, cancel)
	var res channel.CallResult
	start := time.Now()
	_, err := client.Echo(ctx, msg("sleep:3s"), channel.Result(&res))
	assert.Less(t, time.Since(start), 2*time.Second)
	assert.ErrorIs(t, err, context.Canceled)
	assert.True(t, res.HasBackupRequest, "the backup was sent at 10 ms")
	assert.False(t, res.BackupWon)
	assert.Equal(t, int64(1), pol.ends.Load())
}

type endCountingPolicy struct{ ends atomic.Int64 }

func (p *endCountingPolicy) GetBackupRequestMs(*controller.Controller) int32 { return -1 }
func (p *endCountingPolicy) DoBackup(*controller.Controller) bool            { return true }
func (p *endCountingPolicy) OnRPCEnd(*controller.Controller)                 { p.ends.Add(1) }

// The brpc-style stub gets the same through Controller.SetContext.
func TestControllerSetContext(t *testing.T) {
	srv, _ := echotest.StartServer(t, nil)
	stub := newChannel(t, srv.ListenAddress().String(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Millisecond)
	defer cancel()
	cntl := controller.New()
	cntl.SetContext(ctx)
	echo(stub, cntl, "sleep:2s")
	assert.Equal(t, controller.ERPCTIMEDOUT, cntl.ErrorCode())
	assert.ErrorIs(t, cntl.Err(), context.DeadlineExceeded)

	// Asynchronous: done runs once the context is cancelled.
	ctx, cancel = context.WithCancel(context.Background())
	cntl.Reset()
	cntl.SetContext(ctx)
	done := make(chan struct{})
	stub.Echo(cntl, msg("sleep:2s"), &testpb.EchoResponse{}, func() { close(done) })
	cancel()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("done did not run after the context was cancelled")
	}
	assert.Equal(t, controller.ECANCELED, cntl.ErrorCode())
}

// deadlineService reports what its handler saw of the client's deadline.
type deadlineService struct {
	testpb.UnimplementedEchoServiceServer
	seen chan deadlineSeen
}

type deadlineSeen struct {
	timeoutMs int64
	left      time.Duration
	has       bool
}

func (s *deadlineService) Echo(cntl *controller.Controller, req *testpb.EchoRequest, resp *testpb.EchoResponse, done func()) {
	defer done()
	dl, ok := cntl.Context().Deadline()
	s.seen <- deadlineSeen{timeoutMs: cntl.ServerTimeoutMs(), left: time.Until(dl), has: ok}
	resp.Message = req.Message
}

func startService(t *testing.T, opts *server.Options, impl testpb.EchoServiceServer) *server.Server {
	t.Helper()
	srv := server.New(opts)
	require.NoError(t, testpb.RegisterEchoServiceServer(srv, impl))
	require.NoError(t, srv.Start("127.0.0.1:0"))
	t.Cleanup(func() { srv.Stop(); srv.Join() })
	return srv
}

func TestRemainingTimeoutTravels(t *testing.T) {
	svc := &deadlineService{seen: make(chan deadlineSeen, 4)}
	srv := startService(t, nil, svc)
	client := newClient(t, srv.ListenAddress().String(), nil)
	_, err := client.Echo(context.Background(), msg("x"), channel.WithTimeout(800*time.Millisecond))
	require.NoError(t, err)
	s := <-svc.seen
	assert.True(t, s.has)
	assert.LessOrEqual(t, s.timeoutMs, int64(800))
	assert.Greater(t, s.timeoutMs, int64(400))
	assert.LessOrEqual(t, s.left, 800*time.Millisecond)

	// Turned off, as brpc's default: the server sees no timeout.
	channel.DeliverTimeoutMs.SetValue(false)
	defer channel.DeliverTimeoutMs.SetValue(true)
	_, err = client.Echo(context.Background(), msg("x"))
	require.NoError(t, err)
	s = <-svc.seen
	assert.False(t, s.has)
	assert.Equal(t, int64(-1), s.timeoutMs)
}

// relay is B in A -> B -> C: it spends some of the budget, then calls C
// with its cntl.Context(), so C gets what is left.
type relay struct {
	testpb.UnimplementedEchoServiceServer
	next  testpb.EchoServiceClient
	spend time.Duration
}

func (r *relay) Echo(cntl *controller.Controller, req *testpb.EchoRequest, resp *testpb.EchoResponse, done func()) {
	defer done()
	time.Sleep(r.spend)
	out, err := r.next.Echo(cntl.Context(), req)
	if err != nil {
		cntl.SetFailed(errno.CodeOf(err), "downstream: %v", err)
		return
	}
	resp.Message = out.Message
}

// leaf is C: it reports the budget it got and whether its work was
// abandoned (its context ended) before it finished.
type leaf struct {
	testpb.UnimplementedEchoServiceServer
	budget    chan int64
	abandoned chan time.Time
}

func (l *leaf) Echo(cntl *controller.Controller, req *testpb.EchoRequest, resp *testpb.EchoResponse, done func()) {
	l.budget <- cntl.ServerTimeoutMs()
	if req.GetMessage() != "work" {
		resp.Message = req.Message
		done()
		return
	}
	go func() {
		defer done()
		select {
		case <-cntl.Context().Done():
			l.abandoned <- time.Now()
		case <-time.After(5 * time.Second):
		}
	}()
}

func TestDeadlinePropagatesThroughAChain(t *testing.T) {
	c := &leaf{budget: make(chan int64, 4), abandoned: make(chan time.Time, 4)}
	srvC := startService(t, nil, c)
	// B's own channel has a long timeout: only the budget from A limits C.
	b := &relay{spend: 100 * time.Millisecond,
		next: newClient(t, srvC.ListenAddress().String(), func(o *channel.Options) { o.TimeoutMs = 10000 })}
	srvB := startService(t, nil, b)
	a := newClient(t, srvB.ListenAddress().String(), nil)

	resp, err := a.Echo(context.Background(), msg("quick"), channel.WithTimeout(1000*time.Millisecond))
	require.NoError(t, err)
	assert.Equal(t, "quick", resp.GetMessage())
	got := <-c.budget
	assert.LessOrEqual(t, got, int64(900), "C's budget is A's 1000 ms minus what B spent")
	assert.Greater(t, got, int64(300))

	// A gives up at 300 ms: C's work is abandoned then, not after 5 s.
	start := time.Now()
	_, err = a.Echo(context.Background(), msg("work"), channel.WithTimeout(300*time.Millisecond))
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	<-c.budget
	select {
	case at := <-c.abandoned:
		assert.Less(t, at.Sub(start), 2*time.Second)
	case <-time.After(4 * time.Second):
		t.Fatal("C's work was not abandoned when A's deadline passed")
	}
}

func TestClientInterceptorsRunInOrderAndMayReject(t *testing.T) {
	srv, _ := echotest.StartServer(t, nil)
	var mu sync.Mutex
	var trail []string
	logIC := func(name string) channel.Interceptor {
		return func(ctx context.Context, md protoreflect.MethodDescriptor, cntl *controller.Controller,
			req, resp proto.Message, invoke channel.Invoker) error {
			mu.Lock()
			trail = append(trail, name+">"+string(md.Name()))
			mu.Unlock()
			err := invoke(ctx, md, cntl, req, resp)
			mu.Lock()
			trail = append(trail, name+"<"+fmt.Sprint(int32(errno.CodeOf(err))))
			mu.Unlock()
			return err
		}
	}
	reject := func(ctx context.Context, md protoreflect.MethodDescriptor, cntl *controller.Controller,
		req, resp proto.Message, invoke channel.Invoker) error {
		if req.(*testpb.EchoRequest).GetMessage() == "forbidden" {
			return errno.New(controller.EPERM, "not allowed here")
		}
		return invoke(ctx, md, cntl, req, resp)
	}
	opts := channel.DefaultOptions()
	opts.Interceptors = []channel.Interceptor{logIC("outer"), logIC("inner"), reject}
	ch, err := channel.New(srv.ListenAddress().String(), "", &opts)
	require.NoError(t, err)
	defer ch.Close()

	client := testpb.NewEchoServiceClient(ch)
	resp, err := client.Echo(context.Background(), msg("hi"))
	require.NoError(t, err)
	assert.Equal(t, "hi", resp.GetMessage())
	assert.Equal(t, []string{"outer>Echo", "inner>Echo", "inner<0", "outer<0"}, trail)

	// A rejection keeps its code, for both stubs.
	_, err = client.Echo(context.Background(), msg("forbidden"))
	assert.ErrorIs(t, err, controller.EPERM)
	assert.Contains(t, err.Error(), "not allowed here")
	stub := testpb.NewEchoServiceStub(ch)
	cntl := controller.New()
	echo(stub, cntl, "forbidden")
	assert.Equal(t, controller.EPERM, cntl.ErrorCode())

	// Asynchronous calls run the chain too; Join waits for done.
	cntl.Reset()
	var doneRan atomic.Bool
	stub.Echo(cntl, msg("sleep:50ms"), &testpb.EchoResponse{}, func() { doneRan.Store(true) })
	cntl.Join()
	assert.True(t, doneRan.Load())
	assert.False(t, cntl.Failed(), cntl.ErrorText())

	// StartCancel reaches the call the chain sent.
	cntl.Reset()
	stub.Echo(cntl, msg("sleep:1s"), &testpb.EchoResponse{}, func() {})
	time.Sleep(20 * time.Millisecond)
	cntl.StartCancel()
	cntl.Join()
	assert.Equal(t, controller.ECANCELED, cntl.ErrorCode())

	// A plain error that is no brpc code becomes EINTERNAL.
	opts.Interceptors = []channel.Interceptor{func(context.Context, protoreflect.MethodDescriptor, *controller.Controller,
		proto.Message, proto.Message, channel.Invoker) error {
		return errors.New("boom")
	}}
	ch2, err := channel.New(srv.ListenAddress().String(), "", &opts)
	require.NoError(t, err)
	defer ch2.Close()
	_, err = testpb.NewEchoServiceClient(ch2).Echo(context.Background(), msg("hi"))
	assert.ErrorIs(t, err, controller.EINTERNAL)
	assert.Contains(t, err.Error(), "boom")
}

// The header-like value: a client interceptor adds a user field to every
// call, a server interceptor reads it (and answers one back).
func TestInterceptorsCarryAUserField(t *testing.T) {
	var seen sync.Map
	srv, _ := echotest.StartServer(t, &server.Options{Interceptors: []server.Interceptor{
		func(cntl *controller.Controller, req, resp proto.Message, done func(), next server.Handler) {
			v := cntl.RequestUserFields()["x-caller"]
			seen.Store(v, true)
			if v == "" {
				cntl.SetFailed(controller.EREQUEST, "no x-caller")
				done()
				return
			}
			next(cntl, req, resp, func() {
				cntl.ResponseUserFields()["x-served-by"] = "test"
				done()
			})
		},
	}})
	addCaller := func(ctx context.Context, md protoreflect.MethodDescriptor, cntl *controller.Controller,
		req, resp proto.Message, invoke channel.Invoker) error {
		cntl.RequestUserFields()["x-caller"] = "billing"
		return invoke(ctx, md, cntl, req, resp)
	}
	withIC := newClient(t, srv.ListenAddress().String(), func(o *channel.Options) {
		o.Interceptors = []channel.Interceptor{addCaller}
	})
	var res channel.CallResult
	_, err := withIC.Echo(context.Background(), msg("hi"), channel.Result(&res))
	require.NoError(t, err)
	_, ok := seen.Load("billing")
	assert.True(t, ok)
	assert.Equal(t, "test", res.ResponseUserFields["x-served-by"])

	plain := newClient(t, srv.ListenAddress().String(), func(o *channel.Options) { o.ConnectionGroup = "plain" })
	_, err = plain.Echo(context.Background(), msg("hi"))
	assert.ErrorIs(t, err, controller.EREQUEST)
	_, err = plain.Echo(context.Background(), msg("hi"), channel.WithRequestUserField("x-caller", "direct"))
	require.NoError(t, err)
}

func TestServerInterceptorsRunInOrder(t *testing.T) {
	var mu sync.Mutex
	var trail []string
	ic := func(name string) server.Interceptor {
		return func(cntl *controller.Controller, req, resp proto.Message, done func(), next server.Handler) {
			mu.Lock()
			trail = append(trail, name+">"+cntl.Method())
			mu.Unlock()
			next(cntl, req, resp, func() {
				mu.Lock()
				trail = append(trail, name+"<")
				mu.Unlock()
				done()
			})
		}
	}
	srv, _ := echotest.StartServer(t, &server.Options{Interceptors: []server.Interceptor{ic("a"), ic("b")}})
	client := newClient(t, srv.ListenAddress().String(), nil)
	_, err := client.Echo(context.Background(), msg("hi"))
	require.NoError(t, err)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"a>gobrpc.test.EchoService.Echo", "b>gobrpc.test.EchoService.Echo", "b<", "a<"}, trail)
}

// whoAmI answers with the user its connection authenticated as.
type whoAmI struct {
	testpb.UnimplementedEchoServiceServer
}

func (whoAmI) Echo(cntl *controller.Controller, req *testpb.EchoRequest, resp *testpb.EchoResponse, done func()) {
	defer done()
	if ac := cntl.AuthContext(); ac != nil {
		resp.Message = proto.String(ac.User)
	}
}

// countingAuth is auth.Token that counts credentials generated and
// verified.
type countingAuth struct {
	auth.Authenticator
	generated, verified atomic.Int64
}

func (a *countingAuth) GenerateCredential() (string, error) {
	a.generated.Add(1)
	return a.Authenticator.GenerateCredential()
}

func (a *countingAuth) VerifyCredential(cred string, client net.Addr) (*auth.Context, error) {
	a.verified.Add(1)
	return a.Authenticator.VerifyCredential(cred, client)
}

func TestAuthenticatorOncePerConnection(t *testing.T) {
	serverAuth := &countingAuth{Authenticator: auth.Token("s3cret")}
	srv := startService(t, &server.Options{Auth: serverAuth}, whoAmI{})
	addr := srv.ListenAddress().String()

	clientAuth := &countingAuth{Authenticator: auth.Token("s3cret")}
	good := newClient(t, addr, func(o *channel.Options) { o.Auth = clientAuth })
	// Many callers at once on one connection: exactly one credential.
	var wg sync.WaitGroup
	var failures atomic.Int64
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := good.Echo(context.Background(), msg("x"))
			if err != nil || resp.GetMessage() != "token" {
				failures.Add(1)
			}
		}()
	}
	wg.Wait()
	assert.Zero(t, failures.Load())
	assert.Equal(t, int64(1), clientAuth.generated.Load())
	assert.Equal(t, int64(1), serverAuth.verified.Load())

	// Pooled connections: one credential each.
	pooledAuth := &countingAuth{Authenticator: auth.Token("s3cret")}
	pooled := newClient(t, addr, func(o *channel.Options) { o.Auth = pooledAuth; o.ConnectionType = "pooled" })
	for range 3 {
		_, err := pooled.Echo(context.Background(), msg("x"))
		require.NoError(t, err)
	}
	assert.GreaterOrEqual(t, pooledAuth.generated.Load(), int64(1))

	// A wrong credential, or none: ERPCAUTH, not retried.
	bad := newClient(t, addr, func(o *channel.Options) { o.Auth = auth.Token("wrong") })
	_, err := bad.Echo(context.Background(), msg("x"))
	assert.ErrorIs(t, err, controller.ERPCAUTH)
	assert.Contains(t, err.Error(), "Fail to authenticate")
	none := newClient(t, addr, func(o *channel.Options) { o.ConnectionGroup = "none" })
	_, err = none.Echo(context.Background(), msg("x"))
	assert.ErrorIs(t, err, controller.ERPCAUTH)
}

type failingCredential struct{}

func (failingCredential) GenerateCredential() (string, error) { return "", errors.New("no key") }
func (failingCredential) VerifyCredential(string, net.Addr) (*auth.Context, error) {
	return nil, errors.New("unused")
}

func TestCredentialGenerationFailureIsERPCAUTH(t *testing.T) {
	srv, _ := echotest.StartServer(t, nil)
	client := newClient(t, srv.ListenAddress().String(), func(o *channel.Options) { o.Auth = failingCredential{} })
	_, err := client.Echo(context.Background(), msg("x"))
	assert.ErrorIs(t, err, controller.ERPCAUTH)
	assert.Contains(t, err.Error(), "no key")
}

// A call through A -> B -> C is one trace: every span has A's trace id,
// and each server span is the child of the client span that called it.
func TestTraceTravelsThroughAChain(t *testing.T) {
	var mu sync.Mutex
	var spans []rpcz.Span
	rpcz.SetHook(func(s rpcz.Span) {
		mu.Lock()
		spans = append(spans, s)
		mu.Unlock()
	})
	defer rpcz.SetHook(nil)

	c := &leaf{budget: make(chan int64, 4), abandoned: make(chan time.Time, 4)}
	srvC := startService(t, nil, c)
	b := &relay{next: newClient(t, srvC.ListenAddress().String(), nil)}
	srvB := startService(t, nil, b)
	a := newClient(t, srvB.ListenAddress().String(), nil)
	_, err := a.Echo(context.Background(), msg("traced"))
	require.NoError(t, err)
	<-c.budget
	// The server spans are recorded when the calls end; B's ends after C's.
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(spans) >= 4 }, 5*time.Second, 5*time.Millisecond)

	mu.Lock()
	defer mu.Unlock()
	var clients, servers []rpcz.Span
	for _, s := range spans {
		if !strings.HasSuffix(s.Method, "EchoService.Echo") {
			continue
		}
		if s.Server {
			servers = append(servers, s)
		} else {
			clients = append(clients, s)
		}
	}
	require.Len(t, clients, 2)
	require.Len(t, servers, 2)
	trace := clients[0].TraceID
	assert.NotZero(t, trace)
	for _, s := range append(clients, servers...) {
		assert.Equal(t, trace, s.TraceID, "one trace")
	}
	// C's client span (made by B's handler) is the child of B's server
	// span, which shares the id of A's client span.
	var aClient, bClient rpcz.Span
	for _, s := range clients {
		if s.ParentSpanID == 0 {
			aClient = s
		} else {
			bClient = s
		}
	}
	assert.Equal(t, aClient.SpanID, bClient.ParentSpanID)
	for _, s := range servers {
		assert.Contains(t, []int64{aClient.SpanID, bClient.SpanID}, s.SpanID)
	}
}

func TestUnimplementedServerAnswersENOMETHOD(t *testing.T) {
	type partial struct {
		testpb.UnimplementedEchoServiceServer
	}
	srv := startService(t, nil, partial{})
	_, err := newClient(t, srv.ListenAddress().String(), nil).Echo(context.Background(), msg("x"))
	assert.ErrorIs(t, err, controller.ENOMETHOD)
	assert.Contains(t, err.Error(), "not implemented")
}

func TestNewReportsInitErrors(t *testing.T) {
	_, err := channel.New("list://127.0.0.1:1", "", nil)
	assert.ErrorContains(t, err, "needs a load balancer")
	ch, err := channel.New("127.0.0.1:1", "", nil)
	require.NoError(t, err)
	assert.NoError(t, ch.Close())
}

// Through a SelectiveChannel the server still sees the caller's deadline
// and user fields, and the caller's context still cancels.
func TestSelectiveChannelPassesDeadlineAndUserFields(t *testing.T) {
	svc := &deadlineService{seen: make(chan deadlineSeen, 4)}
	srv := startService(t, nil, svc)
	sub, err := channel.New(srv.ListenAddress().String(), "", nil)
	require.NoError(t, err)
	var sch channel.SelectiveChannel
	opts := channel.DefaultOptions()
	require.NoError(t, sch.Init("rr", &opts))
	defer sch.Close()
	_, err = sch.AddChannel(sub, "")
	require.NoError(t, err)
	client := testpb.NewEchoServiceClient(&sch)
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	_, err = client.Echo(ctx, msg("x"))
	require.NoError(t, err)
	s := <-svc.seen
	assert.True(t, s.has)
	assert.LessOrEqual(t, s.timeoutMs, int64(700))
	assert.Greater(t, s.timeoutMs, int64(200))
}
