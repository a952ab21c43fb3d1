// Command client is brpc's example/cancel_c++ client in Go: every round
// it sends the same request twice at once and keeps the first answer,
// cancelling the other call. It talks to the echo server:
//
//	go run ./example/echo/server
//	go run ./example/cancel/client -count 5
//
// This hand-made hedging doubles the load on the servers; backup requests
// (channel.Options.BackupRequestMs) are the better tool, see README.md.
package main

import (
	"flag"
	"log"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/gobrpc/gobrpc/channel"
	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/example/echo/echopb"
)

var (
	connectionType = flag.String("connection_type", "", "Connection type. Available values: single, pooled, short")
	serverAddr     = flag.String("server", "127.0.0.1:8000", "IP Address of server, or a naming service URL with -load_balancer")
	loadBalancer   = flag.String("load_balancer", "", "The algorithm for load balancing")
	timeoutMs      = flag.Int("timeout_ms", 100, "RPC timeout in milliseconds")
	maxRetry       = flag.Int("max_retry", 3, "Max retries(not including the first RPC)")
	intervalMs     = flag.Int("interval_ms", 1000, "Milliseconds between rounds")
	count          = flag.Int("count", 0, "Stop after this many rounds (0: until interrupted)")
)

func main() {
	flag.Parse()
	opts := channel.DefaultOptions()
	opts.ConnectionType = *connectionType
	opts.TimeoutMs = int32(*timeoutMs)
	opts.MaxRetry = *maxRetry
	var ch channel.Channel
	if err := ch.Init(*serverAddr, *loadBalancer, &opts); err != nil {
		log.Fatalf("Fail to initialize channel: %v", err)
	}
	defer ch.Close()
	stub := echopb.NewEchoServiceStub(&ch)

	quit := make(chan os.Signal, 1)
	signal.Notify(quit, syscall.SIGINT, syscall.SIGTERM)
	var logID int64
	for round := 0; *count == 0 || round < *count; round++ {
		cntl1, cntl2 := controller.New(), controller.New()
		cntl1.SetLogID(logID)
		cntl2.SetLogID(logID + 1)
		logID += 2
		req1 := &echopb.EchoRequest{Message: proto.String("hello1")}
		req2 := &echopb.EchoRequest{Message: proto.String("hello2")}
		resp1, resp2 := &echopb.EchoResponse{}, &echopb.EchoResponse{}

		// Whichever call ends first cancels the other: its done runs
		// StartCancel on the other's Controller. The cancel is local:
		// the server still processes (and answers) the cancelled request.
		// first records whose done ran first (1 or 2).
		var first atomic.Int32
		start := time.Now()
		stub.Echo(cntl1, req1, resp1, func() {
			first.CompareAndSwap(0, 1)
			cntl2.StartCancel()
		})
		stub.Echo(cntl2, req2, resp2, func() {
			first.CompareAndSwap(0, 2)
			cntl1.StartCancel()
		})
		cntl1.Join()
		cntl2.Join()
		elapsed := time.Since(start).Microseconds()

		// The winner is the call that ended first with an answer; when
		// the first one to end failed, the other one may still have won.
		winner := int(first.Load())
		if winner == 1 && cntl1.Failed() || winner == 2 && cntl2.Failed() {
			winner = 3 - winner
		}
		cntls := [3]*controller.Controller{nil, cntl1, cntl2}
		resps := [3]*echopb.EchoResponse{nil, resp1, resp2}
		if cntl1.Failed() && cntl2.Failed() {
			log.Printf("Both failed. rpc1: %s, rpc2: %s", cntl1.ErrorText(), cntl2.ErrorText())
		} else {
			loser := 3 - winner
			log.Printf("rpc%d won: received %q from %v latency=%dus rpc1_latency=%dus rpc2_latency=%dus (rpc%d: %s)",
				winner, resps[winner].GetMessage(), cntls[winner].RemoteSide(), elapsed,
				cntl1.LatencyUs(), cntl2.LatencyUs(), loser, outcome(cntls[loser]))
		}

		select {
		case <-quit:
			log.Print("CancelClient is going to quit")
			return
		case <-time.After(time.Duration(*intervalMs) * time.Millisecond):
		}
	}
}

// outcome says how the losing call ended: usually cancelled (ECANCELED),
// sometimes answered too (both answers arrived before either cancel took
// effect).
func outcome(cntl *controller.Controller) string {
	if cntl.Failed() {
		return cntl.ErrorText()
	}
	return "also succeeded"
}
