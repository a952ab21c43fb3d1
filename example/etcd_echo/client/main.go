// Command client calls the echo servers registered in etcd under -prefix
// through etcd://, once every -interval_ms, and prints which server
// answered. Start, stop and kill servers (example/etcd_echo/server) while it
// runs: it follows them. See ../README.md.
//
//	go run ./client -etcd 127.0.0.1:2379
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/gobrpc/gobrpc/channel"
	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/example/echo/echopb"
	_ "github.com/gobrpc/gobrpc/naming/etcd" // registers etcd://
)

var (
	etcd       = flag.String("etcd", "127.0.0.1:2379", "etcd endpoints, comma-separated host:port")
	prefix     = flag.String("prefix", "/services/echo", "etcd prefix the servers register under")
	lb         = flag.String("load_balancer", "rr", "load balancer: rr, wrr, random, wr, la, c_murmurhash")
	intervalMs = flag.Int("interval_ms", 500, "wait between two calls")
	timeoutMs  = flag.Int("timeout_ms", 500, "RPC timeout in milliseconds")
	maxRetry   = flag.Int("max_retry", 3, "max retries (not counting the first attempt)")
)

func main() {
	flag.Parse()
	opts := channel.DefaultOptions()
	opts.TimeoutMs = int32(*timeoutMs)
	opts.MaxRetry = *maxRetry
	opts.SucceedWithoutServer = true // servers may start after the client
	var ch channel.Channel
	url := "etcd://" + *etcd + *prefix
	if err := ch.Init(url, *lb, &opts); err != nil {
		log.Fatal(err)
	}
	defer ch.Close()
	log.Printf("calling the servers under %s", url)
	stub := echopb.NewEchoServiceStub(&ch)
	quit := make(chan os.Signal, 1)
	signal.Notify(quit, os.Interrupt)
	tick := time.NewTicker(time.Duration(*intervalMs) * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-quit:
			return
		case <-tick.C:
		}
		var cntl controller.Controller
		resp := &echopb.EchoResponse{}
		stub.Echo(&cntl, &echopb.EchoRequest{Message: new(fmt.Sprintf("hello %d", i))}, resp, nil)
		if cntl.Failed() {
			log.Printf("call %d failed: %s", i, cntl.ErrorText())
			continue
		}
		log.Printf("%s  latency=%dus retried=%d", resp.GetMessage(), cntl.LatencyUs(), cntl.RetriedCount())
	}
}
