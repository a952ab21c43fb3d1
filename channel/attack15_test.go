package channel_test

// attack15: outside-attacker tests of the channel.

import (
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gobrpc/gobrpc/channel"
	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/server"
	"github.com/gobrpc/gobrpc/testsupport/echotest"
	"github.com/gobrpc/gobrpc/testsupport/testpb"
)

// a15Backlog0 is a listener whose accept queue holds one connection: once
// that is queued, further connects hang (Linux drops their SYNs).
func a15Backlog0(t *testing.T) (net.Listener, string) {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	require.NoError(t, err)
	require.NoError(t, syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}))
	require.NoError(t, syscall.Listen(fd, 0))
	sa, err := syscall.Getsockname(fd)
	require.NoError(t, err)
	f := os.NewFile(uintptr(fd), "backlog0")
	ln, err := net.FileListener(f)
	f.Close()
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	return ln, fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
}

// TestAttack15BackupDialStallsEveryTimer: a pooled cluster channel whose
// backup goes to a server with an idle pooled connection that the server
// closed, and whose accept queue is full. The backup is issued on the
// process-wide timer goroutine; Ready() said an idle connection exists, so
// Acquire finds it dead and dials right there. While that connect hangs, no
// other deadline in the process fires: a victim call with a 100 ms
// timeout on another channel returns seconds late.
func TestAttack15BackupDialStallsEveryTimer(t *testing.T) {
	srvA := a15EchoAddr(t)
	lnB, addrB := a15Backlog0(t)

	closeB := make(chan struct{})
	var bCalls atomic.Int32
	var bwg sync.WaitGroup
	bwg.Add(1)
	go func() { // B: accept one connection, answer on it until closeB
		defer bwg.Done()
		c, err := lnB.Accept()
		if err != nil {
			return
		}
		go func() { <-closeB; c.Close() }()
		for {
			r, err := malReadRequest(c)
			if err != nil {
				return
			}
			bCalls.Add(1)
			c.Write(malReply(r.meta.CorrelationID, r.msg))
		}
	}()
	t.Cleanup(func() {
		select {
		case <-closeB:
		default:
			close(closeB)
		}
		lnB.Close()
		bwg.Wait()
	})

	_, stub := malChannel(t, "list://"+srvA+","+addrB, "rr", func(o *channel.Options) {
		o.ConnectionType = "pooled"
		o.MaxRetry = 1
		o.TimeoutMs = 3000
	})
	// Warm up until the last call went to B: rr's next pick is A.
	for i := 0; i < 10; i++ {
		before := bCalls.Load()
		cntl := controller.New()
		malCall(t, stub, cntl, "hi", 5*time.Second)
		require.False(t, cntl.Failed(), cntl.ErrorText())
		if bCalls.Load() > before && i >= 1 {
			break
		}
	}
	close(closeB) // B closes its (now idle) pooled connection
	// Fill B's accept queue: connects from now on hang.
	filler, err := net.DialTimeout("tcp", addrB, time.Second)
	require.NoError(t, err)
	defer filler.Close()
	time.Sleep(50 * time.Millisecond)

	// The attack: first attempt to A (slow), backup after 20 ms to B.
	attackDone := make(chan struct{})
	go func() {
		defer close(attackDone)
		cntl := controller.New()
		cntl.SetBackupRequestMs(20)
		resp := &testpb.EchoResponse{}
		stub.Echo(cntl, &testpb.EchoRequest{Message: strPtr("sleep:2500ms")}, resp, nil)
	}()
	time.Sleep(150 * time.Millisecond)

	// The victim: another channel, a silent server, a 100 ms deadline.
	silent := startMalServer(t, func(s *malServer, c net.Conn) { s.holdOpen(c) })
	_, vstub := malChannel(t, silent.addr(), "", func(o *channel.Options) { o.TimeoutMs = 100; o.MaxRetry = 0 })
	cntl := controller.New()
	_, took := malCall(t, vstub, cntl, "x", 10*time.Second)
	require.True(t, cntl.Failed())
	require.Equal(t, controller.ERPCTIMEDOUT, controller.Errno(cntl.ErrorCode()), cntl.ErrorText())
	<-attackDone
	require.Less(t, took, 1100*time.Millisecond,
		"a 100 ms call took %v: its deadline timer was held up by another channel's backup connect", took)
}

func strPtr(s string) *string { return &s }

func a15EchoAddr(t *testing.T) string {
	srv, _ := echotest.StartServer(t, nil)
	return srv.ListenAddress().String()
}

// TestAttack15ConcurrentDeadlinesCancels: 1, 2 and 50 callers on one
// single connection or a pool, sync and async mixed, each with its own
// deadline, some canceled from another goroutine at a random moment, the
// server answering after 0-300 ms. Every call must end by its deadline
// (+ slack), with its own answer or ERPCTIMEDOUT/ECANCELED.
func TestAttack15ConcurrentDeadlinesCancels(t *testing.T) {
	malLeakCheck(t)
	addr := a15EchoAddr(t)
	for _, ct := range []string{"single", "pooled"} {
		for _, n := range []int{1, 2, 50} {
			t.Run(fmt.Sprintf("%s/%d", ct, n), func(t *testing.T) {
				ch, stub := malChannel(t, addr, "", func(o *channel.Options) {
					o.ConnectionType = ct
					o.MaxRetry = 0
				})
				var wg sync.WaitGroup
				for g := 0; g < n; g++ {
					wg.Add(1)
					go func(g int) {
						defer wg.Done()
						for i := 0; i < 6; i++ {
							a15OneCall(t, stub, g*100+i)
						}
					}(g)
				}
				wg.Wait()
				ch.Close()
			})
		}
	}
}

func a15OneCall(t *testing.T, stub *testpb.EchoServiceStub, seed int) {
	r := uint32(seed*2654435761 + 12345)
	next := func(m uint32) int { r = r*1103515245 + 12345; return int((r >> 8) % m) }
	timeout := 20 + next(200)
	sleep := next(300)
	cancelAt := -1
	if next(3) == 0 {
		cancelAt = next(250)
	}
	async := next(2) == 0
	msg := fmt.Sprintf("sleep:%dms", sleep)
	cntl := controller.New()
	cntl.SetTimeoutMs(int64(timeout))
	resp := &testpb.EchoResponse{}
	start := time.Now()
	ended := make(chan struct{})
	if cancelAt >= 0 {
		go func() {
			select {
			case <-time.After(time.Duration(cancelAt) * time.Millisecond):
				cntl.StartCancel()
			case <-ended:
			}
		}()
	}
	finished := make(chan struct{})
	if async {
		stub.Echo(cntl, &testpb.EchoRequest{Message: &msg}, resp, func() { close(finished) })
	} else {
		go func() {
			stub.Echo(cntl, &testpb.EchoRequest{Message: &msg}, resp, nil)
			close(finished)
		}()
	}
	select {
	case <-finished:
	case <-time.After(time.Duration(timeout)*time.Millisecond + 2*time.Second):
		t.Errorf("call %d (timeout %d ms, sleep %d, cancel %d, async %v) hangs", seed, timeout, sleep, cancelAt, async)
		close(ended)
		<-finished
		return
	}
	close(ended)
	took := time.Since(start)
	if took > time.Duration(timeout)*time.Millisecond+time.Second {
		t.Errorf("call %d took %v past its %d ms deadline", seed, took, timeout)
	}
	if !cntl.Failed() {
		if resp.GetMessage() != msg {
			t.Errorf("call %d got %q, want %q", seed, resp.GetMessage(), msg)
		}
		return
	}
	switch code := controller.Errno(cntl.ErrorCode()); code {
	case controller.ERPCTIMEDOUT:
	case controller.ECANCELED:
		if cancelAt < 0 {
			t.Errorf("call %d canceled without a cancel: %s", seed, cntl.ErrorText())
		}
	default:
		t.Errorf("call %d failed with %v: %s", seed, code, cntl.ErrorText())
	}
}

// TestAttack15BackupMixes: backups on one single connection (the server
// delays every other request) and over 3 servers (one always slow), with
// 1 and 20 callers, sync and async. Every call must succeed with its own
// answer, well before its deadline.
func TestAttack15BackupMixes(t *testing.T) {
	malLeakCheck(t)
	srv1, svc1 := echotest.StartServer(t, nil)
	svc1.Delay.Store(int64(400 * time.Millisecond))
	svc1.DelayEveryOther.Store(true)
	slow, slowSvc := echotest.StartServer(t, nil)
	slowSvc.Delay.Store(int64(400 * time.Millisecond))
	fast1, fast2 := a15EchoAddr(t), a15EchoAddr(t)
	targets := map[string][2]string{
		"one":   {srv1.ListenAddress().String(), ""},
		"three": {"list://" + slow.ListenAddress().String() + "," + fast1 + "," + fast2, "rr"},
	}
	for name, tg := range targets {
		for _, ct := range []string{"single", "pooled"} {
			for _, n := range []int{1, 20} {
				t.Run(fmt.Sprintf("%s/%s/%d", name, ct, n), func(t *testing.T) {
					ch, stub := malChannel(t, tg[0], tg[1], func(o *channel.Options) {
						o.ConnectionType = ct
						o.MaxRetry = 1
						o.BackupRequestMs = 15
						o.TimeoutMs = 3000
					})
					var wg sync.WaitGroup
					for g := 0; g < n; g++ {
						wg.Add(1)
						go func(g int) {
							defer wg.Done()
							for i := 0; i < 4; i++ {
								msg := fmt.Sprintf("m%d-%d", g, i)
								cntl := controller.New()
								resp := &testpb.EchoResponse{}
								start := time.Now()
								if (g+i)%2 == 0 {
									stub.Echo(cntl, &testpb.EchoRequest{Message: &msg}, resp, nil)
								} else {
									done := make(chan struct{})
									stub.Echo(cntl, &testpb.EchoRequest{Message: &msg}, resp, func() { close(done) })
									<-done
								}
								took := time.Since(start)
								if cntl.Failed() {
									t.Errorf("%s failed: %s", msg, cntl.ErrorText())
								} else if resp.GetMessage() != msg {
									t.Errorf("%s answered %q", msg, resp.GetMessage())
								}
								if took > 1500*time.Millisecond {
									t.Errorf("%s took %v despite the backup", msg, took)
								}
							}
						}(g)
					}
					wg.Wait()
					ch.Close()
				})
			}
		}
	}
}

// a15Blocker blocks synchronously in its handler (it runs on the
// server's connection reader when the request is alone); "forever" blocks
// until the test ends; "twice" calls done twice; "never" never calls it;
// "panic" panics.
type a15Blocker struct {
	stop chan struct{}
}

func (b *a15Blocker) Echo(cntl *controller.Controller, req *testpb.EchoRequest, resp *testpb.EchoResponse, done func()) {
	msg := req.GetMessage()
	switch {
	case msg == "forever":
		<-b.stop
	case msg == "twice":
		resp.Message = req.Message
		done()
		done()
		return
	case msg == "never":
		go func() { <-b.stop; done() }() // Join waits for it
		return
	case msg == "panic":
		panic("a15 panic")
	case len(msg) > 6 && msg[:6] == "block:":
		d, _ := time.ParseDuration(msg[6:])
		time.Sleep(d)
	}
	resp.Message = req.Message
	done()
}

func a15StartBlocker(t *testing.T) string {
	t.Helper()
	srv := server.New(nil)
	b := &a15Blocker{stop: make(chan struct{})}
	require.NoError(t, testpb.RegisterEchoServiceServer(srv, b))
	require.NoError(t, srv.Start("127.0.0.1:0"))
	t.Cleanup(func() {
		close(b.stop)
		srv.Stop()
		srv.Join()
	})
	return srv.ListenAddress().String()
}

// TestAttack15SlowHandlerDoesNotBlockConnection: a handler that blocks
// (sleeps 1.5 s, forever, never calls done, panics, calls done twice)
// must not hold back the other requests on the same connection.
func TestAttack15SlowHandlerDoesNotBlockConnection(t *testing.T) {
	addr := a15StartBlocker(t)
	for _, slowMsg := range []string{"block:1500ms", "forever", "never", "panic", "twice"} {
		t.Run(slowMsg, func(t *testing.T) {
			_, stub := malChannel(t, addr, "", func(o *channel.Options) {
				o.TimeoutMs = 2500
				o.MaxRetry = 0
			})
			// Warm the single connection up.
			cntl := controller.New()
			malCall(t, stub, cntl, "warm", 5*time.Second)
			require.False(t, cntl.Failed(), cntl.ErrorText())

			slowDone := make(chan struct{})
			slow := controller.New()
			stub.Echo(slow, &testpb.EchoRequest{Message: strPtr(slowMsg)}, &testpb.EchoResponse{}, func() { close(slowDone) })
			time.Sleep(20 * time.Millisecond)
			var worst time.Duration
			for i := 0; i < 10; i++ {
				cntl := controller.New()
				msg := fmt.Sprintf("fast%d", i)
				resp, took := malCall(t, stub, cntl, msg, 5*time.Second)
				require.False(t, cntl.Failed(), "%s: %s", msg, cntl.ErrorText())
				require.Equal(t, msg, resp.GetMessage())
				worst = max(worst, took)
			}
			require.Less(t, worst, 500*time.Millisecond, "a fast call waited behind %q", slowMsg)
			slow.StartCancel()
			<-slowDone
		})
	}
}

// TestAttack15ServerClosesAfterAnswer: a server that closes each
// connection right after answering on it (as a server with a very short
// idle timeout, or one restarting, does). The channel has a clean,
// answered connection that the peer has closed by the time the next call
// starts; with MaxRetry 0 that next call must not fail with EOF: the close
// came before the call, not during it.
func TestAttack15ServerClosesAfterAnswer(t *testing.T) {
	malLeakCheck(t)
	closed := make(chan struct{}, 100)
	s := startMalServer(t, malServe(func(s *malServer, c net.Conn, r *malRequest) bool {
		c.Write(malReply(r.meta.CorrelationID, r.msg))
		c.Close()
		closed <- struct{}{} // the FIN is sent
		return false
	}))
	for _, ct := range []string{"single", "pooled"} {
		t.Run(ct, func(t *testing.T) {
			_, stub := malChannel(t, s.addr(), "", func(o *channel.Options) {
				o.ConnectionType = ct
				o.MaxRetry = 0
				o.TimeoutMs = 2000
			})
			failed := 0
			var texts []string
			for i := 0; i < 20; i++ {
				cntl := controller.New()
				msg := fmt.Sprintf("m%d", i)
				resp, _ := malCall(t, stub, cntl, msg, 5*time.Second)
				if cntl.Failed() {
					failed++
					if len(texts) < 2 {
						texts = append(texts, cntl.ErrorText())
					}
					continue
				}
				require.Equal(t, msg, resp.GetMessage())
				<-closed // the server closed the connection before the next call
				time.Sleep(a15Gap)
			}
			require.Zero(t, failed, "%d of 20 calls failed on a connection closed before they started: %v", failed, texts)
		})
	}
}

// a15Gap lets the FIN the server sent reach the client (loopback delivers
// it from a softirq that may run a while after close returns, later still
// on a busy machine: 500 µs failed 1 run in 10 with a core kept busy):
// without it, a call may start before the close is visible at all, which
// no client can tell.
var a15Gap = 20 * time.Millisecond

// TestAttack15RawPeerOddAnswers: a server that answers each request twice,
// precedes the answer with one for an unknown id and one for the previous
// request, and sometimes resets mid-answer. Sync callers reading their own
// responses and async callers share the connection; every call ends by its
// deadline with its own answer or a connection error, never another's.
func TestAttack15RawPeerOddAnswers(t *testing.T) {
	malLeakCheck(t)
	var prev atomic.Int64
	var n atomic.Int32
	s := startMalServer(t, malServe(func(s *malServer, c net.Conn, r *malRequest) bool {
		id := r.meta.CorrelationID
		var b []byte
		b = append(b, malReply(id+1000000, "unknown")...)
		if p := prev.Swap(id); p != 0 {
			b = append(b, malReply(p, "stale")...)
		}
		ans := malReply(id, r.msg)
		if n.Add(1)%13 == 0 {
			c.Write(append(b, ans[:len(ans)/2]...))
			malReset(c)
			return false
		}
		b = append(b, ans...)
		b = append(b, malReply(id, "again")...)
		c.Write(b)
		return true
	}))
	for _, ct := range []string{"single", "pooled"} {
		t.Run(ct, func(t *testing.T) {
			ch, stub := malChannel(t, s.addr(), "", func(o *channel.Options) {
				o.ConnectionType = ct
				o.MaxRetry = 0
				o.TimeoutMs = 1000
			})
			var wg sync.WaitGroup
			for g := 0; g < 8; g++ {
				wg.Add(1)
				go func(g int) {
					defer wg.Done()
					for i := 0; i < 15; i++ {
						msg := fmt.Sprintf("g%d-%d", g, i)
						cntl := controller.New()
						resp := &testpb.EchoResponse{}
						start := time.Now()
						if i%2 == 0 {
							stub.Echo(cntl, &testpb.EchoRequest{Message: &msg}, resp, nil)
						} else {
							done := make(chan struct{})
							stub.Echo(cntl, &testpb.EchoRequest{Message: &msg}, resp, func() { close(done) })
							select {
							case <-done:
							case <-time.After(5 * time.Second):
								t.Errorf("%s: async call never ended", msg)
								return
							}
						}
						if took := time.Since(start); took > 2500*time.Millisecond {
							t.Errorf("%s took %v", msg, took)
						}
						if !cntl.Failed() && resp.GetMessage() != msg {
							t.Errorf("%s got %q", msg, resp.GetMessage())
						}
						if cntl.Failed() {
							switch controller.Errno(cntl.ErrorCode()) {
							case controller.EEOF, controller.ECONNRESET, controller.EFAILEDSOCKET, controller.ERPCTIMEDOUT:
							default:
								t.Errorf("%s: %s", msg, cntl.ErrorText())
							}
						}
					}
				}(g)
			}
			wg.Wait()
			ch.Close()
		})
	}
}

// TestAttack15ControllerReuseInDone: done Resets its Controller and starts
// the next call with it, 30 times in a chain, mixed with a StartCancel
// from another goroutine; and Reset during a call is refused cleanly.
func TestAttack15ControllerReuseInDone(t *testing.T) {
	malLeakCheck(t)
	addr := a15EchoAddr(t)
	_, stub := malChannel(t, addr, "", func(o *channel.Options) { o.MaxRetry = 0; o.TimeoutMs = 2000 })
	cntl := controller.New()
	resp := &testpb.EchoResponse{}
	all := make(chan struct{})
	var i int
	var bad atomic.Int32
	var next func()
	next = func() {
		if cntl.Failed() && controller.Errno(cntl.ErrorCode()) != controller.ECANCELED {
			bad.Add(1)
			t.Errorf("call %d: %s", i, cntl.ErrorText())
		} else if !cntl.Failed() && resp.GetMessage() != fmt.Sprintf("sleep:%dms", i%3) {
			bad.Add(1)
			t.Errorf("call %d got %q", i, resp.GetMessage())
		}
		i++
		if i == 30 {
			close(all)
			return
		}
		cntl.Reset()
		resp.Reset()
		msg := fmt.Sprintf("sleep:%dms", i%3)
		cancel := i%7 == 0 // i belongs to the next done once the call started
		stub.Echo(cntl, &testpb.EchoRequest{Message: &msg}, resp, next)
		if cancel {
			cntl.StartCancel()
		}
	}
	msg := "sleep:0ms"
	stub.Echo(cntl, &testpb.EchoRequest{Message: &msg}, resp, next)
	select {
	case <-all:
	case <-time.After(10 * time.Second):
		t.Fatalf("the chain stopped at call %d", i)
	}
	cntl.Join()
}

// TestAttack15ServerRestartSamePort: the server restarts on the same port
// between two calls; with MaxRetry 0 the second call must succeed (its
// connection died before it started).
func TestAttack15ServerRestartSamePort(t *testing.T) {
	for _, ct := range []string{"single", "pooled"} {
		t.Run(ct, func(t *testing.T) {
			newSrv := func(addr string) *server.Server {
				srv := server.New(nil)
				require.NoError(t, testpb.RegisterEchoServiceServer(srv, &echotest.Service{}))
				require.NoError(t, srv.Start(addr))
				return srv
			}
			srv := newSrv("127.0.0.1:0")
			addr := srv.ListenAddress().String()
			_, stub := malChannel(t, addr, "", func(o *channel.Options) { o.ConnectionType = ct; o.MaxRetry = 0 })
			for round := 0; round < 3; round++ {
				cntl := controller.New()
				resp, _ := malCall(t, stub, cntl, "hi", 5*time.Second)
				require.False(t, cntl.Failed(), "round %d: %s", round, cntl.ErrorText())
				require.Equal(t, "hi", resp.GetMessage())
				srv.Stop()
				srv.Join()
				srv = newSrv(addr)
				time.Sleep(20 * time.Millisecond)
			}
			srv.Stop()
			srv.Join()
		})
	}
}
