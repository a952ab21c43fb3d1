package grpcgo

// attack17: a gobrpc h2:grpc channel against hostile servers.

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"golang.org/x/net/http2"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/gobrpc/gobrpc/channel"
	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/testsupport/testpb"
)

// startHostileHTTP serves h with net/http's h2c.
func startHostileHTTP(t testing.TB, h http.HandlerFunc) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: h, Protocols: &p}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close(); <-done })
	return ln.Addr().String()
}

func respFrame(msg string) []byte {
	b, _ := proto.Marshal(&testpb.EchoResponse{Message: proto.String(msg)})
	return grpcFrame(false, b)
}

// hostileBehaviours are handlers that misbehave in one way each.
var hostileBehaviours = map[string]http.HandlerFunc{
	"never-answer": func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() },
	"headers-then-stall": func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/grpc")
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	},
	"half-message-then-stall": func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/grpc")
		w.WriteHeader(200)
		w.Write(respFrame("partial-message-here")[:8])
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	},
	"message-then-stall": func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/grpc")
		w.WriteHeader(200)
		w.Write(respFrame("x"))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	},
	"4GB-prefix": func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/grpc")
		w.WriteHeader(200)
		w.Write([]byte{0, 0xff, 0xff, 0xff, 0xff, 1, 2, 3})
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	},
	"trailers-no-status": func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Trailer", "X-Other")
		w.WriteHeader(200)
		w.Write(respFrame("x"))
		w.Header().Set("X-Other", "1")
	},
	"non-numeric-status": func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/grpc")
		w.WriteHeader(200)
		w.Write(respFrame("x"))
		w.Header().Set(http.TrailerPrefix+"Grpc-Status", "zero")
	},
	"negative-status": func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Grpc-Status", "-1")
		w.WriteHeader(200)
	},
	"status-0-in-headers-no-message": func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Grpc-Status", "0")
		w.WriteHeader(200)
	},
	"status-0-trailers-no-message": func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/grpc")
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		w.Header().Set(http.TrailerPrefix+"Grpc-Status", "0")
	},
	"status-0-in-headers-plus-message": func(w http.ResponseWriter, r *http.Request) {
		// grpc-status in the headers, then a message anyway.
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Grpc-Status", "0")
		w.WriteHeader(200)
		w.Write(respFrame("smuggled"))
	},
	"two-messages": func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/grpc")
		w.WriteHeader(200)
		w.Write(respFrame("one"))
		w.Write(respFrame("two"))
		w.Header().Set(http.TrailerPrefix+"Grpc-Status", "0")
	},
	"gzip-bomb": func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Grpc-Encoding", "gzip")
		w.WriteHeader(200)
		b, _ := proto.Marshal(&testpb.EchoResponse{Message: proto.String(strings.Repeat("a", 200<<10))})
		w.Write(grpcFrame(true, gz(b)))
		w.Header().Set(http.TrailerPrefix+"Grpc-Status", "0")
	},
	"compressed-no-encoding": func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/grpc")
		w.WriteHeader(200)
		b, _ := proto.Marshal(&testpb.EchoResponse{Message: proto.String("z")})
		w.Write(grpcFrame(true, gz(b)))
		w.Header().Set(http.TrailerPrefix+"Grpc-Status", "0")
	},
	"rst-stream": func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/grpc")
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	},
	"rst-after-message": func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/grpc")
		w.WriteHeader(200)
		w.Write(respFrame("x"))
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	},
	"html": func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(200)
		w.Write([]byte("<html>"))
	},
	"huge-grpc-message": func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Grpc-Status", "13")
		w.Header().Set("Grpc-Message", strings.Repeat("%FF", 200000))
		w.WriteHeader(200)
	},
	"status-4294967295": func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Grpc-Status", "4294967295")
		w.WriteHeader(200)
	},
}

type outcome struct {
	code    controller.Errno
	text    string
	resp    string
	elapsed time.Duration
}

func hostileCall(ch *channel.Channel, timeoutMs int64, async bool) outcome {
	cntl := controller.New()
	cntl.SetTimeoutMs(timeoutMs)
	resp := &testpb.EchoResponse{}
	start := time.Now()
	stub := testpb.NewEchoServiceStub(ch)
	if async {
		done := make(chan struct{})
		stub.Echo(cntl, &testpb.EchoRequest{Message: proto.String("hi")}, resp, func() { close(done) })
		<-done
	} else {
		stub.Echo(cntl, &testpb.EchoRequest{Message: proto.String("hi")}, resp, nil)
	}
	return outcome{cntl.ErrorCode(), cntl.ErrorText(), resp.GetMessage(), time.Since(start)}
}

func TestAtk17CliHostileServers(t *testing.T) {
	const timeoutMs = 300
	names := []string{}
	for n := range hostileBehaviours {
		names = append(names, n)
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			addr := startHostileHTTP(t, hostileBehaviours[name])
			for _, ct := range []string{"single", "pooled", "short"} {
				for _, backup := range []int32{0, 50} {
					for _, async := range []bool{false, true} {
						opts := channel.DefaultOptions()
						opts.Protocol = "h2:grpc"
						opts.ConnectionType = ct
						opts.MaxBodySize = 1024
						opts.MaxRetry = 2
						opts.BackupRequestMs = backup
						ch, err := channel.New(addr, "", &opts)
						require.NoError(t, err)
						o := hostileCall(ch, timeoutMs, async)
						ch.Close()
						label := fmt.Sprintf("%s/%s/backup=%d/async=%v", name, ct, backup, async)
						if ct == "single" && backup == 0 && !async {
							t.Logf("%s: %s (%v) resp=%q %q", label, o.code.Name(), o.elapsed.Round(time.Millisecond), o.resp, clipS(o.text, 200))
						}
						assert.Less(t, o.elapsed, timeoutMs*time.Millisecond+time.Second, "%s: the caller waited past its deadline", label)
						assert.NotEqual(t, controller.Errno(0), o.code, "%s: a hostile answer was taken as success: resp=%q", label, o.resp)
					}
				}
			}
		})
	}
}

// A proto3 response type: an OK status with no message is taken as an
// empty success.
func TestAtk17CliStatusOKWithoutMessageProto3(t *testing.T) {
	for _, name := range []string{"status-0-in-headers-no-message", "status-0-trailers-no-message"} {
		t.Run(name, func(t *testing.T) {
			addr := startHostileHTTP(t, hostileBehaviours[name])
			opts := channel.DefaultOptions()
			opts.Protocol = "h2:grpc"
			opts.TimeoutMs = 1000
			ch, err := channel.New(addr, "", &opts)
			require.NoError(t, err)
			defer ch.Close()
			md := testpb.File_testsupport_testpb_echo_proto.Services().ByName("EchoService").Methods().ByName("Echo")
			cntl := controller.New()
			resp := &wrapperspb.StringValue{Value: "untouched"}
			ch.CallMethod(md, cntl, wrapperspb.String("hi"), resp, nil)
			t.Logf("%s: failed=%v %s resp=%q", name, cntl.Failed(), cntl.ErrorText(), resp.GetValue())
			assert.True(t, cntl.Failed(), "%s: grpc-status 0 without a response message must fail (grpc-go: cardinality violation), got success with an empty response", name)
		})
	}
}

// Raw servers: GOAWAY and TCP close mid-call.
func TestAtk17CliGoAwayAndCloseMidCall(t *testing.T) {
	behaviours := map[string]func(s *rawSrvConn){
		"goaway-0-then-close": func(s *rawSrvConn) {
			s.nextRequest()
			s.fr.WriteGoAway(0, http2.ErrCodeNo, nil)
			time.Sleep(50 * time.Millisecond)
		},
		"goaway-processed-then-stall": func(s *rawSrvConn) {
			id, _, err := s.nextRequest()
			if err != nil {
				return
			}
			s.fr.WriteGoAway(id, http2.ErrCodeNo, nil)
			s.drain()
		},
		"close-after-request": func(s *rawSrvConn) {
			s.nextRequest()
			time.Sleep(20 * time.Millisecond)
		},
		"close-after-headers": func(s *rawSrvConn) {
			id, _, err := s.nextRequest()
			if err != nil {
				return
			}
			s.headers(id, false, ":status", "200", "content-type", "application/grpc")
			time.Sleep(20 * time.Millisecond)
		},
		"close-after-message": func(s *rawSrvConn) {
			id, _, err := s.nextRequest()
			if err != nil {
				return
			}
			s.headers(id, false, ":status", "200", "content-type", "application/grpc")
			s.fr.WriteData(id, false, respFrame("x"))
			time.Sleep(20 * time.Millisecond)
		},
		"fin-after-message": func(s *rawSrvConn) {
			id, _, err := s.nextRequest()
			if err != nil {
				return
			}
			s.headers(id, false, ":status", "200", "content-type", "application/grpc")
			s.fr.WriteData(id, false, respFrame("x"))
			s.c.(*net.TCPConn).CloseWrite() // a clean FIN, as a server closing its side
			s.drain()
		},
		"rst-after-message": func(s *rawSrvConn) {
			id, _, err := s.nextRequest()
			if err != nil {
				return
			}
			s.headers(id, false, ":status", "200", "content-type", "application/grpc")
			s.fr.WriteData(id, false, respFrame("x"))
			s.fr.WriteRSTStream(id, http2.ErrCodeInternal)
			s.drain()
		},
		"message-end-stream-no-trailers": func(s *rawSrvConn) {
			id, _, err := s.nextRequest()
			if err != nil {
				return
			}
			s.headers(id, false, ":status", "200", "content-type", "application/grpc")
			s.fr.WriteData(id, true, respFrame("x"))
			s.drain()
		},
		"never-settings-ack-no-answer": func(s *rawSrvConn) { s.drain() },
		"4GB-frame-then-silence": func(s *rawSrvConn) {
			id, _, err := s.nextRequest()
			if err != nil {
				return
			}
			s.headers(id, false, ":status", "200", "content-type", "application/grpc")
			b := make([]byte, 5)
			binary.BigEndian.PutUint32(b[1:], 0xffffffff)
			s.fr.WriteData(id, false, b)
			s.drain()
		},
	}
	for name, fn := range behaviours {
		t.Run(name, func(t *testing.T) {
			addr := startRawServer(t, fn)
			for _, ct := range []string{"single", "pooled", "short"} {
				for _, async := range []bool{false, true} {
					opts := channel.DefaultOptions()
					opts.Protocol = "h2:grpc"
					opts.ConnectionType = ct
					opts.MaxRetry = 1
					ch, err := channel.New(addr, "", &opts)
					require.NoError(t, err)
					o := hostileCall(ch, 500, async)
					ch.Close()
					if !async {
						t.Logf("%s/%s: %s (%v) %q", name, ct, o.code.Name(), o.elapsed.Round(time.Millisecond), clipS(o.text, 200))
					}
					assert.Less(t, o.elapsed, 1500*time.Millisecond, "%s/%s: past deadline", name, ct)
					assert.NotEqual(t, controller.Errno(0), o.code)
					switch name {
					case "close-after-message", "fin-after-message":
						assert.NotEqual(t, controller.ERESPONSE, o.code, "%s/%s: a broken connection/stream is reported as a bad response (not retried): %s", name, ct, o.text)
					}
				}
			}
		})
	}
}

// Channel.Close while calls are in flight on a server that never answers.
func TestAtk17CliCloseWhileInFlight(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	addr := startHostileHTTP(t, hostileBehaviours["never-answer"])
	for _, ct := range []string{"single", "pooled", "short"} {
		for _, backup := range []int32{0, 20} {
			opts := channel.DefaultOptions()
			opts.Protocol = "h2:grpc"
			opts.ConnectionType = ct
			opts.BackupRequestMs = backup
			opts.TimeoutMs = 10000
			ch, err := channel.New(addr, "", &opts)
			require.NoError(t, err)
			stub := testpb.NewEchoServiceStub(ch)
			const n = 20
			var wg sync.WaitGroup
			var failed atomic.Int32
			for i := range n {
				wg.Add(1)
				if i%2 == 0 {
					go func() {
						defer wg.Done()
						cntl := controller.New()
						stub.Echo(cntl, &testpb.EchoRequest{Message: proto.String("x")}, &testpb.EchoResponse{}, nil)
						if cntl.Failed() {
							failed.Add(1)
						}
					}()
				} else {
					cntl := controller.New()
					stub.Echo(cntl, &testpb.EchoRequest{Message: proto.String("x")}, &testpb.EchoResponse{}, func() {
						if cntl.Failed() {
							failed.Add(1)
						}
						wg.Done()
					})
				}
			}
			time.Sleep(150 * time.Millisecond)
			start := time.Now()
			ch.Close()
			ended := make(chan struct{})
			go func() { wg.Wait(); close(ended) }()
			select {
			case <-ended:
			case <-time.After(3 * time.Second):
				t.Fatalf("%s/backup=%d: calls in flight did not end after Close", ct, backup)
			}
			t.Logf("%s/backup=%d: %d calls ended %v after Close", ct, backup, failed.Load(), time.Since(start))
			assert.Equal(t, int32(n), failed.Load())
			// And a call after Close.
			o := hostileCall(ch, 200, false)
			assert.NotEqual(t, controller.Errno(0), o.code)
		}
	}
}

// ctx-first client, ctx cancel on hostile server.
func TestAtk17CliContextCancelHostile(t *testing.T) {
	addr := startHostileHTTP(t, hostileBehaviours["headers-then-stall"])
	opts := channel.DefaultOptions()
	opts.Protocol = "h2:grpc"
	opts.TimeoutMs = -1
	ch, err := channel.New(addr, "", &opts)
	require.NoError(t, err)
	defer ch.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = testpb.NewEchoServiceClient(ch).Echo(ctx, &testpb.EchoRequest{Message: proto.String("x")})
	t.Logf("ctx deadline: %v after %v", err, time.Since(start))
	assert.Error(t, err)
	assert.Less(t, time.Since(start), 2*time.Second)

	// No timeout at all, StartCancel from another goroutine.
	cntl := controller.New()
	cntl.SetTimeoutMs(-1)
	go func() { time.Sleep(100 * time.Millisecond); cntl.StartCancel() }()
	start = time.Now()
	testpb.NewEchoServiceStub(ch).Echo(cntl, &testpb.EchoRequest{Message: proto.String("x")}, &testpb.EchoResponse{}, nil)
	t.Logf("StartCancel: %s after %v", cntl.ErrorText(), time.Since(start))
	assert.Equal(t, controller.ECANCELED, cntl.ErrorCode())
	assert.Less(t, time.Since(start), 2*time.Second)
}
