package echobench

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// runResult is what one run (one framework, one scenario, one round)
// measured over its window.
type runResult struct {
	calls    int64 // successful calls completed in the window
	errors   int64
	firstErr string
	dropped  int64 // calls whose latency found no slot (counted, not in the percentiles)
	elapsed  time.Duration
	p50      time.Duration
	p99      time.Duration
	p999     time.Duration
	avg      time.Duration // mean latency
	cli, srv usage
	// external: the client is brpc's echo_client, a process that reports
	// its QPS and average latency per second, not each call: calls is
	// the window's median QPS x elapsed, avg the mean of its seconds, and
	// the percentiles are not measured.
	external bool
}

func (r runResult) qps() float64 { return float64(r.calls) / r.elapsed.Seconds() }

// percentiles are p50, p99 and p999 in µs, NaN when not measured.
func (r runResult) percentiles() (p50, p99, p999 float64) {
	if r.external {
		// brpc's client: its own LatencyRecorder's p99 and p99.9 (no p50).
		p99, p999 = math.NaN(), math.NaN()
		if r.p99 > 0 {
			p99, p999 = us(r.p99), us(r.p999)
		}
		return math.NaN(), p99, p999
	}
	return us(r.p50), us(r.p99), us(r.p999)
}

// cpuPer100k is client + server CPU seconds per 100k calls.
func (r runResult) cpuPer100k() (total, cli, srv float64) {
	if r.calls == 0 {
		return 0, 0, 0
	}
	f := 1e5 / float64(r.calls)
	cli, srv = r.cli.cpu.Seconds()*f, r.srv.cpu.Seconds()*f
	return cli + srv, cli, srv
}

// allocsPerCall is client + server heap allocations per call; NaN for a
// side that is not a Go process (brpc's), and then for the total.
func (r runResult) allocsPerCall() (total, cli, srv float64) {
	if r.calls == 0 {
		return 0, 0, 0
	}
	n := float64(r.calls)
	cli, srv = float64(r.cli.mallocs)/n, float64(r.srv.mallocs)/n
	if r.cli.noMallocs {
		cli = math.NaN()
	}
	if r.srv.noMallocs {
		srv = math.NaN()
	}
	return cli + srv, cli, srv
}

// Caller phases: only calls that end in phaseMeasure count. phaseCool
// keeps the load on while both processes read their counters.
const (
	phaseWarmup int32 = iota
	phaseMeasure
	phaseCool
	phaseStop
)

// maxLatencies is the room for latencies of one run: 64M calls.
const maxLatencies = 1 << 26

// latencies holds the latency (ns, capped at 4.29 s) of every measured
// call of the current run; nextLatency is its length.
var (
	latencies   []uint32
	nextLatency atomic.Int64
)

func drive() error {
	scs, err := selectScenarios()
	if err != nil {
		return err
	}
	fws, err := selectFrameworks(os.Stderr)
	if err != nil {
		return err
	}
	if *repeat < 1 {
		return fmt.Errorf("-repeat %d: want >= 1", *repeat)
	}
	if *duration <= 0 {
		return fmt.Errorf("-duration %v: want > 0", *duration)
	}
	latencies = latencySlots(maxLatencies)
	out := os.Stdout
	printMachine(out)
	fmt.Fprintf(out, "echobench -duration %v -warmup %v -repeat %d -timeout_ms %d; frameworks %s\n",
		*duration, *warmup, *repeat, *timeoutMs, strings.Join(fws, ", "))
	fmt.Fprintf(out, "client (this process) and server (a child process) on 127.0.0.1; closed-loop callers; each round runs every framework once, back to back\n")
	printLegend(out, fws)
	fmt.Fprintln(out)

	results := map[scenario]map[string][]runResult{}
	for _, sc := range scs {
		payload := makePayload(sc.payload)
		results[sc] = map[string][]runResult{}
		for round := 1; round <= *repeat; round++ {
			for _, fw := range fws {
				r, err := runOnce(fw, sc, payload)
				if err != nil {
					return fmt.Errorf("%s %s round %d: %w", sc.name(), fw, round, err)
				}
				results[sc][fw] = append(results[sc][fw], r)
				logRun(sc, fw, round, r)
			}
		}
		printScenario(out, sc, fws, results[sc])
	}
	if len(scs) > 1 {
		printSummary(out, scs, fws, results)
	}
	if *chart != "" {
		if err := writeChart(*chart, scs, fws, results); err != nil {
			return fmt.Errorf("chart: %w", err)
		}
		fmt.Fprintf(out, "chart: %s\n", *chart)
	}
	return nil
}

func makePayload(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a' + byte(i%26)
	}
	return b
}

func logRun(sc scenario, fw string, round int, r runResult) {
	if r.errors > 0 {
		fmt.Fprintf(os.Stderr, "%s %s round %d: %d failed calls, first: %s\n", sc.name(), fw, round, r.errors, r.firstErr)
	}
	if r.dropped > 0 {
		fmt.Fprintf(os.Stderr, "%s %s round %d: %d calls over the %d latency slots are not in the percentiles\n", sc.name(), fw, round, r.dropped, maxLatencies)
	}
	if !*verbose {
		return
	}
	cpu, ccpu, scpu := r.cpuPer100k()
	al, cal, sal := r.allocsPerCall()
	p50, p99, p999 := r.percentiles()
	fmtUs := func(v float64) string {
		if math.IsNaN(v) {
			return "-"
		}
		return fmt.Sprintf("%.1fµs", v)
	}
	fmt.Fprintf(os.Stderr, "%-8s %-14s round %d: %8.0f QPS  avg %s  p50 %s  p99 %s  p999 %s  CPU s/100k %.2f (%.2f+%.2f)  allocs/call %s (%s+%s)\n",
		sc.name(), fw, round, r.qps(), fmtUs(us(r.avg)), fmtUs(p50), fmtUs(p99), fmtUs(p999), cpu, ccpu, scpu, fmtF(al, 1), fmtF(cal, 1), fmtF(sal, 1))
}

// runOnce starts a server child, drives it for -warmup + -duration with
// sc.callers closed-loop callers, and stops it.
func runOnce(fw string, sc scenario, payload []byte) (runResult, error) {
	var res runResult
	cf := clientFrameworks[fw]
	runtime.GC() // the previous run's garbage is not this run's
	var cliProfile, srvProfile string
	if *cpuProfile != "" {
		base := *cpuProfile + "." + strings.ReplaceAll(sc.name(), "/", "-") + "." + fw
		cliProfile, srvProfile = base+".client.pprof", base+".server.pprof"
	}
	if cf.dial == nil {
		return runBrpcClient(fw, sc, srvProfile)
	}
	srv, err := startEchoServer(cf.server, srvProfile)
	if err != nil {
		return res, err
	}
	defer srv.stop()
	cl, err := cf.dial(srv.address(), time.Duration(*timeoutMs)*time.Millisecond)
	if err != nil {
		return res, err
	}
	closeClient := sync.OnceFunc(cl.close)
	defer closeClient()

	var (
		phase    atomic.Int32
		errCount atomic.Int64
		firstErr atomic.Pointer[string]
		wg       sync.WaitGroup
	)
	nextLatency.Store(0)
	for range sc.callers {
		call := cl.caller(payload)
		wg.Go(func() {
			for {
				p := phase.Load()
				if p == phaseStop {
					return
				}
				t0 := time.Now()
				err := call()
				d := time.Since(t0)
				if phase.Load() != phaseMeasure {
					if err != nil && p == phaseWarmup {
						time.Sleep(time.Millisecond) // do not spin on a dead server
					}
					continue
				}
				if err != nil {
					errCount.Add(1)
					s := err.Error()
					firstErr.CompareAndSwap(nil, &s)
					continue
				}
				if i := nextLatency.Add(1) - 1; i < int64(len(latencies)) {
					latencies[i] = uint32(min(d, time.Duration(^uint32(0))))
				}
			}
		})
	}
	stopCallers := func() error {
		phase.Store(phaseStop)
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
			return nil
		case <-time.After(10 * time.Second):
			// Calls without a deadline wait for a server that went away:
			// closing the client and the server ends them.
			closeClient()
			srv.kill()
			<-done
			return errors.New("callers still in calls 10 s after the end; closed the client")
		}
	}

	time.Sleep(*warmup)
	if err := srv.begin(); err != nil {
		stopCallers()
		return res, err
	}
	stopProfile, err := startCPUProfile(cliProfile)
	if err != nil {
		stopCallers()
		return res, err
	}
	c0 := readUsage()
	t0 := time.Now()
	phase.Store(phaseMeasure)
	time.Sleep(*duration)
	phase.Store(phaseCool)
	res.elapsed = time.Since(t0)
	res.cli = readUsage().sub(c0)
	stopProfile()
	if res.srv, err = srv.end(); err != nil {
		stopCallers()
		return res, err
	}
	if err := stopCallers(); err != nil {
		return res, err
	}
	closeClient()

	n := nextLatency.Load()
	res.errors = errCount.Load()
	if p := firstErr.Load(); p != nil {
		res.firstErr = *p
	}
	res.calls = n
	if n > int64(len(latencies)) {
		res.dropped = n - int64(len(latencies))
		n = int64(len(latencies))
	}
	lat := latencies[:n]
	slices.Sort(lat)
	res.p50, res.p99, res.p999 = percentile(lat, 0.50), percentile(lat, 0.99), percentile(lat, 0.999)
	if len(lat) > 0 {
		var sum int64
		for _, l := range lat {
			sum += int64(l)
		}
		res.avg = time.Duration(sum / int64(len(lat)))
	}
	return res, nil
}

// percentile is the nearest-rank q-quantile of sorted latencies.
func percentile(sorted []uint32, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999999) - 1
	i = max(0, min(i, len(sorted)-1))
	return time.Duration(sorted[i])
}

func parseStats(line string) (usage, error) {
	f := strings.Fields(strings.TrimPrefix(line, "stats "))
	if len(f) != 2 {
		return usage{}, fmt.Errorf("server stats: bad line %q", line)
	}
	cpu, err1 := strconv.ParseInt(f[0], 10, 64)
	mallocs, err2 := strconv.ParseUint(f[1], 10, 64)
	if err1 != nil || err2 != nil {
		return usage{}, fmt.Errorf("server stats: bad line %q", line)
	}
	return usage{cpu: time.Duration(cpu), mallocs: mallocs}, nil
}

// echoServer is the server side of a run: a child process serving one
// framework on 127.0.0.1.
type echoServer interface {
	address() string
	// begin marks the start of the measured window; end returns what the
	// server spent since.
	begin() error
	end() (usage, error)
	stop()
	kill()
}

// startEchoServer starts the server of a framework: role is
// clientFramework.server.
func startEchoServer(role, profile string) (echoServer, error) {
	if role == brpcServerRole {
		return startBrpcServer()
	}
	return startServer(role, profile)
}

// serverProc is a server child process (this binary, -role=server).
type serverProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	addr  string
	done  chan struct{} // closed when the process has been waited for
}

func startServer(fw, profile string) (*serverProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	if alt := os.Getenv("ECHOBENCH_SERVER"); alt != "" {
		exe = alt // another build's server, to measure one side's change alone
	}
	args := append(append([]string(nil), subcommand...), "-role=server", "-framework="+fw, "-addr=127.0.0.1:0", "-cpuprofile="+profile)
	cmd := exec.Command(exe, args...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &serverProc{cmd: cmd, stdin: stdin, lines: make(chan string, 4), done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
		close(s.lines)
		cmd.Wait()
		close(s.done)
	}()
	line, err := s.expect("listening ")
	if err != nil {
		s.kill()
		return nil, fmt.Errorf("server %s: %w", fw, err)
	}
	s.addr = strings.TrimPrefix(line, "listening ")
	return s, nil
}

// expect waits for the next line of the server, which must start with prefix.
func (s *serverProc) expect(prefix string) (string, error) {
	select {
	case line, ok := <-s.lines:
		if !ok {
			return "", errors.New("the server exited")
		}
		if !strings.HasPrefix(line, prefix) {
			return "", fmt.Errorf("the server said %q, want %q...", line, prefix)
		}
		return line, nil
	case <-time.After(10 * time.Second):
		return "", fmt.Errorf("no %q from the server in 10 s", prefix)
	}
}

func (s *serverProc) address() string { return s.addr }

func (s *serverProc) begin() error {
	_, err := s.request("begin", "ok")
	return err
}

func (s *serverProc) end() (usage, error) {
	line, err := s.request("end", "stats ")
	if err != nil {
		return usage{}, err
	}
	return parseStats(line)
}

func (s *serverProc) request(cmd, prefix string) (string, error) {
	if _, err := io.WriteString(s.stdin, cmd+"\n"); err != nil {
		return "", fmt.Errorf("server: %w", err)
	}
	return s.expect(prefix)
}

// stop ends the server: EOF on its stdin, then a kill if it is not gone in 5 s.
func (s *serverProc) stop() {
	s.stdin.Close()
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		fmt.Fprintln(os.Stderr, "echobench: the server did not exit 5 s after its stdin closed; killing it")
		s.kill()
	}
}

func (s *serverProc) kill() {
	s.cmd.Process.Kill()
	<-s.done
}
