// Command server is brpc's example/backup_request_c++ server in Go: it
// answers every request at once, except the 0th, 2nd, 4th ... requests it
// receives, which it answers after -sleep_ms. A client with a backup request
// delay below -sleep_ms then gets every answer from its backup request.
//
//	go run ./example/backup_request/server -port 8000
package main

import (
	"flag"
	"fmt"
	"log"
	"sync/atomic"
	"time"

	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/example/backup_request/backuppb"
	"github.com/gobrpc/gobrpc/server"
)

var (
	port           = flag.Int("port", 8000, "TCP Port of this server")
	listenAddr     = flag.String("listen_addr", "", "Server listen address, may be IPV4/IPV6; overrides -port")
	idleTimeoutS   = flag.Int("idle_timeout_s", -1, "Connection will be closed if there is no read/write operations during the last `idle_timeout_s'")
	sleepMs        = flag.Int("sleep_ms", 20, "Sleep so many milliseconds on even-th requests")
	echoAttachment = flag.Bool("echo_attachment", true, "Echo attachment as well")
)

// received counts the requests received, over all connections.
var received atomic.Int64

type sleepyEchoService struct{}

func (sleepyEchoService) Echo(cntl *controller.Controller, req *backuppb.EchoRequest, resp *backuppb.EchoResponse, done func()) {
	// Sleep on the 0th, 2nd, 4th ... requests to trigger the client's
	// backup request.
	doSleep := (received.Add(1)-1)%2 == 0
	if doSleep {
		log.Printf("Received request[index=%d] from %v, sleep %d ms to trigger backup request",
			req.GetIndex(), cntl.RemoteSide(), *sleepMs)
	} else {
		log.Printf("Received request[index=%d] from %v", req.GetIndex(), cntl.RemoteSide())
	}
	resp.Index = req.Index
	if *echoAttachment {
		cntl.ResponseAttachment().Write(cntl.RequestAttachment().Bytes())
	}
	if !doSleep {
		done()
		return
	}
	// Answer later, off the handler goroutine.
	go func() {
		time.Sleep(time.Duration(*sleepMs) * time.Millisecond)
		done()
	}()
}

func main() {
	flag.Parse()
	srv := server.New(&server.Options{IdleTimeoutSec: *idleTimeoutS})
	if err := backuppb.RegisterEchoServiceServer(srv, sleepyEchoService{}); err != nil {
		log.Fatalf("Fail to add service: %v", err)
	}
	addr := *listenAddr
	if addr == "" {
		addr = fmt.Sprintf(":%d", *port)
	}
	if err := srv.Start(addr); err != nil {
		log.Fatalf("Fail to start EchoServer: %v", err)
	}
	log.Printf("EchoServer is serving on %v", srv.ListenAddress())
	srv.RunUntilAskedToQuit()
}
