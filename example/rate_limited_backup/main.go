// Command rate_limited_backup shows why backups need a limit. Three
// channels, each in front of its own 3 local servers of finite capacity,
// get the same open-loop traffic; for a few seconds every server gets
// slower (a spike it can still absorb on its own). The channel with
// unlimited backups doubles its load just when its servers can least take
// it: their queues grow, every call gets slow enough to back up, and the
// outage outlives the spike. The channel with a strict 5% ratio and the
// adaptive one (no delay configured, 5% extra load) recover.
//
//	go run ./example/rate_limited_backup
//	go run ./example/rate_limited_backup -svg backups.svg   # also a chart
//
// The three run at the same time (the servers' capacity is timers, not
// CPU, so they do not skew each other) for about 20 s.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"math"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/gobrpc/gobrpc/backup"
	"github.com/gobrpc/gobrpc/bvar"
	"github.com/gobrpc/gobrpc/channel"
	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/testsupport/loadtest"
	"github.com/gobrpc/gobrpc/testsupport/testpb"
)

var (
	rate      = flag.Float64("rate", 1900, "calls started per second on each channel (open loop)")
	workers   = flag.Int("workers", 4, "workers per server (each request holds one for its service time)")
	normalS   = flag.Int("normal_s", 5, "seconds before the spike")
	spikeS    = flag.Int("spike_s", 4, "seconds of the spike")
	afterS    = flag.Int("after_s", 10, "seconds after the spike")
	spikeMs   = flag.Float64("spike_ms", 5.5, "service time of every request during the spike, ms")
	backupMs  = flag.Int("backup_request_ms", 5, "backup delay of the unlimited and the ratio channels, ms")
	maxShare  = flag.Float64("max_share", 0.05, "the ratio channel's max ratio and the adaptive channel's max extra load")
	timeoutMs = flag.Int("timeout_ms", 1000, "call timeout, ms")
	svgPath   = flag.String("svg", "", "also write a chart of p99 and load per second to this file")
)

// Outside the spike a request holds a worker for 2 ms, and 4% of them
// then wait for something else (without the worker) until 30 ms: the
// slow calls backups are for.
var normal = loadtest.Profile{Base: 2 * time.Millisecond, SlowFraction: 0.04, Slow: 30 * time.Millisecond}

// setup is one channel and its servers.
type setup struct {
	name    string
	opts    channel.Options
	servers []*loadtest.CapacityServer
	ch      *channel.Channel
	calls   sync.WaitGroup // calls not ended yet

	mu      sync.Mutex
	seconds []second
	cur     second
}

type second struct {
	phase             string
	started, ok, fail int64
	backups, requests int64
	queued            int64 // requests in the servers at the end of the second
	lat               []time.Duration
	p99               time.Duration
}

func main() {
	flag.Parse()
	if !(*rate >= 1 && *rate <= 100_000) || *workers < 1 || *workers > 10_000 ||
		*normalS < 1 || *spikeS < 1 || *afterS < 1 || *normalS+*spikeS+*afterS > 600 ||
		!(*spikeMs >= 0.01 && *spikeMs <= 10_000) || *backupMs < 0 || *backupMs > 60_000 ||
		!(*maxShare >= backup.MinExtraLoad && *maxShare <= 1) || *timeoutMs < 1 || *timeoutMs > 600_000 {
		log.Fatal("rate_limited_backup: want -rate in [1, 100000], -workers in [1, 10000], seconds >= 1 (600 in all), " +
			"-spike_ms in [0.01, 10000], -backup_request_ms in [0, 60000], -max_share in [0.0001, 1], -timeout_ms in [1, 600000]")
	}
	spike := loadtest.Profile{Base: time.Duration(*spikeMs * float64(time.Millisecond))}
	perServer := func(p loadtest.Profile) float64 { return float64(*workers) / p.Base.Seconds() }
	capNormal, capSpike := 3*perServer(normal), 3*perServer(spike)

	mk := func(name string, edit func(o *channel.Options)) *setup {
		o := channel.DefaultOptions()
		o.TimeoutMs = int32(*timeoutMs)
		o.BackupRequestMs = -1
		o.BackupRequestMaxRatio = -1
		o.BackupRequestMaxExtraLoad = -1
		edit(&o)
		return &setup{name: name, opts: o}
	}
	setups := []*setup{
		mk(fmt.Sprintf("unlimited, after %d ms", *backupMs), func(o *channel.Options) { o.BackupRequestMs = int32(*backupMs) }),
		mk(fmt.Sprintf("ratio %g strict, %d ms", *maxShare, *backupMs), func(o *channel.Options) {
			o.BackupRequestMs = int32(*backupMs)
			o.BackupRequestMaxRatio = *maxShare
		}),
		mk(fmt.Sprintf("adaptive %g, no delay", *maxShare), func(o *channel.Options) { o.BackupRequestMaxExtraLoad = *maxShare }),
	}
	// The ratio channel's strict mode is a flag read when it is built.
	if err := flag.Set("backup_request_ratio_strict", "true"); err != nil {
		log.Fatal(err)
	}
	for _, s := range setups {
		if err := s.start(); err != nil {
			log.Fatal(err)
		}
		defer s.stop()
	}

	fmt.Printf("Backups when the servers get slower: three channels, each with its own 3 servers\n\n")
	fmt.Printf("  Each server: %d workers; a request holds one for %v, and %g%% then wait (without it) until %v:\n", *workers, normal.Base, 100*normal.SlowFraction, normal.Slow)
	fmt.Printf("  %.0f calls/s for the 3 servers.\n", capNormal)
	fmt.Printf("  Each channel starts %.0f calls/s whatever happens to earlier ones (%.0f%% of capacity), timeout %d ms.\n",
		*rate, 100**rate/capNormal, *timeoutMs)
	fmt.Printf("  SPIKE, seconds %d-%d: every request holds its worker %v: %.0f calls/s, still above %.0f/s.\n",
		*normalS+1, *normalS+*spikeS, spike.Base, capSpike, *rate)
	fmt.Printf("  Servers never drop a request a client gave up on (most do not): a lost backup or original still costs a worker.\n\n")
	fmt.Printf("  bk%% = backups / calls started; load = requests the servers got / calls started; queue = requests\n")
	fmt.Printf("  waiting or in service at the end of the second; p99 of the calls that ended in it (timeouts count as %d ms).\n\n", *timeoutMs)

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	phases := []struct {
		name    string
		seconds int
		profile loadtest.Profile
	}{{"normal", *normalS, normal}, {"SPIKE", *spikeS, spike}, {"after", *afterS, normal}}
	// One second of warm-up: the adaptive channel learns its delay there
	// too, so all three start measured seconds warm.
	run(ctx, setups, "warm-up", 1, normal)
	for _, s := range setups {
		s.seconds = nil
	}
	for _, p := range phases {
		if run(ctx, setups, p.name, p.seconds, p.profile) != nil {
			return
		}
	}
	printTable(setups)
	printSummary(setups, *normalS, *spikeS)
	if *svgPath != "" {
		if err := os.WriteFile(*svgPath, []byte(chart(setups, *normalS, *spikeS)), 0o644); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("\nChart written to %s\n", *svgPath)
	}
}

func (s *setup) start() error {
	var addrs []string
	for range 3 {
		srv, err := loadtest.StartCapacityServer(*workers, normal.Base, nil)
		if err != nil {
			return err
		}
		srv.Service.SetProfile(normal)
		s.servers = append(s.servers, srv)
		addrs = append(addrs, srv.Addr())
	}
	s.ch = &channel.Channel{}
	if err := s.ch.Init("list://"+strings.Join(addrs, ","), "rr", &s.opts); err != nil {
		return err
	}
	return nil
}

// stop waits for the calls (at most their timeout), then stops the
// servers (what they still hold are abandoned attempts, whose answers the
// open channel drops) and closes the channel.
func (s *setup) stop() {
	s.calls.Wait()
	for _, srv := range s.servers {
		srv.Stop()
	}
	s.ch.Close()
}

// backupsSent reads the channel's <prefix>_backup_sent, as /vars shows it.
func (s *setup) backupsSent() int64 {
	v, _ := bvar.Describe(s.ch.BackupVarPrefix() + "_backup_sent")
	n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	return n
}

func (s *setup) serverRequests() (requests, queued int64) {
	for _, srv := range s.servers {
		requests += srv.Service.Requests()
		queued += srv.Service.Inflight()
	}
	return requests, queued
}

// run drives every setup for n seconds of profile p, in the open loop:
// the calls of each second are spread evenly over it.
func run(ctx context.Context, setups []*setup, phase string, n int, p loadtest.Profile) error {
	for _, s := range setups {
		for _, srv := range s.servers {
			srv.Service.SetProfile(p)
		}
	}
	req := &testpb.EchoRequest{Message: proto.String("hello")}
	for range n {
		start := time.Now()
		for _, s := range setups {
			r, _ := s.serverRequests()
			sent := s.backupsSent()
			s.mu.Lock()
			s.cur = second{phase: phase, backups: -sent, requests: -r}
			s.mu.Unlock()
		}
		// Calls are due at even gaps; the second ends on the clock, so a
		// process that cannot keep up starts fewer (they are not owed).
		gap := time.Duration(float64(time.Second) / *rate)
		for k := 0; ; k++ {
			at := start.Add(time.Duration(k) * gap)
			if at.Sub(start) >= time.Second || time.Since(start) >= time.Second {
				break
			}
			if d := time.Until(at); d > 0 {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(d):
				}
			}
			for _, s := range setups {
				s.call(req)
			}
		}
		time.Sleep(time.Until(start.Add(time.Second)))
		for _, s := range setups {
			s.endSecond()
		}
	}
	return nil
}

func (s *setup) call(req *testpb.EchoRequest) {
	cntl := controller.New()
	resp := &testpb.EchoResponse{}
	begin := time.Now()
	s.mu.Lock()
	s.cur.started++
	s.mu.Unlock()
	s.calls.Add(1)
	testpb.NewEchoServiceStub(s.ch).Echo(cntl, req, resp, func() {
		defer s.calls.Done()
		lat := time.Since(begin)
		s.mu.Lock()
		defer s.mu.Unlock()
		if cntl.Failed() {
			s.cur.fail++
			lat = time.Duration(*timeoutMs) * time.Millisecond
		} else {
			s.cur.ok++
		}
		s.cur.lat = append(s.cur.lat, lat)
	})
}

func (s *setup) endSecond() {
	r, q := s.serverRequests()
	sent := s.backupsSent()
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.cur
	c.backups += sent
	c.requests += r
	c.queued = q
	slices.Sort(c.lat)
	if n := len(c.lat); n > 0 {
		c.p99 = c.lat[min(n-1, n*99/100)]
	}
	c.lat = nil
	s.seconds = append(s.seconds, c)
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

const colW = 33

func printTable(setups []*setup) {
	fmt.Printf("%-10s", "")
	for _, s := range setups {
		fmt.Printf(" | %-*s", colW, s.name)
	}
	fmt.Printf("\n%-10s", "sec phase")
	for range setups {
		fmt.Printf(" | %5s %6s %5s %6s %7s", "ok", "timeout", "bk%", "load", "p99 ms")
	}
	fmt.Printf("  queue\n")
	for i := range setups[0].seconds {
		fmt.Printf("%3d %-6s", i+1, setups[0].seconds[i].phase)
		var queues []string
		for _, s := range setups {
			c := s.seconds[i]
			fmt.Printf(" | %5d %7d %4.1f%% %5.2fx %7.1f", c.ok, c.fail, 100*ratio(c.backups, c.started),
				ratio(c.requests, c.started), ms(c.p99))
			queues = append(queues, strconv.FormatInt(c.queued, 10))
		}
		fmt.Printf("  %s\n", strings.Join(queues, "/"))
	}
	fmt.Println()
}

// recovery is how many seconds after the spike the servers' queue came
// back to what it was in normal seconds (at most twice their largest,
// plus the workers) and stayed there; 0: not within the run.
func recovery(s *setup, normalS, spikeS int) int {
	var normalQueue int64
	for _, c := range s.seconds[:normalS] {
		normalQueue = max(normalQueue, c.queued)
	}
	limit := 2*normalQueue + int64(3**workers)
	after := 0
	for i := len(s.seconds) - 1; i >= normalS+spikeS; i-- {
		if s.seconds[i].queued > limit {
			break
		}
		after = i - (normalS + spikeS) + 1
	}
	return after
}

func medianP99(seconds []second) time.Duration {
	var p []time.Duration
	for _, c := range seconds {
		p = append(p, c.p99)
	}
	slices.Sort(p)
	return p[len(p)/2]
}

func printSummary(setups []*setup, normalS, spikeS int) {
	fmt.Println("Summary (recovered: the servers' queue is back to its normal size and stays there)")
	for _, s := range setups {
		var started, backups, requests, failed int64
		peak := 0.0
		for _, c := range s.seconds[normalS:] {
			started += c.started
			backups += c.backups
			requests += c.requests
			failed += c.fail
			peak = max(peak, ratio(c.requests, c.started))
		}
		verdict := "NEVER recovered in the run"
		if after := recovery(s, normalS, spikeS); after > 0 {
			verdict = fmt.Sprintf("recovered %d s after the spike ended", after)
		}
		fmt.Printf("  %-28s p99 %4.1f ms before; from the spike on: load %.2fx (peak %.2fx), %5d calls failed, %s\n",
			s.name+":", ms(medianP99(s.seconds[:normalS])), ratio(requests, started), peak, failed, verdict)
	}
	fmt.Println()
	fmt.Println("  The spike alone leaves the servers enough capacity. Unlimited backups double the load exactly then:")
	fmt.Println("  queues grow, every call waits past the backup delay and backs up too, and the overload feeds itself.")
	fmt.Println("  A cap on backups (strict ratio, or the adaptive policy's budget) keeps the extra load at 5%, so the")
	fmt.Println("  servers catch up as soon as the spike ends. (The three share this process: the unlimited channel's")
	fmt.Println("  storm also costs the others some CPU, which shows in their p99 while it lasts.)")
}

// chart draws p99 (log scale) and load per second, one line per channel,
// the spike shaded.
func chart(setups []*setup, normalS, spikeS int) string {
	const w, h, left, top, panel, gap = 760, 420, 60, 30, 150, 50
	n := len(setups[0].seconds)
	x := func(i float64) float64 { return left + i*float64(w-left-20)/float64(n) }
	colors := []string{"#d62728", "#1f77b4", "#2ca02c"}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	for k, p := range []struct {
		title  string
		y0     float64
		value  func(c second) float64
		lo, hi float64
		log    bool
		ticks  []float64
	}{
		{"p99 latency, ms (log)", top, func(c second) float64 { return ms(c.p99) }, 1, 1000, true, []float64{1, 10, 100, 1000}},
		{"load: requests the servers got / calls", top + panel + gap, func(c second) float64 { return ratio(c.requests, c.started) }, 1, 2.2, false, []float64{1, 1.5, 2}},
	} {
		y := func(v float64) float64 {
			f := (v - p.lo) / (p.hi - p.lo)
			if p.log {
				f = (math.Log10(max(v, p.lo)) - math.Log10(p.lo)) / (math.Log10(p.hi) - math.Log10(p.lo))
			}
			return p.y0 + panel - min(max(f, 0), 1)*panel
		}
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%d" fill="#f3e0e0"/>`+"\n",
			x(float64(normalS)), p.y0, x(float64(normalS+spikeS))-x(float64(normalS)), panel)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" font-weight="bold">%s</text>`+"\n", left, p.y0-8, p.title)
		for _, t := range p.ticks {
			fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%g</text>`+"\n",
				left, w-20, y(t), y(t), left-6, y(t)+4, t)
		}
		for j, s := range setups {
			var pts []string
			for i, c := range s.seconds {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(float64(i)+0.5), y(p.value(c))))
			}
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", colors[j%len(colors)], strings.Join(pts, " "))
			if k == 0 {
				fmt.Fprintf(&b, `<text x="%d" y="%d" fill="%s">%s</text>`+"\n", left+10+j*230, h-8, colors[j%len(colors)], s.name)
			}
		}
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#a33">SPIKE</text>`+"\n", (x(float64(normalS))+x(float64(normalS+spikeS)))/2, top+14)
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">seconds</text>`+"\n", float64(w)/2, h-26)
	b.WriteString("</svg>\n")
	return b.String()
}
