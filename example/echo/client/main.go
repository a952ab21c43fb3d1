// Command client is brpc's example/echo_c++ client in Go: one synchronous
// call per -interval_ms, logging the answer and the latency.
//
//	go run ./example/echo/client -server 127.0.0.1:8000
package main

import (
	"flag"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/gobrpc/gobrpc/channel"
	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/example/echo/echopb"
)

var (
	attachment     = flag.String("attachment", "", "Carry this along with requests")
	protocol       = flag.String("protocol", "baidu_std", "Protocol type")
	connectionType = flag.String("connection_type", "", "Connection type. Available values: single, pooled, short")
	serverAddr     = flag.String("server", "0.0.0.0:8000", "IP Address of server")
	loadBalancer   = flag.String("load_balancer", "", "The algorithm for load balancing")
	timeoutMs      = flag.Int("timeout_ms", 100, "RPC timeout in milliseconds")
	maxRetry       = flag.Int("max_retry", 3, "Max retries(not including the first RPC)")
	intervalMs     = flag.Int("interval_ms", 1000, "Milliseconds between consecutive requests")
	enableChecksum = flag.Bool("enable_checksum", false, "Enable CRC32C checksum of requests")
	compress       = flag.String("compress", "none", "Request compression: none, gzip, zlib or snappy")
	count          = flag.Int("count", 0, "Stop after this many calls (0: until interrupted)")
)

func main() {
	flag.Parse()
	opts := channel.DefaultOptions()
	opts.Protocol = *protocol
	opts.ConnectionType = *connectionType
	opts.TimeoutMs = int32(*timeoutMs)
	opts.MaxRetry = *maxRetry
	var ch channel.Channel
	if err := ch.Init(*serverAddr, *loadBalancer, &opts); err != nil {
		log.Fatalf("Fail to initialize channel: %v", err)
	}
	defer ch.Close()
	compressType, ok := map[string]controller.CompressType{
		"none": controller.CompressNone, "snappy": controller.CompressSnappy,
		"gzip": controller.CompressGzip, "zlib": controller.CompressZlib,
	}[*compress]
	if !ok {
		log.Fatalf("Unknown -compress=%s", *compress)
	}

	stub := echopb.NewEchoServiceStub(&ch)
	quit := make(chan os.Signal, 1)
	signal.Notify(quit, syscall.SIGINT, syscall.SIGTERM)
	for logID := 0; *count == 0 || logID < *count; logID++ {
		cntl := controller.New()
		cntl.SetLogID(int64(logID))
		cntl.RequestAttachment().WriteString(*attachment)
		cntl.SetRequestCompressType(compressType)
		if *enableChecksum {
			cntl.SetRequestChecksumType(controller.ChecksumCRC32C)
		}
		req := &echopb.EchoRequest{Message: proto.String("hello world")}
		resp := &echopb.EchoResponse{}
		stub.Echo(cntl, req, resp, nil)
		if cntl.Failed() {
			log.Printf("%s", cntl.ErrorText())
		} else {
			log.Printf("Received response from %v to %v: %s (attached=%q) latency=%dus",
				cntl.RemoteSide(), cntl.LocalSide(), resp.GetMessage(),
				cntl.ResponseAttachment().String(), cntl.LatencyUs())
		}
		select {
		case <-quit:
			log.Print("EchoClient is going to quit")
			return
		case <-time.After(time.Duration(*intervalMs) * time.Millisecond):
		}
	}
}
