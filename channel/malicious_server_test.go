package channel_test

// Malicious and broken baidu_std servers, written by hand on raw loopback
// sockets, against the client. Every call must end by its deadline (with
// generous slack: the failure would be a hang) with a clear error, and
// nothing may be left behind once the channel is closed: no goroutine, no
// significant memory. After each failure the Controller is Reset and
// reused against a real server.

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"errors"
	"flag"
	"io"
	"math"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/gobrpc/gobrpc/channel"
	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/protocol/baidustd"
	"github.com/gobrpc/gobrpc/testsupport/echotest"
	"github.com/gobrpc/gobrpc/testsupport/testpb"
)

// malSlack is how late past its deadline a call may end before the test
// calls it a hang: CI runs this under -race on 2 busy cores.
const malSlack = 2 * time.Second

var malConnTypes = []string{"single", "pooled", "short"}

// malLeakCheck fails t if goroutines started during t outlive it. Call it
// first: its cleanup then runs last, after the channel and the server are
// closed.
func malLeakCheck(t *testing.T) {
	t.Helper()
	// The real servers' worker pools grow on demand, and a server
	// connection's reader is replaced when it ran a request in place for
	// long; they are servers, not the client under test (TestMain checks
	// them in the end). Client connections never read in readLoop.
	opts := append(echotest.LeakOptions(), goleak.IgnoreCurrent(),
		goleak.IgnoreTopFunction("github.com/gobrpc/gobrpc/server.(*workerPool).work"),
		goleak.IgnoreAnyFunction("github.com/gobrpc/gobrpc/internal/transport.(*Conn).readLoop"))
	t.Cleanup(func() { goleak.VerifyNone(t, opts...) })
}

// malServer is a hand-written server: handle runs on its own goroutine for
// every accepted connection, which is closed when handle returns or the
// test ends.
type malServer struct {
	ln      net.Listener
	stop    chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	accepts atomic.Int32
	reqs    atomic.Int32
}

func startMalServer(t *testing.T, handle func(s *malServer, c net.Conn)) *malServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &malServer{ln: ln, stop: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.accepts.Add(1)
			s.mu.Lock()
			select {
			case <-s.stop:
				s.mu.Unlock()
				c.Close()
				return
			default:
			}
			s.conns[c] = struct{}{}
			s.wg.Add(1)
			s.mu.Unlock()
			go func() {
				defer s.wg.Done()
				defer s.forget(c)
				handle(s, c)
			}()
		}
	}()
	t.Cleanup(s.close)
	return s
}

func (s *malServer) addr() string { return s.ln.Addr().String() }

func (s *malServer) forget(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	c.Close()
}

func (s *malServer) close() {
	s.mu.Lock()
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.ln.Close()
	s.wg.Wait()
}

// sleep waits d unless the server stops first (then false).
func (s *malServer) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-s.stop:
		return false
	case <-t.C:
		return true
	}
}

// holdOpen keeps c open, unread, until the test ends.
func (s *malServer) holdOpen(net.Conn) { <-s.stop }

// malRequest is one request read off the wire.
type malRequest struct {
	meta baidustd.Meta
	msg  string // EchoRequest.message
	att  []byte
}

func malReadRequest(c net.Conn) (*malRequest, error) {
	hdr := make([]byte, baidustd.HeaderSize)
	if _, err := io.ReadFull(c, hdr); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[4:])
	if n > 256<<20 {
		return nil, errors.New("request too big")
	}
	frame := make([]byte, baidustd.HeaderSize+int(n))
	copy(frame, hdr)
	if _, err := io.ReadFull(c, frame[baidustd.HeaderSize:]); err != nil {
		return nil, err
	}
	r := &malRequest{}
	msg, att, err := baidustd.DecodeFrame(frame, &r.meta)
	if err != nil {
		return nil, err
	}
	var req testpb.EchoRequest
	if err := proto.Unmarshal(msg, &req); err != nil {
		return nil, err
	}
	r.msg, r.att = req.GetMessage(), att
	return r, nil
}

// malServe calls answer for every request on c until it returns false or
// the connection ends.
func malServe(answer func(s *malServer, c net.Conn, r *malRequest) bool) func(*malServer, net.Conn) {
	return func(s *malServer, c net.Conn) {
		for {
			r, err := malReadRequest(c)
			if err != nil {
				return
			}
			s.reqs.Add(1)
			if !answer(s, c, r) {
				return
			}
		}
	}
}

func malEchoBody(msg string) []byte {
	b, err := proto.Marshal(&testpb.EchoResponse{Message: proto.String(msg)})
	if err != nil {
		panic(err)
	}
	return b
}

// malReply is a well-formed success answer.
func malReply(id int64, msg string) []byte {
	m := baidustd.Meta{HasResponse: true, CorrelationID: id}
	f, err := baidustd.AppendFrame(nil, &m, malEchoBody(msg), nil)
	if err != nil {
		panic(err)
	}
	return f
}

// malErrorReply is an error answer.
func malErrorReply(id int64, code int32, text string) []byte {
	m := baidustd.Meta{HasResponse: true, CorrelationID: id, ErrorCode: code, ErrorText: text}
	f, err := baidustd.AppendFrame(nil, &m, nil, nil)
	if err != nil {
		panic(err)
	}
	return f
}

// malRawFrame frames meta and payload as given, without any checking.
func malRawFrame(meta, payload []byte) []byte {
	f := []byte("PRPC")
	f = binary.BigEndian.AppendUint32(f, uint32(len(meta)+len(payload)))
	f = binary.BigEndian.AppendUint32(f, uint32(len(meta)))
	f = append(f, meta...)
	return append(f, payload...)
}

// malHeader is a frame header announcing bodySize and metaSize.
func malHeader(bodySize, metaSize uint32) []byte {
	f := []byte("PRPC")
	f = binary.BigEndian.AppendUint32(f, bodySize)
	return binary.BigEndian.AppendUint32(f, metaSize)
}

// malMeta encodes m, then appends extra raw fields (later scalars win).
func malMeta(m baidustd.Meta, extra ...[]byte) []byte {
	b := baidustd.AppendMeta(nil, &m)
	for _, e := range extra {
		b = append(b, e...)
	}
	return b
}

// malInt32Field encodes field num as an int32 varint (negatives sign-extended).
func malInt32Field(num protowire.Number, v int32) []byte {
	b := protowire.AppendTag(nil, num, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(int64(v)))
}

func malReset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

// malChannel opens a channel closed when the test ends. Connects are
// bounded by the RPC's deadline only: a starved CI machine can take more
// than the default 200 ms to complete a loopback connect, and these tests
// are about what servers do once connected.
func malChannel(t *testing.T, target, lb string, mutate func(*channel.Options)) (*channel.Channel, *testpb.EchoServiceStub) {
	t.Helper()
	opts := channel.DefaultOptions()
	opts.ConnectTimeoutMs = -1
	if mutate != nil {
		mutate(&opts)
	}
	ch := &channel.Channel{}
	require.NoError(t, ch.Init(target, lb, &opts))
	t.Cleanup(func() { ch.Close() })
	return ch, testpb.NewEchoServiceStub(ch)
}

// malCall makes a synchronous call and stops the test if it does not
// return within budget (a hang). Only on the test's goroutine.
func malCall(t *testing.T, stub *testpb.EchoServiceStub, cntl *controller.Controller, msg string, budget time.Duration) (*testpb.EchoResponse, time.Duration) {
	t.Helper()
	resp, took, ok := malTryCall(t, stub, cntl, msg, budget)
	if !ok {
		t.FailNow()
	}
	return resp, took
}

// malTryCall is malCall for any goroutine: on a hang it reports an error
// and returns false, and the caller must leave cntl alone.
func malTryCall(t *testing.T, stub *testpb.EchoServiceStub, cntl *controller.Controller, msg string, budget time.Duration) (*testpb.EchoResponse, time.Duration, bool) {
	t.Helper()
	resp := &testpb.EchoResponse{}
	returned := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(returned)
		stub.Echo(cntl, &testpb.EchoRequest{Message: proto.String(msg)}, resp, nil)
	}()
	select {
	case <-returned:
		return resp, time.Since(start), true
	case <-time.After(budget):
		t.Errorf("HANG: the call did not return within %v", budget)
		return nil, budget, false
	}
}

// malAsync starts an asynchronous call; it fails the test if CallMethod
// does not return within callBudget. wait blocks until done ran (failing
// on a hang past budget) and reports how many times it ran.
func malAsync(t *testing.T, stub *testpb.EchoServiceStub, cntl *controller.Controller, msg string, callBudget time.Duration) (wait func(budget time.Duration) int32, callTook time.Duration) {
	t.Helper()
	resp := &testpb.EchoResponse{}
	var runs atomic.Int32
	ran := make(chan struct{}, 1)
	start := time.Now()
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		stub.Echo(cntl, &testpb.EchoRequest{Message: proto.String(msg)}, resp, func() {
			runs.Add(1)
			ran <- struct{}{}
		})
	}()
	select {
	case <-returned:
	case <-time.After(callBudget + malSlack):
		t.Fatalf("HANG: asynchronous CallMethod did not return")
	}
	callTook = time.Since(start)
	return func(budget time.Duration) int32 {
		select {
		case <-ran:
		case <-time.After(budget):
			t.Fatalf("HANG: done did not run within %v", budget)
		}
		cntl.Join()
		return runs.Load()
	}, callTook
}

// malReuse checks that a Controller that failed can be Reset and reused
// against a real server.
func malReuse(t *testing.T, good *testpb.EchoServiceStub, cntl *controller.Controller) {
	t.Helper()
	cntl.Reset()
	resp, _ := malCall(t, good, cntl, "after-reset", 5*time.Second)
	require.NoError(t, cntl.Err(), "a Reset Controller must work against a good server")
	assert.Equal(t, "after-reset", resp.GetMessage())
	assert.Zero(t, cntl.RetriedCount())
}

// malGoodStub is a channel to a real echo server, shared by subtests. It
// is connected before they start, so its connections' goroutines are not
// counted as theirs.
func malGoodStub(t *testing.T) *testpb.EchoServiceStub {
	t.Helper()
	srv, _ := echotest.StartServer(t, nil)
	_, stub := malChannel(t, srv.ListenAddress().String(), "", nil)
	cntl := controller.New()
	malCall(t, stub, cntl, "warm-up", 5*time.Second)
	require.NoError(t, cntl.Err())
	return stub
}

// malHeap is the heap in use after a full collection.
func malHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

func malTotalAlloc() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.TotalAlloc
}

const mib = 1 << 20

// ---------------------------------------------------------------------------
// Correlation ids.

func TestMaliciousCorrelationIDs(t *testing.T) {
	good := malGoodStub(t)

	t.Run("unknown ids only", func(t *testing.T) {
		for _, ct := range malConnTypes {
			t.Run(ct, func(t *testing.T) {
				malLeakCheck(t)
				s := startMalServer(t, malServe(func(_ *malServer, c net.Conn, r *malRequest) bool {
					id := r.meta.CorrelationID
					var out []byte
					for _, bad := range []int64{id + 1, id - 1, id + 1000, 0, -1, -id, math.MaxInt64, math.MinInt64, id ^ 1<<40} {
						out = append(out, malReply(bad, "forged")...)
						out = append(out, malErrorReply(bad, int32(controller.EINTERNAL), "forged error")...)
					}
					c.Write(out)
					return true // and never the right id
				}))
				_, stub := malChannel(t, s.addr(), "", func(o *channel.Options) {
					o.ConnectionType = ct
					o.TimeoutMs = 200
				})
				cntl := controller.New()
				resp, took := malCall(t, stub, cntl, "x", 200*time.Millisecond+malSlack)
				assert.Equal(t, controller.ERPCTIMEDOUT, cntl.ErrorCode(), cntl.ErrorText())
				assert.Contains(t, cntl.ErrorText(), "[E1008]Reached timeout=200ms")
				assert.GreaterOrEqual(t, took, 190*time.Millisecond, "no forged answer may end the call")
				assert.Empty(t, resp.GetMessage(), "a forged answer leaked into the response")
				assert.Zero(t, cntl.RetriedCount())
				malReuse(t, good, cntl)
			})
		}
	})

	t.Run("unknown ids then the right one", func(t *testing.T) {
		for _, ct := range malConnTypes {
			t.Run(ct, func(t *testing.T) {
				malLeakCheck(t)
				s := startMalServer(t, malServe(func(_ *malServer, c net.Conn, r *malRequest) bool {
					id := r.meta.CorrelationID
					out := append(malReply(id+1, "forged"), malReply(id-1, "forged")...)
					out = append(out, malReply(id, "real:"+r.msg)...)
					c.Write(out)
					return true
				}))
				_, stub := malChannel(t, s.addr(), "", func(o *channel.Options) { o.ConnectionType = ct })
				for i := range 5 {
					cntl := controller.New()
					msg := strings.Repeat("m", i+1)
					resp, _ := malCall(t, stub, cntl, msg, 500*time.Millisecond+malSlack)
					require.NoError(t, cntl.Err())
					assert.Equal(t, "real:"+msg, resp.GetMessage())
				}
			})
		}
	})

	t.Run("answers twice", func(t *testing.T) {
		for _, ct := range malConnTypes {
			t.Run(ct, func(t *testing.T) {
				malLeakCheck(t)
				s := startMalServer(t, malServe(func(_ *malServer, c net.Conn, r *malRequest) bool {
					id := r.meta.CorrelationID
					out := append(malReply(id, "first:"+r.msg), malReply(id, "second:"+r.msg)...)
					out = append(out, malErrorReply(id, int32(controller.EINTERNAL), "third")...)
					c.Write(out)
					return true
				}))
				_, stub := malChannel(t, s.addr(), "", func(o *channel.Options) { o.ConnectionType = ct })
				for i := range 10 {
					cntl := controller.New()
					msg := strings.Repeat("d", i+1)
					resp, _ := malCall(t, stub, cntl, msg, 500*time.Millisecond+malSlack)
					require.NoError(t, cntl.Err())
					assert.Equal(t, "first:"+msg, resp.GetMessage(), "the first answer wins; a duplicate must not answer a later call")
				}
			})
		}
	})

	// A retryable error, then a success for the same (now dead) id: the
	// retry's own answer must win, never the stale one.
	t.Run("error then success for the same id", func(t *testing.T) {
		for _, ct := range malConnTypes {
			t.Run(ct, func(t *testing.T) {
				malLeakCheck(t)
				var n atomic.Int32
				s := startMalServer(t, malServe(func(_ *malServer, c net.Conn, r *malRequest) bool {
					id := r.meta.CorrelationID
					var out []byte
					if n.Add(1)%2 == 1 {
						out = append(malErrorReply(id, int32(controller.ELIMIT), "busy"), malReply(id, "stale")...)
					} else {
						out = malReply(id, "real:"+r.msg)
					}
					_, err := c.Write(out)
					return err == nil
				}))
				_, stub := malChannel(t, s.addr(), "", func(o *channel.Options) { o.ConnectionType = ct })
				for i := range 5 {
					cntl := controller.New()
					msg := strings.Repeat("e", i+1)
					resp, _ := malCall(t, stub, cntl, msg, 500*time.Millisecond+malSlack)
					require.NoError(t, cntl.Err())
					assert.Equal(t, "real:"+msg, resp.GetMessage())
					assert.Equal(t, 1, cntl.RetriedCount())
				}
			})
		}
	})

	// The answer comes after the call timed out: it is dropped, and the
	// next call on the connection gets its own.
	t.Run("late answer", func(t *testing.T) {
		for _, ct := range malConnTypes {
			t.Run(ct, func(t *testing.T) {
				malLeakCheck(t)
				s := startMalServer(t, malServe(func(s *malServer, c net.Conn, r *malRequest) bool {
					if r.msg == "slow" && !s.sleep(150*time.Millisecond) {
						return false
					}
					_, err := c.Write(malReply(r.meta.CorrelationID, "re:"+r.msg))
					return err == nil
				}))
				_, stub := malChannel(t, s.addr(), "", func(o *channel.Options) { o.ConnectionType = ct })
				cntl := controller.New()
				cntl.SetTimeoutMs(30)
				resp, _ := malCall(t, stub, cntl, "slow", 30*time.Millisecond+malSlack)
				assert.Equal(t, controller.ERPCTIMEDOUT, cntl.ErrorCode())
				assert.Empty(t, resp.GetMessage())
				for i := range 5 {
					cntl.Reset()
					msg := strings.Repeat("l", i+1)
					resp, _ := malCall(t, stub, cntl, msg, 500*time.Millisecond+malSlack)
					require.NoError(t, cntl.Err())
					assert.Equal(t, "re:"+msg, resp.GetMessage(), "the late answer must not answer a later call")
				}
			})
		}
	})

	// Answers land around the deadline, at random: each call ends once,
	// either with its own answer or timed out with its response untouched
	// (-race checks nothing touches it after done).
	t.Run("answers at the deadline", func(t *testing.T) {
		for _, ct := range malConnTypes {
			t.Run(ct, func(t *testing.T) {
				malLeakCheck(t)
				var seed atomic.Int64
				s := startMalServer(t, func(s *malServer, c net.Conn) {
					var wmu sync.Mutex
					var wg sync.WaitGroup
					defer wg.Wait()
					malServe(func(s *malServer, c net.Conn, r *malRequest) bool {
						d := time.Duration(seed.Add(7)%30) * time.Millisecond
						wg.Go(func() {
							if s.sleep(d) {
								wmu.Lock()
								c.Write(malReply(r.meta.CorrelationID, "re:"+r.msg))
								wmu.Unlock()
							}
						})
						return true
					})(s, c)
				})
				_, stub := malChannel(t, s.addr(), "", func(o *channel.Options) { o.ConnectionType = ct })
				const calls = 100
				type result struct {
					cntl *controller.Controller
					resp *testpb.EchoResponse
					msg  string
					runs atomic.Int32
				}
				results := make([]*result, calls)
				var all sync.WaitGroup
				for i := range calls {
					r := &result{cntl: controller.New(), resp: &testpb.EchoResponse{}, msg: "m" + strconv.Itoa(i)}
					results[i] = r
					r.cntl.SetTimeoutMs(15)
					all.Add(1)
					stub.Echo(r.cntl, &testpb.EchoRequest{Message: proto.String(r.msg)}, r.resp, func() {
						r.runs.Add(1)
						all.Done()
					})
				}
				finished := make(chan struct{})
				go func() { all.Wait(); close(finished) }()
				select {
				case <-finished:
				case <-time.After(15*time.Millisecond + 5*malSlack):
					t.Fatal("HANG: not every done ran")
				}
				outcomes := map[controller.Errno]int{}
				for _, r := range results {
					r.cntl.Join()
					assert.Equal(t, int32(1), r.runs.Load())
					outcomes[r.cntl.ErrorCode()]++
					switch r.cntl.ErrorCode() {
					case 0:
						assert.Equal(t, "re:"+r.msg, r.resp.GetMessage())
					case controller.ERPCTIMEDOUT, controller.ETIMEDOUT: // ETIMEDOUT: the connect, capped by the deadline
						assert.Empty(t, r.resp.GetMessage(), "a timed-out call's response was written")
					default:
						t.Errorf("unexpected outcome: %s", r.cntl.ErrorText())
					}
				}
				t.Logf("%s: %v", ct, outcomes)
			})
		}
	})

	// On request id, the server first answers the ids the client will use
	// next (ids are sequential), then id itself: the guesses arrive
	// before those requests exist and must be dropped.
	t.Run("answers before the request", func(t *testing.T) {
		for _, ct := range malConnTypes {
			t.Run(ct, func(t *testing.T) {
				malLeakCheck(t)
				s := startMalServer(t, malServe(func(_ *malServer, c net.Conn, r *malRequest) bool {
					id := r.meta.CorrelationID
					var out []byte
					for k := int64(1); k <= 64; k++ {
						out = append(out, malReply(id+k, "guessed")...)
					}
					out = append(out, malReply(id, "real:"+r.msg)...)
					c.Write(out)
					return true
				}))
				_, stub := malChannel(t, s.addr(), "", func(o *channel.Options) { o.ConnectionType = ct })
				for i := range 10 {
					cntl := controller.New()
					msg := strings.Repeat("g", i+1)
					resp, _ := malCall(t, stub, cntl, msg, 500*time.Millisecond+malSlack)
					require.NoError(t, cntl.Err())
					assert.Equal(t, "real:"+msg, resp.GetMessage())
				}
			})
		}
	})

	// A malicious server floods answers for ids around the ones it sees:
	// those ids belong to calls on other connections too (ids are
	// process-wide), which must never take them.
	t.Run("guessed ids of another connection", func(t *testing.T) {
		malLeakCheck(t)
		s := startMalServer(t, malServe(func(_ *malServer, c net.Conn, r *malRequest) bool {
			id := r.meta.CorrelationID
			var out []byte
			for k := int64(-32); k <= 32; k++ {
				if k != 0 {
					out = append(out, malReply(id+k, "hijacked")...)
				}
			}
			out = append(out, malReply(id, "evil")...)
			c.Write(out)
			return true
		}))
		_, evil := malChannel(t, s.addr(), "", nil)
		var wg sync.WaitGroup
		for w := range 2 {
			wg.Go(func() {
				for i := range 60 {
					cntl := controller.New()
					msg := string(rune('a'+w)) + strings.Repeat("x", i)
					stub, want := evil, "evil"
					if w == 1 {
						stub, want = good, msg
					}
					resp, _, ok := malTryCall(t, stub, cntl, msg, 500*time.Millisecond+malSlack)
					if !ok {
						return
					}
					if assert.NoError(t, cntl.Err()) {
						assert.Equal(t, want, resp.GetMessage(), "an answer meant for another connection was taken")
					}
				}
			})
		}
		wg.Wait()
	})
}

// ---------------------------------------------------------------------------
// Broken frames.

// brokenCase is a server that answers every request with reply, then
// does after (which ends the connection) if set, and what the call must
// end with.
type brokenCase struct {
	name  string
	reply func(r *malRequest) []byte
	after func(s *malServer, c net.Conn) // what the server does next; nil: keeps serving (the next request gets the same treatment)
	// What the call ends with: one of codes; retried (all MaxRetry
	// attempts, ending early) or not; timedOut means at the deadline.
	codes    []controller.Errno
	retried  bool
	rejected bool // the client rejects the frame and closes: retrying is its choice
	timedOut bool
	contains string // in the error text
	ok       string // instead of failing, the call succeeds with this message
}

func TestMaliciousBrokenFrames(t *testing.T) {
	good := malGoodStub(t)
	const timeoutMs = 150
	const maxBody = 4 * mib
	closed := func(_ *malServer, c net.Conn) { c.Close() }
	reset := func(_ *malServer, c net.Conn) { malReset(c) }
	broken := []controller.Errno{controller.EEOF, controller.ECONNRESET, controller.EFAILEDSOCKET, controller.EPIPE}
	good0 := func(id int64) []byte { return malReply(id, "fine") }
	cases := []brokenCase{
		{name: "garbage meta", reply: func(r *malRequest) []byte {
			return malRawFrame(bytes.Repeat([]byte{0xff}, 20), malEchoBody("x"))
		}, codes: []controller.Errno{controller.ERPCTIMEDOUT}, timedOut: true},
		{name: "garbage meta then the answer", reply: func(r *malRequest) []byte {
			return append(malRawFrame([]byte{0x0a, 0x7f, 0x01}, nil), good0(r.meta.CorrelationID)...)
		}, ok: "fine"},
		{name: "meta without the request's required fields", reply: func(r *malRequest) []byte {
			return malRawFrame(malMeta(baidustd.Meta{CorrelationID: r.meta.CorrelationID}, []byte{0x0a, 0x00}), malEchoBody("x"))
		}, codes: []controller.Errno{controller.ERPCTIMEDOUT}, timedOut: true},
		{name: "meta_size larger than body_size", reply: func(r *malRequest) []byte {
			return append(malHeader(10, 20), make([]byte, 10)...)
		}, codes: broken, rejected: true},
		{name: "bad magic", reply: func(r *malRequest) []byte {
			return []byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
		}, codes: broken, rejected: true},
		{name: "truncated frame then close", reply: func(r *malRequest) []byte {
			return good0(r.meta.CorrelationID)[:20]
		}, after: closed, codes: broken, retried: true},
		{name: "header only then close", reply: func(r *malRequest) []byte {
			return good0(r.meta.CorrelationID)[:baidustd.HeaderSize]
		}, after: closed, codes: broken, retried: true},
		{name: "half a header then close", reply: func(r *malRequest) []byte { return []byte("PRPC\x00") },
			after: closed, codes: broken, retried: true},
		{name: "reset mid-frame", reply: func(r *malRequest) []byte {
			return good0(r.meta.CorrelationID)[:20]
		}, after: reset, codes: broken, retried: true},
		{name: "body_size 2^32-1 then nothing", reply: func(r *malRequest) []byte {
			return malHeader(math.MaxUint32, 10)
		}, after: (*malServer).holdOpen, codes: broken, rejected: true},
		{name: "body_size just over MaxBodySize then nothing", reply: func(r *malRequest) []byte {
			return malHeader(maxBody+1, 10)
		}, after: (*malServer).holdOpen, codes: broken, rejected: true},
		{name: "body_size MaxBodySize then nothing", reply: func(r *malRequest) []byte {
			return malHeader(maxBody, 10)
		}, after: (*malServer).holdOpen, codes: []controller.Errno{controller.ERPCTIMEDOUT}, timedOut: true},
		{name: "body_size MaxBodySize then a slow trickle", reply: func(r *malRequest) []byte {
			return malHeader(maxBody, 10)
		}, after: func(s *malServer, c net.Conn) {
			for s.sleep(10 * time.Millisecond) {
				if _, err := c.Write([]byte{0}); err != nil {
					return
				}
			}
		}, codes: []controller.Errno{controller.ERPCTIMEDOUT}, timedOut: true},
		{name: "attachment_size larger than the payload", reply: func(r *malRequest) []byte {
			m := baidustd.Meta{HasResponse: true, CorrelationID: r.meta.CorrelationID}
			return malRawFrame(malMeta(m, malInt32Field(5, 1000)), malEchoBody("x"))
		}, codes: []controller.Errno{controller.ERESPONSE}, contains: "attachment_size"},
		{name: "attachment_size negative", reply: func(r *malRequest) []byte {
			m := baidustd.Meta{HasResponse: true, CorrelationID: r.meta.CorrelationID}
			return malRawFrame(malMeta(m, malInt32Field(5, -3)), malEchoBody("x"))
		}, codes: []controller.Errno{controller.ERESPONSE}, contains: "attachment_size"},
		{name: "attachment_size MinInt32", reply: func(r *malRequest) []byte {
			m := baidustd.Meta{HasResponse: true, CorrelationID: r.meta.CorrelationID}
			return malRawFrame(malMeta(m, malInt32Field(5, math.MinInt32)), malEchoBody("x"))
		}, codes: []controller.Errno{controller.ERESPONSE}, contains: "attachment_size"},
		{name: "message that does not parse", reply: func(r *malRequest) []byte {
			m := baidustd.Meta{HasResponse: true, CorrelationID: r.meta.CorrelationID}
			f, _ := baidustd.AppendFrame(nil, &m, []byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f}, nil)
			return f
		}, codes: []controller.Errno{controller.ERESPONSE}, contains: "parse"},
		{name: "unknown compress type", reply: func(r *malRequest) []byte {
			m := baidustd.Meta{HasResponse: true, CorrelationID: r.meta.CorrelationID, CompressType: 9}
			f, _ := baidustd.AppendFrame(nil, &m, malEchoBody("x"), nil)
			return f
		}, codes: []controller.Errno{controller.ERESPONSE}, contains: "compress"},
		{name: "lz4", reply: func(r *malRequest) []byte {
			m := baidustd.Meta{HasResponse: true, CorrelationID: r.meta.CorrelationID, CompressType: baidustd.CompressLZ4}
			f, _ := baidustd.AppendFrame(nil, &m, malEchoBody("x"), nil)
			return f
		}, codes: []controller.Errno{controller.ERESPONSE}, contains: "compress"},
		{name: "corrupt gzip", reply: func(r *malRequest) []byte {
			m := baidustd.Meta{HasResponse: true, CorrelationID: r.meta.CorrelationID, CompressType: baidustd.CompressGzip}
			f, _ := baidustd.AppendFrame(nil, &m, []byte("\x1f\x8b\x08\x00garbage-garbage"), nil)
			return f
		}, codes: []controller.Errno{controller.ERESPONSE}, contains: "decompress"},
		{name: "checksum mismatch", reply: func(r *malRequest) []byte {
			m := baidustd.Meta{HasResponse: true, CorrelationID: r.meta.CorrelationID,
				ChecksumType: baidustd.ChecksumCRC32C, ChecksumValue: []byte{1, 2, 3, 4}}
			f, _ := baidustd.AppendFrame(nil, &m, malEchoBody("x"), nil)
			return f
		}, codes: []controller.Errno{controller.ERESPONSE}, contains: "checksum"},
		// brpc passes checksum types it has no handler for.
		{name: "unknown checksum type", reply: func(r *malRequest) []byte {
			m := baidustd.Meta{HasResponse: true, CorrelationID: r.meta.CorrelationID, ChecksumType: 77}
			f, _ := baidustd.AppendFrame(nil, &m, malEchoBody("x"), nil)
			return f
		}, ok: "x"},
		{name: "error code -1", reply: func(r *malRequest) []byte {
			return malErrorReply(r.meta.CorrelationID, -1, "negative")
		}, codes: []controller.Errno{-1}, contains: "negative"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, ct := range malConnTypes {
				t.Run(ct, func(t *testing.T) {
					malLeakCheck(t)
					s := startMalServer(t, malServe(func(s *malServer, c net.Conn, r *malRequest) bool {
						if _, err := c.Write(tc.reply(r)); err != nil {
							return false
						}
						if tc.after != nil {
							tc.after(s, c)
							return false
						}
						return true
					}))
					_, stub := malChannel(t, s.addr(), "", func(o *channel.Options) {
						o.ConnectionType = ct
						o.TimeoutMs = timeoutMs
						o.MaxBodySize = maxBody
					})
					rounds := 2 // the second call finds what the first left
					if tc.timedOut && ct != "single" {
						rounds = 1 // nothing is left: the connection was closed
					}
					for round := range rounds {
						cntl := controller.New()
						resp, took := malCall(t, stub, cntl, "x", timeoutMs*time.Millisecond+malSlack)
						if tc.ok != "" {
							require.NoError(t, cntl.Err(), "round %d", round)
							assert.Equal(t, tc.ok, resp.GetMessage())
							continue
						}
						require.True(t, cntl.Failed(), "round %d: the call must fail, got %q", round, resp.GetMessage())
						assert.Contains(t, tc.codes, cntl.ErrorCode(), "round %d: %s", round, cntl.ErrorText())
						assert.NotEmpty(t, cntl.ErrorText())
						t.Logf("round %d after %v: %s", round, took, cntl.ErrorText())
						if tc.contains != "" {
							assert.Contains(t, cntl.ErrorText(), tc.contains)
						}
						if tc.retried {
							assert.Equal(t, 3, cntl.RetriedCount(), "round %d: %s", round, cntl.ErrorText())
						}
						if tc.rejected {
							assert.Contains(t, []int{0, 3}, cntl.RetriedCount(), "round %d: %s", round, cntl.ErrorText())
						}
						if !tc.timedOut {
							assert.Less(t, took, timeoutMs*time.Millisecond, "round %d: must fail at once, not at the deadline: %s", round, cntl.ErrorText())
						}
						assert.Less(t, len(cntl.ErrorText()), 4096, "error text: %q", cntl.ErrorText())
						malReuse(t, good, cntl)
					}
				})
			}
		})
	}
}

// A connection the client closes because of what the server sent (a frame
// over MaxBodySize, a bad magic, meta_size > body_size) must say why, not
// "Got EOF": the server did not close it. brpc fails the socket with
// EINVAL "Close <socket>: too big data" (or "due to unknown message") and
// logs the max_body_size advice. (On 48b91fc all three said
// "[E1014]Got EOF of <server>".)
func TestMaliciousClientClosedConnectionSaysWhy(t *testing.T) {
	cases := []struct {
		name  string
		frame []byte
		want  []string // one of these in the error text
	}{
		{"body_size 2^32-1", malHeader(math.MaxUint32, 10), []string{"too big", "max_body_size", "MaxBodySize"}},
		{"bad magic", []byte("HTTP/1.1 200 OK\r\n\r\n"), []string{"unknown message", "magic"}},
		{"meta_size > body_size", append(malHeader(10, 20), make([]byte, 10)...), []string{"meta_size"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			malLeakCheck(t)
			s := startMalServer(t, malServe(func(s *malServer, c net.Conn, r *malRequest) bool {
				c.Write(tc.frame)
				s.holdOpen(c)
				return false
			}))
			_, stub := malChannel(t, s.addr(), "", func(o *channel.Options) { o.MaxRetry = 0 })
			cntl := controller.New()
			malCall(t, stub, cntl, "x", 500*time.Millisecond+malSlack)
			require.True(t, cntl.Failed())
			found := false
			for _, w := range tc.want {
				found = found || strings.Contains(cntl.ErrorText(), w)
			}
			assert.True(t, found, "error text %q says nothing of %v", cntl.ErrorText(), tc.want)
			assert.NotContains(t, cntl.ErrorText(), "EOF", "the server did not close the connection")
		})
	}
}

// A header announcing a body up to MaxBodySize, then nothing or a trickle,
// must cost memory for what arrived, not for what was announced.
func TestMaliciousAnnouncedBodyCostsNoMemory(t *testing.T) {
	malLeakCheck(t)
	const conns = 8
	var headers atomic.Int32
	s := startMalServer(t, malServe(func(s *malServer, c net.Conn, r *malRequest) bool {
		c.Write(malHeader(64*mib, 10)) // the default MaxBodySize
		headers.Add(1)
		for s.sleep(10 * time.Millisecond) {
			if _, err := c.Write([]byte{0}); err != nil {
				break
			}
		}
		return false
	}))
	_, stub := malChannel(t, s.addr(), "", func(o *channel.Options) {
		o.ConnectionType = "pooled" // a connection per call
		o.TimeoutMs = 800
	})
	before := malHeap()
	waits := make([]func(time.Duration) int32, conns)
	cntls := make([]*controller.Controller, conns)
	for i := range conns {
		cntls[i] = controller.New()
		waits[i], _ = malAsync(t, stub, cntls[i], "x", time.Second)
	}
	require.Eventually(t, func() bool { return headers.Load() >= conns }, 5*time.Second, 5*time.Millisecond)
	var peak uint64
	for range 5 { // the headers are in; the trickle goes on
		if h := malHeap(); h > peak {
			peak = h
		}
		time.Sleep(50 * time.Millisecond)
	}
	growth := int64(peak) - int64(before)
	t.Logf("heap growth with %d connections announcing 64 MiB each: %.1f MiB", conns, float64(growth)/mib)
	assert.Less(t, growth, int64(32*mib), "announced bodies must not be allocated up front")
	for i := range conns {
		assert.Equal(t, int32(1), waits[i](800*time.Millisecond+malSlack))
		assert.Equal(t, controller.ERPCTIMEDOUT, cntls[i].ErrorCode(), cntls[i].ErrorText())
	}
}

// ---------------------------------------------------------------------------
// Error texts.

func TestMaliciousHugeErrorText(t *testing.T) {
	good := malGoodStub(t)
	huge := strings.Repeat("E", 10<<20)
	for _, tc := range []struct {
		name    string
		code    controller.Errno
		retries int
	}{
		{"not retried", controller.EINTERNAL, 0},
		{"retried", controller.ELIMIT, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			malLeakCheck(t)
			s := startMalServer(t, malServe(func(_ *malServer, c net.Conn, r *malRequest) bool {
				_, err := c.Write(malErrorReply(r.meta.CorrelationID, int32(tc.code), huge))
				return err == nil
			}))
			_, stub := malChannel(t, s.addr(), "", func(o *channel.Options) { o.TimeoutMs = 3000 })
			cntl := controller.New()
			malCall(t, stub, cntl, "x", 3*time.Second+malSlack)
			assert.Equal(t, tc.code, cntl.ErrorCode())
			assert.Equal(t, tc.retries, cntl.RetriedCount())
			text := cntl.ErrorText()
			t.Logf("ErrorText: %d bytes, starts %q, ends %q", len(text), text[:min(20, len(text))], text[max(0, len(text)-30):])
			assert.True(t, strings.HasPrefix(text, "[E"+strconv.Itoa(int(tc.code))+"]EEEE"), "%.40q", text)
			assert.Less(t, len(text), (tc.retries+1)*(4<<10+100), "a server's text must be clipped")
			assert.Contains(t, text, "more bytes)")
			malReuse(t, good, cntl)
		})
	}
}

// ---------------------------------------------------------------------------
// Decompression bombs.

// malDeflateBomb is a raw deflate stream of at least total zero bytes:
// independent 1 MiB blocks repeated, then a final empty block. Cheap to
// build, about 1000:1.
func malDeflateBomb(total int) []byte {
	var chunk bytes.Buffer
	fw, _ := flate.NewWriter(&chunk, flate.BestCompression)
	fw.Write(make([]byte, mib))
	fw.Flush() // byte-aligned, not final
	var end bytes.Buffer
	fe, _ := flate.NewWriter(&end, flate.BestCompression)
	fe.Close() // a final empty block
	var out []byte
	for n := 0; n < total; n += mib {
		out = append(out, chunk.Bytes()...)
	}
	return append(out, end.Bytes()...)
}

func TestMaliciousDecompressionBomb(t *testing.T) {
	good := malGoodStub(t)
	const maxBody = 1 * mib
	deflate := malDeflateBomb(512 * mib)
	gzipBomb := append([]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff}, deflate...)
	gzipBomb = append(gzipBomb, 0, 0, 0, 0, 0, 0, 0, 0) // crc and size: never reached
	zlibBomb := append([]byte{0x78, 0xda}, deflate...)
	zlibBomb = append(zlibBomb, 0, 0, 0, 0) // adler32: never reached
	snappyHonest, err := baidustd.Compress(nil, baidustd.CompressSnappy, make([]byte, 16*mib))
	require.NoError(t, err)
	snappyLiar := binary.AppendUvarint(nil, 1<<31) // declares 2 GiB
	snappyLiar = append(snappyLiar, bytes.Repeat([]byte{0xfe, 0x01, 0x00}, 1000)...)
	snappyShort := binary.AppendUvarint(nil, maxBody-1) // declares under the limit, has more
	snappyShort = append(snappyShort, 0x00, 0x00)       // literal of 1 byte
	for range 30000 {
		snappyShort = append(snappyShort, 0xfe, 0x01, 0x00) // copy 64 bytes at offset 1
	}
	// A real message just under the limit must still come through.
	fine := strings.Repeat("z", maxBody-64<<10)
	fineZ, err := baidustd.Compress(nil, baidustd.CompressGzip, malEchoBody(fine))
	require.NoError(t, err)

	cases := []struct {
		name     string
		compress int32
		payload  []byte
		ok       bool
	}{
		{"gzip", baidustd.CompressGzip, gzipBomb, false},
		{"zlib", baidustd.CompressZlib, zlibBomb, false},
		{"snappy", baidustd.CompressSnappy, snappyHonest, false},
		{"snappy declaring 2 GiB", baidustd.CompressSnappy, snappyLiar, false},
		{"snappy declaring less than it holds", baidustd.CompressSnappy, snappyShort, false},
		{"gzip under the limit", baidustd.CompressGzip, fineZ, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.Less(t, len(tc.payload), maxBody-1024, "the compressed frame itself must fit")
			malLeakCheck(t)
			frame := func(id int64) []byte {
				m := baidustd.Meta{HasResponse: true, CorrelationID: id, CompressType: tc.compress}
				f, err := baidustd.AppendFrame(nil, &m, tc.payload, nil)
				require.NoError(t, err)
				return f
			}
			s := startMalServer(t, malServe(func(_ *malServer, c net.Conn, r *malRequest) bool {
				_, err := c.Write(frame(r.meta.CorrelationID))
				return err == nil
			}))
			_, stub := malChannel(t, s.addr(), "", func(o *channel.Options) {
				o.MaxBodySize = maxBody
				o.TimeoutMs = 3000
			})
			malHeap()
			before := malTotalAlloc()
			cntl := controller.New()
			resp, took := malCall(t, stub, cntl, "x", 3*time.Second+malSlack)
			allocated := malTotalAlloc() - before
			t.Logf("%s: %d compressed bytes, allocated %.1f MiB during the call, %v: %s",
				tc.name, len(tc.payload), float64(allocated)/mib, took, cntl.ErrorText())
			assert.Less(t, allocated, uint64(48*mib), "a bomb must not allocate far past MaxBodySize")
			if tc.ok {
				require.NoError(t, cntl.Err())
				assert.Equal(t, len(fine), len(resp.GetMessage()))
				return
			}
			assert.Equal(t, controller.ERESPONSE, cntl.ErrorCode(), cntl.ErrorText())
			assert.Contains(t, cntl.ErrorText(), "decompress")
			assert.Empty(t, resp.GetMessage())
			assert.Zero(t, cntl.RetriedCount())
			malReuse(t, good, cntl)
		})
	}
}

// ---------------------------------------------------------------------------
// A server that accepts and never reads.

func malNeverReads(t *testing.T) *malServer {
	return startMalServer(t, (*malServer).holdOpen)
}

func TestMaliciousNeverReads(t *testing.T) {
	good := malGoodStub(t)
	big := make([]byte, 16*mib)

	// The three connection types at once, to keep the wall time down.
	t.Run("sync", func(t *testing.T) {
		malLeakCheck(t)
		var wg sync.WaitGroup
		var cntls []*controller.Controller
		var hung atomic.Bool
		for _, ct := range malConnTypes {
			s := malNeverReads(t)
			_, stub := malChannel(t, s.addr(), "", func(o *channel.Options) { o.ConnectionType = ct })
			cntl := controller.New()
			cntl.SetTimeoutMs(500)
			cntl.RequestAttachment().Write(big)
			cntls = append(cntls, cntl)
			wg.Go(func() {
				_, took, ok := malTryCall(t, stub, cntl, "x", 500*time.Millisecond+malSlack)
				if !ok {
					hung.Store(true)
					return
				}
				t.Logf("%s: returned after %v: %s", ct, took, cntl.ErrorText())
				if cntl.ErrorCode() != controller.ETIMEDOUT { // a starved connect ran into the deadline
					assert.Equal(t, controller.ERPCTIMEDOUT, cntl.ErrorCode(), "%s: %s", ct, cntl.ErrorText())
				}
				assert.GreaterOrEqual(t, took, 450*time.Millisecond)
				assert.Zero(t, cntl.RetriedCount())
			})
		}
		wg.Wait()
		require.False(t, hung.Load())
		for _, cntl := range cntls {
			malReuse(t, good, cntl)
		}
	})

	// The three connection types at once again. The bound is loose:
	// CallMethod copies the 8 MB (slow under -race), but must not wait for
	// the server, which would take the whole deadline.
	t.Run("async", func(t *testing.T) {
		malLeakCheck(t)
		const timeout = 2000 * time.Millisecond
		var waits []func(time.Duration) int32
		var cntls []*controller.Controller
		start := time.Now()
		for _, ct := range malConnTypes {
			s := malNeverReads(t)
			_, stub := malChannel(t, s.addr(), "", func(o *channel.Options) { o.ConnectionType = ct })
			cntl := controller.New()
			cntl.SetTimeoutMs(timeout.Milliseconds())
			cntl.RequestAttachment().Write(big[:8*mib]) // more than the kernel's buffers take
			wait, callTook := malAsync(t, stub, cntl, "x", timeout)
			t.Logf("%s: CallMethod returned after %v", ct, callTook)
			assert.Less(t, callTook, timeout/2, "%s: an asynchronous CallMethod must not wait for the server", ct)
			waits, cntls = append(waits, wait), append(cntls, cntl)
		}
		for i, wait := range waits {
			assert.Equal(t, int32(1), wait(timeout+malSlack))
			assert.Equal(t, controller.ERPCTIMEDOUT, cntls[i].ErrorCode(), cntls[i].ErrorText())
		}
		assert.GreaterOrEqual(t, time.Since(start), timeout-50*time.Millisecond)
		for _, cntl := range cntls {
			malReuse(t, good, cntl)
		}
	})

	// A server that reads 1 KiB every 10 ms: the call ends by its
	// deadline all the same.
	t.Run("reads slowly", func(t *testing.T) {
		for _, ct := range malConnTypes {
			t.Run(ct, func(t *testing.T) {
				malLeakCheck(t)
				s := startMalServer(t, func(s *malServer, c net.Conn) {
					buf := make([]byte, 1024)
					for s.sleep(10 * time.Millisecond) {
						if _, err := c.Read(buf); err != nil {
							return
						}
					}
				})
				_, stub := malChannel(t, s.addr(), "", func(o *channel.Options) { o.ConnectionType = ct })
				cntl := controller.New()
				cntl.SetTimeoutMs(300)
				cntl.RequestAttachment().Write(big[:4*mib])
				_, took := malCall(t, stub, cntl, "x", 300*time.Millisecond+malSlack)
				assert.Equal(t, controller.ERPCTIMEDOUT, cntl.ErrorCode(), cntl.ErrorText())
				assert.GreaterOrEqual(t, took, 250*time.Millisecond)
				malReuse(t, good, cntl)
			})
		}
	})

	// What waits to be written is bounded by socket_max_unwritten_bytes
	// (brpc's flag, 64 MiB by default; 4 MiB here, to keep the test
	// cheap): past it calls fail at once with EOVERCROWDED, and what a
	// connection holds stays near the limit however many calls come.
	t.Run("many calls", func(t *testing.T) {
		require.NoError(t, flag.CommandLine.Set("socket_max_unwritten_bytes", strconv.Itoa(4*mib)))
		t.Cleanup(func() { flag.CommandLine.Set("socket_max_unwritten_bytes", strconv.Itoa(64*mib)) })
		att := big[:mib]
		for _, ct := range malConnTypes {
			t.Run(ct, func(t *testing.T) {
				malLeakCheck(t)
				s := malNeverReads(t)
				ch, stub := malChannel(t, s.addr(), "", func(o *channel.Options) { o.ConnectionType = ct })
				calls := 24 // 24 MiB: the kernel's buffers take about 4, the limit 4
				if ct != "single" {
					calls = 3 // a connection each, closed when the call times out
				}
				before := malHeap()
				seen := map[controller.Errno]int{}
				for i := range calls {
					cntl := controller.New()
					cntl.SetTimeoutMs(50)
					if i == 0 {
						cntl.SetTimeoutMs(500) // time to connect, even on a starved machine
					}
					cntl.RequestAttachment().Write(att)
					_, took := malCall(t, stub, cntl, "x", 500*time.Millisecond+malSlack)
					seen[cntl.ErrorCode()]++
					if cntl.ErrorCode() == controller.EOVERCROWDED {
						assert.Less(t, took, time.Second, "EOVERCROWDED comes at once")
						assert.Contains(t, cntl.ErrorText(), "[E1011]")
					}
				}
				held := int64(malHeap()) - int64(before)
				t.Logf("%s: outcomes %v; heap held by the channel afterwards: %.1f MiB", ct, seen, float64(held)/mib)
				// ETIMEDOUT: the connect, capped by the 50 ms deadline, lost
				// the race with the deadline's timer.
				assert.Equal(t, calls, seen[controller.EOVERCROWDED]+seen[controller.ERPCTIMEDOUT]+seen[controller.ETIMEDOUT], "%v", seen)
				if ct == "single" {
					assert.Positive(t, seen[controller.EOVERCROWDED], "%v", seen)
				}
				assert.Less(t, held, int64(10*mib), "queued bytes must stay near socket_max_unwritten_bytes")
				require.NoError(t, ch.Close())
				var after int64
				require.Eventually(t, func() bool {
					after = int64(malHeap()) - int64(before)
					return after < 4*mib
				}, 5*time.Second, 50*time.Millisecond, "Close must free what was queued")
				t.Logf("%s: heap after Close: %.1f MiB", ct, float64(after)/mib)
			})
		}
	})

	// With the default limit (64 MiB) the same holds.
	t.Run("many calls, default limit", func(t *testing.T) {
		malLeakCheck(t)
		s := malNeverReads(t)
		ch, stub := malChannel(t, s.addr(), "", nil)
		before := malHeap()
		seen := map[controller.Errno]int{}
		for i := range 6 { // 96 MiB
			cntl := controller.New()
			// Long enough to copy 16 MiB into the queue on a starved
			// machine (that takes up to 80 ms here): a call is to fail by
			// EOVERCROWDED, not by a deadline that passed while queueing.
			// The first also connects: a call whose deadline passes while
			// it connects writes nothing, and the others must still fill
			// the limit (so one more call than 64 MiB needs).
			cntl.SetTimeoutMs(300)
			if i == 0 {
				cntl.SetTimeoutMs(1000)
			}
			cntl.RequestAttachment().Write(big)
			malCall(t, stub, cntl, "x", time.Second+malSlack)
			seen[cntl.ErrorCode()]++
		}
		held := int64(malHeap()) - int64(before)
		t.Logf("outcomes %v; heap held by the channel afterwards: %.1f MiB", seen, float64(held)/mib)
		assert.Positive(t, seen[controller.EOVERCROWDED], "%v", seen)
		assert.Less(t, held, int64(88*mib))
		require.NoError(t, ch.Close())
		require.Eventually(t, func() bool { return int64(malHeap())-int64(before) < 8*mib }, 5*time.Second, 50*time.Millisecond)
	})

	t.Run("close with calls pending", func(t *testing.T) {
		for _, ct := range malConnTypes {
			t.Run(ct, func(t *testing.T) {
				malLeakCheck(t)
				s := malNeverReads(t)
				ch, stub := malChannel(t, s.addr(), "", func(o *channel.Options) { o.ConnectionType = ct })
				att := make([]byte, 4*mib)
				var waits []func(time.Duration) int32
				var cntls []*controller.Controller
				for range 4 {
					cntl := controller.New()
					cntl.SetTimeoutMs(20000)
					cntl.RequestAttachment().Write(att)
					w, _ := malAsync(t, stub, cntl, "x", time.Second)
					waits, cntls = append(waits, w), append(cntls, cntl)
				}
				require.Eventually(t, func() bool { return s.accepts.Load() >= 1 }, 5*time.Second, 5*time.Millisecond)
				start := time.Now()
				require.NoError(t, ch.Close())
				for i, w := range waits {
					assert.Equal(t, int32(1), w(5*time.Second), "Close must end pending calls, not their 20 s deadline")
					assert.True(t, cntls[i].Failed())
					assert.NotEqual(t, controller.ERPCTIMEDOUT, cntls[i].ErrorCode(), cntls[i].ErrorText())
				}
				assert.Less(t, time.Since(start), 5*time.Second)
				malReuse(t, good, cntls[0])
			})
		}
	})
}

// ---------------------------------------------------------------------------
// A server that answers one byte every 10 ms.

func TestMaliciousSlowAnswer(t *testing.T) {
	good := malGoodStub(t)
	trickle := func(s *malServer, c net.Conn, r *malRequest) bool {
		for _, b := range malReply(r.meta.CorrelationID, "slow:"+r.msg) {
			if !s.sleep(10 * time.Millisecond) {
				return false
			}
			if _, err := c.Write([]byte{b}); err != nil {
				return false
			}
		}
		return true
	}
	for _, ct := range malConnTypes {
		t.Run(ct, func(t *testing.T) {
			malLeakCheck(t)
			s := startMalServer(t, malServe(trickle))
			_, stub := malChannel(t, s.addr(), "", func(o *channel.Options) { o.ConnectionType = ct })

			// Past the deadline: timed out by then.
			cntl := controller.New()
			cntl.SetTimeoutMs(100)
			_, took := malCall(t, stub, cntl, "a", 100*time.Millisecond+malSlack)
			assert.Equal(t, controller.ERPCTIMEDOUT, cntl.ErrorCode(), cntl.ErrorText())
			assert.GreaterOrEqual(t, took, 90*time.Millisecond)
			malReuse(t, good, cntl)

			// Within it: the answer is put together right.
			cntl = controller.New()
			cntl.SetTimeoutMs(10000)
			resp, _ := malCall(t, stub, cntl, "b", 10*time.Second+malSlack)
			require.NoError(t, cntl.Err())
			assert.Equal(t, "slow:b", resp.GetMessage())
		})
	}
}

// ---------------------------------------------------------------------------
// Servers that close or reset connections.

func TestMaliciousClosingServers(t *testing.T) {
	good := malGoodStub(t)
	broken := []controller.Errno{controller.EEOF, controller.ECONNRESET, controller.EFAILEDSOCKET, controller.EPIPE}
	cases := []struct {
		name   string
		handle func(s *malServer, c net.Conn)
	}{
		{"close after accept", func(_ *malServer, c net.Conn) { c.Close() }}, // see also TestMaliciousCloseAfterAcceptIsNoticed
		{"reset after accept", func(_ *malServer, c net.Conn) { malReset(c) }},
		{"close after the request", malServe(func(_ *malServer, c net.Conn, _ *malRequest) bool { c.Close(); return false })},
		{"reset after the request", malServe(func(_ *malServer, c net.Conn, _ *malRequest) bool { malReset(c); return false })},
		{"half-close after the request", malServe(func(_ *malServer, c net.Conn, _ *malRequest) bool {
			c.(*net.TCPConn).CloseWrite()
			return true // and keeps reading
		})},
		{"reset after half the request", func(_ *malServer, c net.Conn) {
			io.ReadFull(c, make([]byte, 64<<10))
			malReset(c)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, ct := range malConnTypes {
				for _, async := range []bool{false, true} {
					name := ct
					if async {
						name += "/async"
					}
					t.Run(name, func(t *testing.T) {
						malLeakCheck(t)
						s := startMalServer(t, tc.handle)
						_, stub := malChannel(t, s.addr(), "", func(o *channel.Options) {
							o.ConnectionType = ct
							o.TimeoutMs = 2000
						})
						cntl := controller.New()
						cntl.RequestAttachment().Write(make([]byte, 256<<10))
						var took time.Duration
						if async {
							start := time.Now()
							wait, _ := malAsync(t, stub, cntl, "x", time.Second)
							assert.Equal(t, int32(1), wait(2*time.Second+malSlack))
							took = time.Since(start)
						} else {
							_, took = malCall(t, stub, cntl, "x", 2*time.Second+malSlack)
						}
						assert.Contains(t, broken, cntl.ErrorCode(), cntl.ErrorText())
						assert.Equal(t, 3, cntl.RetriedCount(), cntl.ErrorText())
						assert.Less(t, took, 2*time.Second, "a broken connection must fail the attempt at once: %s", cntl.ErrorText())
						assert.GreaterOrEqual(t, s.accepts.Load(), int32(4), "every attempt reconnects")
						malReuse(t, good, cntl)
					})
				}
			}
		})
	}

	// The answer and the FIN arrive together: the answer must not be lost
	// to the EOF.
	t.Run("answer then close", func(t *testing.T) {
		for _, ct := range malConnTypes {
			t.Run(ct, func(t *testing.T) {
				malLeakCheck(t)
				s := startMalServer(t, malServe(func(_ *malServer, c net.Conn, r *malRequest) bool {
					c.Write(malReply(r.meta.CorrelationID, "bye:"+r.msg))
					return false // closes
				}))
				_, stub := malChannel(t, s.addr(), "", func(o *channel.Options) {
					o.ConnectionType = ct
					o.TimeoutMs = 2000
				})
				for i := range 20 {
					cntl := controller.New()
					msg := strings.Repeat("b", i+1)
					resp, _ := malCall(t, stub, cntl, msg, 2*time.Second+malSlack)
					require.NoError(t, cntl.Err())
					assert.Equal(t, "bye:"+msg, resp.GetMessage())
				}
			})
		}
	})

	t.Run("cluster", func(t *testing.T) {
		for _, ct := range malConnTypes {
			t.Run(ct, func(t *testing.T) {
				malLeakCheck(t)
				a := startMalServer(t, malServe(func(_ *malServer, c net.Conn, _ *malRequest) bool { c.Close(); return false }))
				b := startMalServer(t, func(_ *malServer, c net.Conn) { malReset(c) })
				_, stub := malChannel(t, "list://"+a.addr()+","+b.addr(), "rr", func(o *channel.Options) {
					o.ConnectionType = ct
					o.TimeoutMs = 2000
				})
				cntl := controller.New()
				_, took := malCall(t, stub, cntl, "x", 2*time.Second+malSlack)
				require.True(t, cntl.Failed())
				t.Logf("%v: %s", took, cntl.ErrorText())
				assert.Equal(t, 3, cntl.RetriedCount(), cntl.ErrorText())
				assert.Less(t, took, 2*time.Second)
				assert.Positive(t, a.accepts.Load())
				assert.Positive(t, b.accepts.Load())
				malReuse(t, good, cntl)
			})
		}
	})

	// One bad server in a cluster: retries go to the good one.
	t.Run("cluster with a good server", func(t *testing.T) {
		for _, ct := range malConnTypes {
			t.Run(ct, func(t *testing.T) {
				malLeakCheck(t)
				bad := startMalServer(t, malServe(func(_ *malServer, c net.Conn, _ *malRequest) bool { malReset(c); return false }))
				goodSrv, _ := echotest.StartServer(t, nil)
				_, stub := malChannel(t, "list://"+bad.addr()+","+goodSrv.ListenAddress().String(), "rr", func(o *channel.Options) {
					o.ConnectionType = ct
					o.TimeoutMs = 2000
				})
				for i := range 10 {
					cntl := controller.New()
					msg := strings.Repeat("c", i+1)
					resp, _ := malCall(t, stub, cntl, msg, 2*time.Second+malSlack)
					require.NoError(t, cntl.Err())
					assert.Equal(t, msg, resp.GetMessage())
				}
			})
		}
	})
}

// A server that closes every connection right after accepting it: each
// call must see the connection end and fail at once (EEOF, ECONNRESET,
// EPIPE ...), not wait for its deadline. (On 48b91fc about 1 call in 5
// waited: the socket was registered with netpoll's poller before its
// OnRequest was set, and a hang-up seen in between ran no close callback.)
func TestMaliciousCloseAfterAcceptIsNoticed(t *testing.T) {
	malLeakCheck(t)
	s := startMalServer(t, func(_ *malServer, c net.Conn) { c.Close() })
	_, stub := malChannel(t, s.addr(), "", func(o *channel.Options) {
		o.ConnectionType = "short" // a new connection every call
		o.MaxRetry = 0
		o.TimeoutMs = 300
	})
	const calls = 40
	timedOut := 0
	for range calls {
		cntl := controller.New()
		malCall(t, stub, cntl, "x", 300*time.Millisecond+malSlack)
		require.True(t, cntl.Failed())
		if cntl.ErrorCode() == controller.ERPCTIMEDOUT {
			timedOut++
		}
	}
	assert.Zero(t, timedOut, "%d of %d calls to a server that closes at once waited for their deadline", timedOut, calls)
}

// An asynchronous CallMethod must not wait for a server: not for it to
// read (TestMaliciousNeverReads), nor for it to accept. Here the server's
// accept queue is full, so the connect hangs. (On 48b91fc the first
// attempt dialed on the caller's goroutine: CallMethod returned after the
// connect timeout, or the whole deadline with ConnectTimeoutMs -1.)
func TestMaliciousAsyncCallDoesNotWaitForConnect(t *testing.T) {
	malLeakCheck(t)
	addr := fullBacklogListener(t)
	_, stub := malChannel(t, addr, "", func(o *channel.Options) {
		o.ConnectTimeoutMs = -1 // bounded by the RPC's deadline
		o.TimeoutMs = 1000
		o.MaxRetry = 0
	})
	cntl := controller.New()
	start := time.Now()
	wait, callTook := malAsync(t, stub, cntl, "x", time.Second)
	t.Logf("CallMethod returned after %v", callTook)
	assert.Less(t, callTook, 250*time.Millisecond, "an asynchronous CallMethod must return at once")
	assert.Equal(t, int32(1), wait(time.Second+malSlack))
	t.Logf("done after %v: %s", time.Since(start), cntl.ErrorText())
	assert.True(t, cntl.Failed())
}
