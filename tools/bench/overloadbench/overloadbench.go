// Package overloadbench measures the concurrency limiters on a real
// server under overload: goodput and latency at 1×, 2× and 4× the
// server's capacity for no limiter, constant (= the number of workers,
// the ideal), auto and bbr.
//
// The server (testsupport/loadtest.CapacityService, on a loopback port in
// this process) has M workers each busy L per request, on timers: a
// request waits for a free worker (the queue an overload builds), then
// holds it for L. Its capacity C is measured first: the throughput of 2×M
// closed-loop callers against it, unlimited (a little under M/L, timers
// firing late).
//
// The load is open loop: calls start at k×C per second, evenly paced,
// whatever happens to the earlier ones, as from many independent clients
// (closed-loop callers would wait in an unlimited server's queue, so it
// would never see more than C, and would fire again as soon as a limited
// one rejected them). The client has MaxRetry 0, so ELIMIT comes back,
// and a timeout (-timeout_ms): an unlimited server keeps working on
// requests whose client gave up, so under overload its queue grows
// until every answer comes too late.
//
// Each cell runs on a fresh server: -normal_s at 0.5×C (a server that
// served normal traffic before; 0 for one overloaded from its first
// request), -warmup_s at k×C unmeasured, then -duration_s at k×C measured.
//
// It prints, per cell: goodput (successful calls per second), goodput / C,
// p50 and p99 of the successful calls, the share of calls rejected with
// ELIMIT and their p99, the share that failed otherwise (timeouts), and
// the range of the method's limit (_max_concurrency) during the measured
// seconds; with -trace also the limit every 100 ms.
//
// Run from tools/bench (the default run takes about 3 minutes):
//
//	go run ./cmd/overloadbench
//	go run ./cmd/overloadbench -duration_s 3 -warmup_s 2   # a quick check
//	go run ./cmd/overloadbench -normal_s 0 -limiters auto,bbr -loads 1,2,4 -trace
package overloadbench

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gobrpc/gobrpc/bvar"
	"github.com/gobrpc/gobrpc/testsupport/loadtest"
)

var (
	workers   = Flags.Int("workers", 8, "M: the server's workers")
	holdMs    = Flags.Float64("hold_ms", 10, "L: how long a worker is busy per request, ms")
	loadsFlag = Flags.String("loads", "1,2,4", "offered loads, multiples of the measured capacity C")
	limiters  = Flags.String("limiters", "unlimited,constant,auto,bbr", "limiters to compare (constant means constant = workers)")
	durationS = Flags.Float64("duration_s", 10, "seconds measured per cell")
	warmupS   = Flags.Float64("warmup_s", 2, "seconds of the overload before the measured ones")
	normalS   = Flags.Float64("normal_s", 2, "seconds at 0.5×C before the overload; 0 for none")
	peakS     = Flags.Float64("peak_s", 3, "seconds measuring the capacity C")
	timeoutMs = Flags.Int("timeout_ms", 1000, "the calls' timeout, ms")
	trace     = Flags.Bool("trace", false, "after each row, print the limit / the requests in the service every 100 ms of the cell")
)

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// ms formats a latency in milliseconds; 0 (no call) is "-".
func ms(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond))
}

// msFine is ms with two decimals, for sub-millisecond latencies.
func msFine(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond))
}

// Flags are overloadbench's flags, parsed by Main.
var Flags = flag.NewFlagSet("overloadbench", flag.ExitOnError)

// Main runs the limiters x loads table with args (the command line after
// the program and subcommand names).
func Main(args []string) error {
	if err := Flags.Parse(args); err != nil {
		return err
	}
	var loads []float64
	for _, f := range strings.Split(*loadsFlag, ",") {
		k, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || k <= 0 {
			return fmt.Errorf("overloadbench: bad -loads %q", *loadsFlag)
		}
		loads = append(loads, k)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	if err := run(ctx, os.Stdout, loads, strings.Split(*limiters, ",")); err != nil {
		return fmt.Errorf("overloadbench: %w", err)
	}
	return nil
}

func run(ctx context.Context, out io.Writer, loads []float64, limits []string) error {
	hold := time.Duration(*holdMs * float64(time.Millisecond))
	fmt.Fprintf(out, "overloadbench: %s, GOMAXPROCS=%d, load average %s\n", runtime.Version(), runtime.GOMAXPROCS(0), loadAvg())

	// The capacity and the no-load latency, on an unlimited server.
	base, err := loadtest.StartCapacityServer(*workers, hold, nil)
	if err != nil {
		return err
	}
	res, err := loadtest.Drive(ctx, loadtest.DriveConfig{Addr: base.Addr(), TimeoutMs: int32(*timeoutMs), Loads: []loadtest.Load{
		{Name: "no load", Duration: time.Second, Callers: 1},
		{Name: "saturating", Duration: 500 * time.Millisecond, Callers: 2 * *workers},
		{Name: "peak", Duration: seconds(*peakS), Callers: 2 * *workers},
	}})
	base.Stop()
	if err != nil {
		return err
	}
	noLoad, c := res[0].OKLatency(0.5), res[2].Goodput()
	fmt.Fprintf(out, "server: %d workers x %v (M/L = %.0f/s), measured capacity C = %.0f/s (%d closed-loop callers), no-load latency %s ms (p50 of one caller)\n",
		*workers, hold, base.Service.Capacity(), c, 2**workers, ms(noLoad))
	fmt.Fprintf(out, "open-loop load at k x C, client MaxRetry 0, timeout %d ms; per cell: fresh server, %gs at 0.5 x C, %gs warm-up, %gs measured\n\n",
		*timeoutMs, *normalS, *warmupS, *durationS)

	fmt.Fprintf(out, "%-10s %5s %8s %8s %9s %8s %8s %9s %8s %8s %7s\n",
		"limiter", "load", "offered", "goodput", "goodput/C", "ok p50", "ok p99", "rejected", "rej p99", "failed", "limit")
	fmt.Fprintf(out, "%-10s %5s %8s %8s %9s %8s %8s %9s %8s %8s %7s\n",
		"", "", "/s", "/s", "", "ms", "ms", "", "ms", "", "")
	for _, lim := range limits {
		lim = strings.TrimSpace(lim)
		for _, k := range loads {
			row, err := cell(ctx, lim, hold, c, k)
			if err != nil {
				return fmt.Errorf("%s at %gx: %w", lim, k, err)
			}
			o := row.o
			fmt.Fprintf(out, "%-10s %4gx %8.0f %8.0f %9.2f %8s %8s %8.1f%% %8s %7.1f%% %7s\n",
				row.name, k, k*c, o.Goodput(), o.Goodput()/c, ms(o.OKLatency(0.5)), ms(o.OKLatency(0.99)),
				100*o.RejectedShare(), msFine(o.RejectedLatency(0.99)), 100*o.FailedShare(), row.limit)
			if row.trace != "" {
				fmt.Fprintf(out, "  limit/requests every 100 ms:%s\n", row.trace)
			}
			if o.Failed > 0 && !strings.Contains(o.FirstError, "timeout") {
				fmt.Fprintf(os.Stderr, "%s at %gx: %d failed, first: %s\n", lim, k, o.Failed, o.FirstError)
			}
		}
	}
	fmt.Fprintf(out, "\ngoodput = successful calls/s; ok = successful calls, rejected = calls answered ELIMIT, failed = other\n"+
		"failures (timeouts); percentiles exact over the measured calls; limit = the method's _max_concurrency\n"+
		"during the measured seconds (min-max of 100 ms samples; 0 or - = unlimited).\n")
	return nil
}

type row struct {
	name  string
	o     loadtest.Outcome
	limit string
	trace string
}

// cell runs one limiter at k×c on a fresh server.
func cell(ctx context.Context, lim string, hold time.Duration, c, k float64) (row, error) {
	runtime.GC()
	time.Sleep(300 * time.Millisecond) // let the previous cell's connections go
	var setting any = lim
	name := lim
	switch lim {
	case "unlimited":
		setting = nil
	case "constant":
		setting = *workers
		name = "constant=" + strconv.Itoa(*workers)
	}
	srv, err := loadtest.StartCapacityServer(*workers, hold, setting)
	if err != nil {
		return row{}, err
	}
	defer srv.Stop()

	// Sample the limit every 100 ms.
	port := strconv.Itoa(srv.Server.ListenAddress().(*net.TCPAddr).Port)
	limitVar := "rpc_server_" + port + "_example_echo_service_echo_max_concurrency"
	type sample struct {
		at       time.Duration
		limit    int64
		inflight int64 // requests in the service (waiting or served)
	}
	var samples []sample
	start := time.Now()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	if setting != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					v, _ := bvar.Describe(limitVar)
					n, _ := strconv.ParseInt(v, 10, 64)
					samples = append(samples, sample{time.Since(start), n, srv.Service.Inflight()})
				}
			}
		}()
	}

	var plan []loadtest.Load
	if *normalS > 0 {
		plan = append(plan, loadtest.Load{Name: "normal", Duration: seconds(*normalS), Rate: c / 2})
	}
	if *warmupS > 0 {
		plan = append(plan, loadtest.Load{Name: "warm-up", Duration: seconds(*warmupS), Rate: k * c})
	}
	plan = append(plan, loadtest.Load{Name: "measured", Duration: seconds(*durationS), Rate: k * c})
	res, err := loadtest.Drive(ctx, loadtest.DriveConfig{Addr: srv.Addr(), TimeoutMs: int32(*timeoutMs), Loads: plan})
	close(stop)
	wg.Wait()
	if err != nil {
		return row{}, err
	}
	o := res[len(res)-1]
	r := row{name: name, o: o, limit: "-"}
	if *trace {
		var b strings.Builder
		for _, s := range samples {
			fmt.Fprintf(&b, " %d/%d", s.limit, s.inflight)
		}
		r.trace = b.String()
	}
	measuredFrom := time.Duration(0)
	for _, p := range res[:len(res)-1] {
		measuredFrom += p.Duration
	}
	var limits []int64
	for _, s := range samples {
		if s.at >= measuredFrom {
			limits = append(limits, s.limit)
		}
	}
	if len(limits) > 0 {
		lo, hi := slices.Min(limits), slices.Max(limits)
		switch {
		case hi == 0:
			r.limit = "-"
		case lo == hi:
			r.limit = strconv.FormatInt(lo, 10)
		default:
			r.limit = strconv.FormatInt(lo, 10) + "-" + strconv.FormatInt(hi, 10)
		}
	}
	return r, nil
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
