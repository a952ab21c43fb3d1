// Command rpc_press is brpc's tools/rpc_press in Go: it loads a .proto at
// run time, reads requests as JSON and sends them to a baidu_std server
// at a given rate, printing the calls sent, succeeded and failed every
// second and the latency percentiles every ten seconds.
//
//	rpc_press -proto=echo.proto -method=example.EchoService.Echo \
//	    -server=127.0.0.1:8000 -input='{"message":"hello"}' -qps=1000 -duration=10
//
// See README.md for every flag and the output format.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

var (
	dummyPort            = flag.Int("dummy_port", 8888, "Port of dummy server (builtin pages such as /vars, on 127.0.0.1); <= 0 starts none")
	protoFile            = flag.String("proto", "", "user's proto files with path")
	inc                  = flag.String("inc", "", "Include paths for proto, separated by semicolon(;)")
	method               = flag.String("method", "example.EchoService.Echo", "The full method name")
	serverAddr           = flag.String("server", "0.0.0.0:8002", "ip:port of the server when -lb_policy is empty, the naming service otherwise")
	input                = flag.String("input", "", "The file containing requests in json format, or the requests themselves")
	output               = flag.String("output", "", "The file containing responses in json format")
	lbPolicy             = flag.String("lb_policy", "", "The load balancer algorithm: rr, random, wrr, wr, la, c_murmurhash")
	threadNum            = flag.Int("thread_num", 0, "Number of threads to send requests. 0: automatically chosen according to -qps")
	protocol             = flag.String("protocol", "baidu_std", "Protocol of the channel: baidu_std or h2:grpc")
	connectionType       = flag.String("connection_type", "", "Type of connections: single, pooled, short")
	timeoutMs            = flag.Int("timeout_ms", 1000, "RPC timeout in milliseconds; <= 0 means no timeout")
	connectionTimeoutMs  = flag.Int("connection_timeout_ms", 500, "connection timeout in milliseconds")
	maxRetry             = flag.Int("max_retry", 3, "Maximum retry times by RPC framework")
	requestCompressType  = flag.Int("request_compress_type", 0, "Snappy:1 Gzip:2 Zlib:3 None:0")
	responseCompressType = flag.Int("response_compress_type", 0, "Snappy:1 Gzip:2 Zlib:3 None:0 (accepted for compatibility: the server chooses)")
	attachmentSize       = flag.Int("attachment_size", 0, "Carry so many byte attachment along with requests")
	duration             = flag.Int("duration", 0, "how many seconds the press keep; 0 means until Ctrl-C")
	qps                  = flag.Int("qps", 100, "how many calls per seconds; <= 0 means unlimited (each thread waits for its call)")
	pretty               = flag.Bool("pretty", true, "output pretty jsons")
	maxInflight          = flag.Int("max_inflight", 0, "Most calls in flight per thread before it waits; 0: twice the calls of one timeout, in [64, 10000]")
)

func main() {
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "rpc_press: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	opts := Options{
		ProtoFile:            *protoFile,
		Method:               *method,
		Server:               *serverAddr,
		LBPolicy:             *lbPolicy,
		Input:                *input,
		Output:               *output,
		Pretty:               *pretty,
		QPS:                  *qps,
		ThreadNum:            *threadNum,
		Duration:             time.Duration(*duration) * time.Second,
		MaxInflight:          *maxInflight,
		Protocol:             *protocol,
		ConnectionType:       *connectionType,
		TimeoutMs:            int32(*timeoutMs),
		ConnectTimeoutMs:     int32(*connectionTimeoutMs),
		MaxRetry:             *maxRetry,
		RequestCompressType:  int32(*requestCompressType),
		ResponseCompressType: int32(*responseCompressType),
		AttachmentSize:       *attachmentSize,
	}
	if *inc != "" {
		opts.Includes = strings.Split(*inc, ";")
	}
	if *dummyPort > 0 {
		opts.DummyAddr = fmt.Sprintf("127.0.0.1:%d", *dummyPort)
	}

	// The first SIGINT or SIGTERM stops sending and waits for the calls
	// in flight; a second one quits at once.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sig
		log.Print("Asked to quit: stopping, waiting for the calls in flight (again to quit at once)")
		cancel()
		<-sig
		os.Exit(1)
	}()

	p, err := newPress(opts)
	if err != nil {
		log.Printf("FATAL: fail to init rpc_press: %v", err)
		os.Exit(1)
	}
	p.run(ctx)
	p.close()
}
