// Command demo starts an echo server and a client in one process and makes
// a few calls of every kind: plain, with an attachment, compressed, with a
// checksum, asynchronous, and one that times out.
//
//	go run ./example/echo/demo
package main

import (
	"flag"
	"fmt"
	"log"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/gobrpc/gobrpc/channel"
	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/example/echo/echopb"
	"github.com/gobrpc/gobrpc/server"
)

type echoService struct{}

func (echoService) Echo(cntl *controller.Controller, req *echopb.EchoRequest, resp *echopb.EchoResponse, done func()) {
	if req.GetMessage() == "slow" {
		// Answer later, from another goroutine, as a brpc handler may.
		go func() {
			time.Sleep(200 * time.Millisecond)
			resp.Message = req.Message
			done()
		}()
		return
	}
	defer done()
	resp.Message = req.Message
	cntl.ResponseAttachment().Write(cntl.RequestAttachment().Bytes())
}

func main() {
	flag.Parse()
	srv := server.New(nil)
	if err := echopb.RegisterEchoServiceServer(srv, echoService{}); err != nil {
		log.Fatal(err)
	}
	if err := srv.Start("127.0.0.1:0"); err != nil {
		log.Fatal(err)
	}
	defer func() { srv.Stop(); srv.Join() }()
	addr := srv.ListenAddress().String()
	fmt.Printf("server listening on %s\n\n", addr)

	opts := channel.DefaultOptions()
	opts.TimeoutMs = 100
	var ch channel.Channel
	if err := ch.Init(addr, "", &opts); err != nil {
		log.Fatal(err)
	}
	defer ch.Close()
	stub := echopb.NewEchoServiceStub(&ch)

	call := func(what string, setup func(*controller.Controller)) {
		cntl := controller.New()
		if setup != nil {
			setup(cntl)
		}
		resp := &echopb.EchoResponse{}
		msg := "hello world"
		if what == "slow (times out at 100 ms)" {
			msg = "slow"
		}
		stub.Echo(cntl, &echopb.EchoRequest{Message: proto.String(msg)}, resp, nil)
		if cntl.Failed() {
			fmt.Printf("%-28s failed: %s (%s) after %d us\n", what, cntl.ErrorCode().Name(), cntl.ErrorText(), cntl.LatencyUs())
			return
		}
		fmt.Printf("%-28s %q attachment=%q from %v in %d us\n", what, resp.GetMessage(),
			cntl.ResponseAttachment().String(), cntl.RemoteSide(), cntl.LatencyUs())
	}
	call("plain", nil)
	call("with attachment", func(c *controller.Controller) { c.RequestAttachment().WriteString("ATTACHMENT") })
	call("gzip", func(c *controller.Controller) { c.SetRequestCompressType(controller.CompressGzip) })
	call("snappy", func(c *controller.Controller) { c.SetRequestCompressType(controller.CompressSnappy) })
	call("crc32c checksum", func(c *controller.Controller) { c.SetRequestChecksumType(controller.ChecksumCRC32C) })
	call("slow (times out at 100 ms)", nil)

	// Asynchronous: done runs once the answer is in.
	cntl := controller.New()
	resp := &echopb.EchoResponse{}
	stub.Echo(cntl, &echopb.EchoRequest{Message: proto.String("async hello")}, resp, func() {
		fmt.Printf("%-28s %q in %d us\n", "async", resp.GetMessage(), cntl.LatencyUs())
	})
	cntl.Join()
}
