// Command client is brpc's example/selective_echo_c++ client in Go: a
// SelectiveChannel balances -thread_num goroutines of synchronous calls
// over three sub-channels (11 servers on consecutive ports from
// -starting_server), and the client prints qps, latency and errors every
// second. Run example/selective_echo/server first.
//
//	go run ./example/selective_echo/client -duration_s 10
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/gobrpc/gobrpc/bvar"
	"github.com/gobrpc/gobrpc/channel"
	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/example/echo/echopb"
)

var (
	threadNum      = flag.Int("thread_num", 50, "Number of goroutines to send requests")
	attachmentSize = flag.Int("attachment_size", 0, "Carry so many byte attachment along with requests")
	requestSize    = flag.Int("request_size", 16, "Bytes of each request")
	connectionType = flag.String("connection_type", "", "Connection type. Available values: single, pooled, short")
	startingServer = flag.String("starting_server", "127.0.0.1:8114", "IP Address of the first server; the others are on the next ports")
	loadBalancer   = flag.String("load_balancer", "rr", "Name of load balancer of the SelectiveChannel")
	timeoutMs      = flag.Int("timeout_ms", 100, "RPC timeout in milliseconds")
	backupMs       = flag.Int("backup_ms", -1, "Send a backup request after so many milliseconds (-1: never)")
	maxRetry       = flag.Int("max_retry", 3, "Max retries(not including the first RPC)")
	dontFail       = flag.Bool("dont_fail", false, "Exit at the first failed RPC")
	durationS      = flag.Int("duration_s", 0, "Quit after this many seconds (0: until Ctrl-C)")
)

var (
	latencyRecorder = bvar.NewLatencyRecorder("client")
	errorCount      = bvar.NewAdder[int64]("client_error_count")
	stopping        atomic.Bool
)

// servers returns the n addresses on consecutive ports from start.
func servers(start string, n int) ([]string, error) {
	host, portStr, err := net.SplitHostPort(start)
	if err != nil {
		return nil, fmt.Errorf("invalid -starting_server %q: %w", start, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port <= 0 || port+n-1 > 65535 {
		return nil, fmt.Errorf("invalid port in -starting_server %q", start)
	}
	addrs := make([]string, n)
	for i := range addrs {
		addrs[i] = net.JoinHostPort(host, strconv.Itoa(port+i))
	}
	return addrs, nil
}

// newChannel returns a sub-channel: a single server when lb is "",
// otherwise a naming-service URL with lb.
func newChannel(target, lb string) (*channel.Channel, error) {
	opts := channel.DefaultOptions()
	opts.ConnectionType = *connectionType
	ch := &channel.Channel{}
	if err := ch.Init(target, lb, &opts); err != nil {
		return nil, err
	}
	return ch, nil
}

// buildChannel builds brpc's SelectiveChannel of three sub-channels over
// the 11 servers addrs.
func buildChannel(addrs []string) (*channel.SelectiveChannel, error) {
	opts := channel.DefaultOptions()
	opts.TimeoutMs = int32(*timeoutMs)
	opts.MaxRetry = *maxRetry
	if *backupMs > 0 {
		opts.BackupRequestMs = int32(*backupMs)
	} // 0 means "disabled" in Options: -backup_ms 0 is set per call, in sender
	schan := &channel.SelectiveChannel{}
	if err := schan.Init(*loadBalancer, &opts); err != nil {
		return nil, fmt.Errorf("fail to init SelectiveChannel: %w", err)
	}
	add := func(to *channel.SelectiveChannel, sub channel.Caller, err error) error {
		if err != nil {
			return err
		}
		if _, err := to.AddChannel(sub, ""); err != nil {
			return err
		}
		return nil
	}
	fail := func(err error) (*channel.SelectiveChannel, error) {
		schan.Close() // closes the sub-channels added so far
		return nil, fmt.Errorf("fail to add sub-channel: %w", err)
	}

	// 1. A channel over a naming service: servers 0, 1, 2.
	ch, err := newChannel("list://"+strings.Join(addrs[0:3], ","), "rr")
	if err := add(schan, ch, err); err != nil {
		return fail(err)
	}
	// 2. brpc adds a ParallelChannel (fail_limit=1) of single-server
	// channels to servers 3, 4, 5 here. gobrpc has no ParallelChannel
	// yet, so servers 3, 4, 5 are one more list:// channel instead.
	ch, err = newChannel("list://"+strings.Join(addrs[3:6], ","), "rr")
	if err := add(schan, ch, err); err != nil {
		return fail(err)
	}
	// 3. A nested SelectiveChannel: a list:// channel of servers 6, 7, 8
	// and single-server channels to 9 and 10.
	nested := &channel.SelectiveChannel{}
	if err := nested.Init("rr", nil); err != nil {
		return fail(err)
	}
	ch, err = newChannel("list://"+strings.Join(addrs[6:9], ","), "rr")
	err = add(nested, ch, err)
	for _, addr := range addrs[9:11] {
		if err == nil {
			ch, err = newChannel(addr, "")
			err = add(nested, ch, err)
		}
	}
	if err == nil {
		err = add(schan, nested, nil)
	}
	if err != nil {
		nested.Close()
		return fail(err)
	}
	return schan, nil
}

// errorLogger logs at most perSecond error texts a second.
type errorLogger struct {
	mu         sync.Mutex
	second     int64
	n          int
	suppressed int
}

const perSecond = 3

func (l *errorLogger) log(text string, latencyUs int64) {
	now := time.Now().Unix()
	l.mu.Lock()
	if now != l.second {
		if l.suppressed > 0 {
			log.Printf("(%d more errors not logged)", l.suppressed)
		}
		l.second, l.n, l.suppressed = now, 0, 0
	}
	l.n++
	ok := l.n <= perSecond
	if !ok {
		l.suppressed++
	}
	l.mu.Unlock()
	if ok {
		log.Printf("error=%s latency=%dus", shorten(text), latencyUs)
	}
}

// shorten cuts an error text to a readable length: with nested channels
// and retries at each level, it holds one entry per attempt.
func shorten(text string) string {
	const limit = 400
	if len(text) <= limit {
		return text
	}
	return fmt.Sprintf("%s ... (%d more bytes)", text[:limit], len(text)-limit)
}

var errLog errorLogger

func sender(stub *echopb.EchoServiceStub, wg *sync.WaitGroup) {
	defer wg.Done()
	req := &echopb.EchoRequest{Message: proto.String(strings.Repeat("r", *requestSize))}
	attachment := []byte(strings.Repeat("a", *attachmentSize))
	resp := &echopb.EchoResponse{}
	cntl := controller.New()
	for !stopping.Load() {
		resp.Reset()
		cntl.Reset()
		cntl.RequestAttachment().Write(attachment)
		if *backupMs == 0 {
			cntl.SetBackupRequestMs(0) // an immediate backup
		}
		stub.Echo(cntl, req, resp, nil)
		if !cntl.Failed() {
			latencyRecorder.RecordUs(cntl.LatencyUs())
			continue
		}
		errorCount.Add(1)
		if stopping.Load() {
			return
		}
		if *dontFail {
			log.Fatalf("error=%s latency=%dus", cntl.ErrorText(), cntl.LatencyUs())
		}
		errLog.log(cntl.ErrorText(), cntl.LatencyUs())
		// Most likely no server can be reached: do not spin. A real
		// client would go on with its business instead of sleeping.
		time.Sleep(50 * time.Millisecond)
	}
}

func main() {
	flag.Parse()
	addrs, err := servers(*startingServer, 11)
	if err != nil {
		log.Fatal(err)
	}
	schan, err := buildChannel(addrs)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("Added sub channels over %s ... %s", addrs[0], addrs[len(addrs)-1])

	stub := echopb.NewEchoServiceStub(schan)
	var wg sync.WaitGroup
	for range *threadNum {
		wg.Add(1)
		go sender(stub, &wg)
	}

	quit := make(chan os.Signal, 1)
	signal.Notify(quit, syscall.SIGINT, syscall.SIGTERM)
	var timeout <-chan time.Time
	if *durationS > 0 {
		timeout = time.After(time.Duration(*durationS) * time.Second)
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
loop:
	for {
		select {
		case <-quit:
			break loop
		case <-timeout:
			break loop
		case <-tick.C:
		}
		log.Printf("Sending EchoRequest at qps=%.0f latency=%dus p99=%dus errors=%d",
			latencyRecorder.QPS(), latencyRecorder.Latency(),
			latencyRecorder.LatencyPercentile(0.99), errorCount.Get())
	}
	log.Print("EchoClient is going to quit")
	stopping.Store(true)
	wg.Wait()
	log.Printf("Done: %d calls succeeded, %d failed", latencyRecorder.Count(), errorCount.Get())
	schan.Close() // closes every sub-channel, nested ones included
	latencyRecorder.Close()
	errorCount.Hide()
}
