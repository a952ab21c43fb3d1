package channel_test

// attack17: Controllers reset and reused inside done for the next h2:grpc
// call, with retries, backups and StartCancel racing.

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/gobrpc/gobrpc/channel"
	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/testsupport/testpb"
)

func a17Channel(t *testing.T, target, lb, ct string, mutate func(*channel.Options)) *channel.Channel {
	t.Helper()
	opts := channel.DefaultOptions()
	opts.Protocol = "h2:grpc"
	opts.ConnectionType = ct
	opts.TimeoutMs = 3000
	if mutate != nil {
		mutate(&opts)
	}
	ch, err := channel.New(target, lb, &opts)
	require.NoError(t, err)
	return ch
}

func TestAtk17GRPCControllerReuseInDone(t *testing.T) {
	delay := func(n int64) time.Duration {
		if n%3 == 0 {
			return 4 * time.Millisecond
		}
		return 0
	}
	fail := func(n int64) controller.Errno {
		if n%11 == 5 {
			return controller.ELOGOFF // UNAVAILABLE: retried
		}
		return 0
	}
	_, addrs := raStartServers(t, 3, delay, fail)
	for _, ct := range []string{"single", "pooled", "short"} {
		t.Run(ct, func(t *testing.T) {
			ch := a17Channel(t, "list://"+strings.Join(addrs, ","), "rr", ct, func(o *channel.Options) {
				o.BackupRequestMs = 2
				o.MaxRetry = 3
			})
			defer ch.Close()
			stub := testpb.NewEchoServiceStub(ch)
			const goroutines, perG = 16, 40
			if ct == "short" {
				// fewer: a connection per call
			}
			var wg sync.WaitGroup
			var bad atomic.Int64
			var mu sync.Mutex
			var firstBad []string
			for g := range goroutines {
				wg.Add(1)
				cntl := controller.New()
				resp := &testpb.EchoResponse{}
				req := &testpb.EchoRequest{}
				var i int
				var next func()
				next = func() {
					msg := fmt.Sprintf("g%d-%d", g, i)
					req.Message = proto.String(msg)
					cntl.RequestUserFields()["x-call"] = msg
					if i%5 == 4 {
						cntl.SetTimeoutMs(1) // some time out
					}
					stub.Echo(cntl, req, resp, func() {
						if !cntl.Failed() && resp.GetMessage() != msg {
							bad.Add(1)
							mu.Lock()
							if len(firstBad) < 5 {
								firstBad = append(firstBad, fmt.Sprintf("sent %q got %q", msg, resp.GetMessage()))
							}
							mu.Unlock()
						}
						if cntl.Failed() && cntl.ErrorCode() != controller.ERPCTIMEDOUT {
							mu.Lock()
							if len(firstBad) < 5 {
								firstBad = append(firstBad, fmt.Sprintf("%s failed: %s", msg, cntl.ErrorText()))
							}
							mu.Unlock()
						}
						i++
						if i == perG {
							wg.Done()
							return
						}
						cntl.Reset()
						resp.Reset()
						next()
					})
				}
				next()
			}
			waited := make(chan struct{})
			go func() { wg.Wait(); close(waited) }()
			select {
			case <-waited:
			case <-time.After(30 * time.Second):
				t.Fatal("chained calls hung")
			}
			assert.Zero(t, bad.Load(), "%v", firstBad)
			t.Logf("%s: notes %v", ct, firstBad)
		})
	}
}

// StartCancel racing calls that are starting, retrying, backing up and
// ending; then Reset and reuse.
func TestAtk17GRPCStartCancelRaces(t *testing.T) {
	delay := func(n int64) time.Duration { return time.Duration(n%4) * time.Millisecond }
	_, addrs := raStartServers(t, 2, delay, nil)
	for _, ct := range []string{"single", "pooled", "short"} {
		t.Run(ct, func(t *testing.T) {
			ch := a17Channel(t, "list://"+strings.Join(addrs, ","), "rr", ct, func(o *channel.Options) {
				o.BackupRequestMs = 1
				// Under -race on 2 cores this test's goroutines delay
				// loopback connects of short connections by 50-200 ms (none
				// without -race): a 200 ms connect timeout would take the
				// servers out of selection, which is not what is tested.
				o.ConnectTimeoutMs = 3000
			})
			defer ch.Close()
			stub := testpb.NewEchoServiceStub(ch)
			var wg sync.WaitGroup
			for g := range 12 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					cntl := controller.New()
					for i := range 60 {
						msg := fmt.Sprintf("c%d-%d", g, i)
						resp := &testpb.EchoResponse{}
						ended := make(chan struct{})
						stub.Echo(cntl, &testpb.EchoRequest{Message: proto.String(msg)}, resp, func() { close(ended) })
						var cw sync.WaitGroup
						for range 3 {
							cw.Add(1)
							go func() {
								defer cw.Done()
								time.Sleep(time.Duration(i%3) * time.Millisecond)
								cntl.StartCancel()
							}()
						}
						select {
						case <-ended:
						case <-time.After(5 * time.Second):
							t.Errorf("call %s did not end after StartCancel", msg)
							return
						}
						cntl.Join()
						cw.Wait()
						if !cntl.Failed() && resp.GetMessage() != msg {
							t.Errorf("sent %q got %q", msg, resp.GetMessage())
						}
						if cntl.Failed() && cntl.ErrorCode() != controller.ECANCELED {
							t.Errorf("%s: %s", msg, cntl.ErrorText())
						}
						cntl.Reset()
					}
				}()
			}
			wg.Wait()
		})
	}
}

// A caller's own tiny timeout cutting a connect must not take a healthy
// server out of selection for every other caller.
func TestAtk17GRPCTinyTimeoutMarksServerFailed(t *testing.T) {
	_, addrs := raStartServers(t, 3, nil, nil)
	for _, proto_ := range []string{"h2:grpc", "baidu_std"} {
		for _, ct := range []string{"short", "pooled"} {
			t.Run(proto_+"/"+ct, func(t *testing.T) {
				ch := a17Channel(t, "list://"+strings.Join(addrs, ","), "rr", ct, func(o *channel.Options) { o.Protocol = proto_ })
				defer ch.Close()
				stub := testpb.NewEchoServiceStub(ch)
				codes := map[string]int{}
				var mu sync.Mutex
				var wg sync.WaitGroup
				for range 16 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range 10 {
							cntl := controller.New()
							cntl.SetTimeoutMs(1)
							stub.Echo(cntl, &testpb.EchoRequest{Message: proto.String("x")}, &testpb.EchoResponse{}, nil)
							mu.Lock()
							if codes[cntl.ErrorCode().Name()] == 0 && cntl.Failed() {
								t.Logf("first %s: %s", cntl.ErrorCode().Name(), cntl.ErrorText())
							}
							codes[cntl.ErrorCode().Name()]++
							mu.Unlock()
						}
					}()
				}
				wg.Wait()
				t.Logf("1 ms calls: %v", codes)
				assert.Zero(t, codes["ETIMEDOUT"], "calls cut by their own 1 ms deadline reported as connect failures (ETIMEDOUT), not ERPCTIMEDOUT")
				for i := range 6 {
					cntl := controller.New()
					cntl.SetTimeoutMs(2000)
					resp := &testpb.EchoResponse{}
					stub.Echo(cntl, &testpb.EchoRequest{Message: proto.String("after")}, resp, nil)
					assert.False(t, cntl.Failed(), "normal call %d after some 1 ms calls: %s", i, cntl.ErrorText())
				}
			})
		}
	}
}
