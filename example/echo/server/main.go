// Command server is brpc's example/echo_c++ server in Go: it echoes the
// message and, with -echo_attachment, the attachment.
//
//	go run ./example/echo/server -port 8000
package main

import (
	"flag"
	"fmt"
	"log"

	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/example/echo/echopb"
	"github.com/gobrpc/gobrpc/server"
)

var (
	port           = flag.Int("port", 8000, "TCP Port of this server")
	listenAddr     = flag.String("listen_addr", "", "Server listen address, may be IPV4/IPV6; overrides -port")
	idleTimeoutS   = flag.Int("idle_timeout_s", -1, "Connection will be closed if there is no read/write operations during the last `idle_timeout_s'")
	echoAttachment = flag.Bool("echo_attachment", true, "Echo attachment as well")
)

type echoService struct{}

func (echoService) Echo(cntl *controller.Controller, req *echopb.EchoRequest, resp *echopb.EchoResponse, done func()) {
	defer done()
	log.Printf("Received request[log_id=%d] from %v: %s (attached=%q)",
		cntl.LogID(), cntl.RemoteSide(), req.GetMessage(), cntl.RequestAttachment().String())
	resp.Message = req.Message
	if *echoAttachment {
		cntl.ResponseAttachment().Write(cntl.RequestAttachment().Bytes())
	}
}

func main() {
	flag.Parse()
	srv := server.New(&server.Options{IdleTimeoutSec: *idleTimeoutS})
	if err := echopb.RegisterEchoServiceServer(srv, echoService{}); err != nil {
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
