// Command client is brpc's example/backup_request_c++ client in Go: one
// synchronous call per -interval_ms on a channel with BackupRequestMs set.
// When no answer comes within -backup_request_ms, the channel sends the
// same request again (to another server when there is one) and the first
// answer wins. Each line says whether a backup was sent.
//
//	go run ./example/backup_request/client -server 127.0.0.1:8000
package main

import (
	"flag"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/gobrpc/gobrpc/backup"
	"github.com/gobrpc/gobrpc/channel"
	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/example/backup_request/backuppb"
)

var (
	protocol        = flag.String("protocol", "baidu_std", "Protocol type")
	connectionType  = flag.String("connection_type", "", "Connection type. Available values: single, pooled, short")
	serverAddr      = flag.String("server", "0.0.0.0:8000", "IP Address of server")
	loadBalancer    = flag.String("load_balancer", "", "The algorithm for load balancing")
	timeoutMs       = flag.Int("timeout_ms", 100, "RPC timeout in milliseconds")
	maxRetry        = flag.Int("max_retry", 3, "Max retries(not including the first RPC)")
	backupRequestMs = flag.Int("backup_request_ms", 2, "Timeout for sending backup request")
	intervalMs      = flag.Int("interval_ms", 1000, "Milliseconds between consecutive requests")
	count           = flag.Int("count", 0, "Stop after this many calls (0: until interrupted)")
)

// -backup_request_max_ratio (default -1: no limit) is defined by the
// framework (backup.MaxRatioFlag), so it is not defined again here.

func main() {
	flag.Parse()
	opts := channel.DefaultOptions()
	opts.Protocol = *protocol
	opts.ConnectionType = *connectionType
	opts.TimeoutMs = int32(*timeoutMs)
	opts.MaxRetry = *maxRetry
	opts.BackupRequestMs = int32(*backupRequestMs)
	opts.BackupRequestMaxRatio = backup.MaxRatioFlag.Get()
	var ch channel.Channel
	if err := ch.Init(*serverAddr, *loadBalancer, &opts); err != nil {
		log.Fatalf("Fail to initialize channel: %v", err)
	}
	defer ch.Close()

	stub := backuppb.NewEchoServiceStub(&ch)
	quit := make(chan os.Signal, 1)
	signal.Notify(quit, syscall.SIGINT, syscall.SIGTERM)
	for counter := 1; *count == 0 || counter <= *count; counter++ {
		cntl := controller.New()
		req := &backuppb.EchoRequest{Index: proto.Int32(int32(counter))}
		resp := &backuppb.EchoResponse{}
		stub.Echo(cntl, req, resp, nil)
		if cntl.Failed() {
			log.Printf("%s", cntl.ErrorText())
		} else {
			log.Printf("index=%d from=%v latency=%dus backup=%v",
				resp.GetIndex(), cntl.RemoteSide(), cntl.LatencyUs(), cntl.HasBackupRequest())
		}
		select {
		case <-quit:
			log.Print("EchoClient is going to quit")
			return
		case <-time.After(time.Duration(*intervalMs) * time.Millisecond):
		}
	}
}
