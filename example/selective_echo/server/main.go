// Command server is brpc's example/selective_echo_c++ server in Go: it
// starts -server_num echo servers on consecutive ports from -port, each
// answering after its own delay (-sleep_us) with a share of irregular
// delays (-exception_ratio), and logs how many requests each one served
// every second.
//
//	go run ./example/selective_echo/server -sleep_us 1000
package main

import (
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/example/echo/echopb"
	"github.com/gobrpc/gobrpc/server"
)

var (
	port = flag.Int("port", 8114, "TCP Port of the first server; server i listens on port+i")
	// brpc's default is 7, but its selective_echo client talks to 11
	// servers (3 in a list:// channel, 3 in a parallel channel, 5 under a
	// nested selective channel), so with 7 the last 4 sub-servers are
	// always down. 11 makes the pair work out of the box.
	serverNum      = flag.Int("server_num", 11, "Number of servers")
	sleepUs        = flag.String("sleep_us", "", "Sleep so many microseconds before responding; a comma list gives one value per server, the last one repeating")
	spin           = flag.Bool("spin", false, "Spin (busy-wait) rather than sleep")
	exceptionRatio = flag.Float64("exception_ratio", 0.1, "Share of requests whose delay is irregular: half shorter, half longer")
	minRatio       = flag.Float64("min_ratio", 0.2, "Shortest irregular delay, as a multiple of sleep_us")
	maxRatio       = flag.Float64("max_ratio", 10, "Longest irregular delay, as a multiple of sleep_us")
	maxConcurrency = flag.Int("max_concurrency", 0, "Limit of requests processed in parallel")
	idleTimeoutS   = flag.Int("idle_timeout_s", -1, "Connection will be closed if there is no read/write operations during the last `idle_timeout_s'")
	echoAttachment = flag.Bool("echo_attachment", true, "Echo attachment as well")
	// Not in brpc: a bound for scripted runs.
	durationS = flag.Int("duration_s", 0, "Quit after this many seconds (0: until SIGINT/SIGTERM)")
)

// echoService is one server's service: it answers after sleepUs
// (irregular for a share of requests) and counts what it served.
type echoService struct {
	sleepUs int64
	nreq    atomic.Int64
}

func (s *echoService) Echo(cntl *controller.Controller, req *echopb.EchoRequest, resp *echopb.EchoResponse, done func()) {
	reply := func() {
		resp.Message = req.Message
		if *echoAttachment {
			cntl.ResponseAttachment().Write(cntl.RequestAttachment().Bytes())
		}
		s.nreq.Add(1)
		done()
	}
	if s.sleepUs <= 0 {
		reply()
		return
	}
	delay := s.delay()
	// Wait on another goroutine: the handler returns at once and done
	// runs when the delay is over.
	go func() {
		if *spin {
			for end := time.Now().Add(delay); time.Now().Before(end); {
			}
		} else {
			time.Sleep(delay)
		}
		reply()
	}()
}

// delay is brpc's: sleepUs, except for a share exception_ratio of
// requests, half of which get a shorter delay (down to min_ratio x
// sleepUs) and half a longer one (up to max_ratio x sleepUs).
func (s *echoService) delay() time.Duration {
	d := float64(s.sleepUs)
	if a := *exceptionRatio * 0.5; a >= 0.0001 {
		x := rand.Float64()
		if x < a {
			lo := *minRatio * d
			d = lo + (d-lo)*x/a
		} else if x+a > 1 {
			hi := *maxRatio * d
			d += (hi - d) * (x + a - 1) / a
		}
	}
	return time.Duration(d) * time.Microsecond
}

// parseSleepList parses -sleep_us: "" means no sleep anywhere.
func parseSleepList(s string) ([]int64, error) {
	var list []int64
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("invalid -sleep_us value %q", f)
		}
		list = append(list, v)
	}
	return list, nil
}

func main() {
	flag.Parse()
	if *serverNum <= 0 {
		log.Fatalf("-server_num must be positive, got %d", *serverNum)
	}
	sleepList, err := parseSleepList(*sleepUs)
	if err != nil {
		log.Fatal(err)
	}
	if *maxConcurrency != 0 {
		log.Printf("-max_concurrency=%d ignored: server.Options has no MaxConcurrency yet", *maxConcurrency)
	}

	services := make([]*echoService, *serverNum)
	servers := make([]*server.Server, *serverNum)
	for i := range servers {
		svc := &echoService{}
		if len(sleepList) > 0 {
			svc.sleepUs = sleepList[min(i, len(sleepList)-1)]
		}
		srv := server.New(&server.Options{IdleTimeoutSec: *idleTimeoutS})
		if err := echopb.RegisterEchoServiceServer(srv, svc); err != nil {
			log.Fatalf("Fail to add service: %v", err)
		}
		if err := srv.Start(fmt.Sprintf("127.0.0.1:%d", *port+i)); err != nil {
			log.Fatalf("Fail to start EchoServer %d: %v", i, err)
		}
		log.Printf("EchoServer %d is serving on %v, sleep_us=%d", i, srv.ListenAddress(), svc.sleepUs)
		services[i], servers[i] = svc, srv
	}

	quit := make(chan os.Signal, 1)
	signal.Notify(quit, syscall.SIGINT, syscall.SIGTERM)
	var timeout <-chan time.Time
	if *durationS > 0 {
		timeout = time.After(time.Duration(*durationS) * time.Second)
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last := make([]int64, *serverNum)
	var b strings.Builder
loop:
	for {
		select {
		case <-quit:
			break loop
		case <-timeout:
			break loop
		case <-tick.C:
		}
		b.Reset()
		var total int64
		for i, svc := range services {
			cur := svc.nreq.Load()
			fmt.Fprintf(&b, "S[%d]=%d ", i, cur-last[i])
			total += cur - last[i]
			last[i] = cur
		}
		fmt.Fprintf(&b, "[total=%d]", total)
		log.Print(b.String())
	}
	log.Print("EchoServers are going to quit")
	for _, srv := range servers {
		srv.Stop()
	}
	for _, srv := range servers {
		srv.Join()
	}
	log.Print("EchoServers stopped")
}
