// Command ctxclient is the echo client in Go's shape: a context-first
// generated client, (response, error) results, per-call options and an
// interceptor that logs every call. It talks to the same server as
// ./example/echo/client (brpc's echo_c++ server works too).
//
//	go run ./example/echo/server -port 8000 &
//	go run ./example/echo/ctxclient -server 127.0.0.1:8000 -count 3
package main

import (
	"context"
	"errors"
	"flag"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/gobrpc/gobrpc/channel"
	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/example/echo/echopb"
)

var (
	serverAddr   = flag.String("server", "127.0.0.1:8000", "IP Address of server")
	loadBalancer = flag.String("load_balancer", "", "The algorithm for load balancing")
	timeout      = flag.Duration("timeout", 100*time.Millisecond, "Deadline of each call (a context deadline)")
	attachment   = flag.String("attachment", "", "Carry this along with requests")
	intervalMs   = flag.Int("interval_ms", 1000, "Milliseconds between consecutive requests")
	count        = flag.Int("count", 0, "Stop after this many calls (0: until interrupted)")
)

// logCalls is a client interceptor: it logs every call, its latency and
// its result, whichever stub made it.
func logCalls(ctx context.Context, md protoreflect.MethodDescriptor, cntl *controller.Controller,
	req, resp proto.Message, invoke channel.Invoker) error {
	start := time.Now()
	err := invoke(ctx, md, cntl, req, resp)
	log.Printf("call %s to %v: %v in %v", md.FullName(), cntl.RemoteSide(), errOrOK(err), time.Since(start))
	return err
}

func errOrOK(err error) any {
	if err == nil {
		return "OK"
	}
	return err
}

func main() {
	flag.Parse()
	opts := channel.DefaultOptions()
	opts.Interceptors = []channel.Interceptor{logCalls}
	ch, err := channel.New(*serverAddr, *loadBalancer, &opts)
	if err != nil {
		log.Fatalf("Fail to initialize channel: %v", err)
	}
	defer ch.Close()
	client := echopb.NewEchoServiceClient(ch)

	// Ctrl-C cancels the call in flight, not only the loop.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	for i := 0; *count == 0 || i < *count; i++ {
		callCtx, cancel := context.WithTimeout(ctx, *timeout)
		var res channel.CallResult
		resp, err := client.Echo(callCtx, &echopb.EchoRequest{Message: proto.String("hello world")},
			channel.WithLogID(int64(i)),
			channel.WithRequestAttachment([]byte(*attachment)),
			channel.WithRequestUserField("x-request-source", "ctxclient"),
			channel.Result(&res))
		cancel()
		switch {
		case errors.Is(err, context.Canceled):
			log.Print("EchoClient is going to quit")
			return
		case errors.Is(err, context.DeadlineExceeded):
			log.Printf("timed out after %v: %v", *timeout, err)
		case err != nil:
			log.Printf("failed: %v", err)
		default:
			log.Printf("Received %q (attached=%q) from %v, latency=%dus",
				resp.GetMessage(), res.ResponseAttachment, res.RemoteSide, res.LatencyUs)
		}
		select {
		case <-ctx.Done():
			log.Print("EchoClient is going to quit")
			return
		case <-time.After(time.Duration(*intervalMs) * time.Millisecond):
		}
	}
}
