package echobench

import (
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// summary is the median of each measure over a framework's rounds; NaN
// for what was not measured (percentiles of brpc's client, allocations of
// brpc's processes).
type summary struct {
	qps, avg, p50, p99, p999 float64 // latencies in µs
	cpu, cpuCli, cpuSrv      float64 // CPU seconds per 100k calls
	al, alCli, alSrv         float64 // allocations per call
	errors                   int64
	rounds                   int
}

// median is the median of f over rs; NaN if f is NaN in any round.
func median(rs []runResult, f func(runResult) float64) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
		if math.IsNaN(v[i]) {
			return math.NaN()
		}
	}
	slices.Sort(v)
	n := len(v)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func summarize(rs []runResult) summary {
	s := summary{rounds: len(rs)}
	s.qps = median(rs, runResult.qps)
	s.avg = median(rs, func(r runResult) float64 { return us(r.avg) })
	s.p50 = median(rs, func(r runResult) float64 { v, _, _ := r.percentiles(); return v })
	s.p99 = median(rs, func(r runResult) float64 { _, v, _ := r.percentiles(); return v })
	s.p999 = median(rs, func(r runResult) float64 { _, _, v := r.percentiles(); return v })
	s.cpu = median(rs, func(r runResult) float64 { t, _, _ := r.cpuPer100k(); return t })
	s.cpuCli = median(rs, func(r runResult) float64 { _, c, _ := r.cpuPer100k(); return c })
	s.cpuSrv = median(rs, func(r runResult) float64 { _, _, v := r.cpuPer100k(); return v })
	s.al = median(rs, func(r runResult) float64 { t, _, _ := r.allocsPerCall(); return t })
	s.alCli = median(rs, func(r runResult) float64 { _, c, _ := r.allocsPerCall(); return c })
	s.alSrv = median(rs, func(r runResult) float64 { _, _, v := r.allocsPerCall(); return v })
	for _, r := range rs {
		s.errors += r.errors
	}
	return s
}

// fmtF is v with prec decimals, "-" for NaN (not measured).
func fmtF(v float64, prec int) string {
	if math.IsNaN(v) {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}

func rounds(n int) string {
	if n == 1 {
		return "1 round"
	}
	return fmt.Sprintf("%d rounds", n)
}

// ratio is a/b, "-" when either is missing.
func ratio(a, b float64) string {
	if b == 0 || math.IsNaN(a) || math.IsNaN(b) {
		return "-"
	}
	return fmt.Sprintf("%.2f", a/b)
}

func printMachine(w io.Writer) {
	host, _ := os.Hostname()
	fmt.Fprintf(w, "echobench: %s %s/%s, %d CPUs (%s), GOMAXPROCS=%d, kernel %s, load average %s, %s\n",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), cpuModel(), runtime.GOMAXPROCS(0),
		firstLine("/proc/sys/kernel/osrelease"), loadAvg(), host)
}

func firstLine(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "unknown"
	}
	s, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimSpace(s)
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown model"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown model"
}

func loadAvg() string {
	f := strings.Fields(firstLine("/proc/loadavg"))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// The baselines of the ratio columns: grpc-go, and C++ brpc (its client
// and server) when it runs.
const (
	grpcBase = "grpc"
	brpcBase = "brpc-brpc"
)

// printLegend explains the columns that are not measured alike for every
// framework of fws.
func printLegend(w io.Writer, fws []string) {
	fmt.Fprintln(w, "avg µs: mean latency; QPS/grpc ... CPU/grpc: the ratio to grpc-go's row of the scenario.")
	if slices.Contains(fws, "rawtcp") {
		fmt.Fprintln(w, "rawtcp: no RPC, 4-byte length + payload frames echoed by a Go server, one connection per caller: the floor.")
	}
	var ext, brpc bool
	for _, fw := range fws {
		cf := clientFrameworks[fw]
		ext = ext || cf.dial == nil
		brpc = brpc || cf.needsBrpc()
	}
	if brpc {
		fmt.Fprintln(w, "client-server pairs with C++ brpc (multi_threaded_echo_c++ of "+brpcDirEnv+"): gobrpc-brpc = gobrpc client (single connection) -> brpc echo_server,")
		fmt.Fprintln(w, "  brpc-brpc = brpc echo_client -> brpc echo_server (brpc-brpc-pooled: -connection_type=pooled), brpc-gobrpc = brpc echo_client -> gobrpc server;")
		fmt.Fprintln(w, "  brpc's CPU from /proc/PID/stat, its allocations not measured (-).")
	}
	if ext {
		fmt.Fprintln(w, "brpc echo_client rows: QPS = median of its per-second qps within the window, avg µs = the mean of its per-second average latencies weighted by")
		fmt.Fprintln(w, "  their qps; p99/p999 are its own LatencyRecorder's (client_latency_99/_999 on its dummy server, over bvar's 10 s window, warm-up")
		fmt.Fprintln(w, "  included), read at the end of the window; no p50 (-).")
	}
	if slices.Contains(fws, brpcBase) {
		fmt.Fprintln(w, "QPS/brpc, avg/brpc, p99/brpc, CPU/brpc: the ratio to brpc-brpc's row of the scenario.")
	}
}

func printScenario(w io.Writer, sc scenario, fws []string, res map[string][]runResult) {
	fmt.Fprintf(w, "== %s payload, %d callers (median of %s)\n", sizeName(sc.payload), sc.callers, rounds(len(res[fws[0]])))
	withBrpc := slices.Contains(fws, brpcBase)
	fmt.Fprintf(w, "%-14s %9s %8s %8s %9s %9s  %-21s  %-21s %8s %8s %8s %8s",
		"framework", "QPS", "avg µs", "p50 µs", "p99 µs", "p999 µs", "CPU s/100k (cli+srv)", "allocs/call (cli+srv)", "QPS/grpc", "p50/grpc", "p99/grpc", "CPU/grpc")
	if withBrpc {
		fmt.Fprintf(w, " %8s %8s %8s %8s", "QPS/brpc", "avg/brpc", "p99/brpc", "CPU/brpc")
	}
	fmt.Fprintln(w)
	var g, b summary
	if rs, ok := res[grpcBase]; ok {
		g = summarize(rs)
	}
	if rs, ok := res[brpcBase]; ok {
		b = summarize(rs)
	}
	for _, fw := range fws {
		s := summarize(res[fw])
		fmt.Fprintf(w, "%-14s %9.0f %8s %8s %9s %9s  %-21s  %-21s %8s %8s %8s %8s",
			fw, s.qps, fmtF(s.avg, 1), fmtF(s.p50, 1), fmtF(s.p99, 1), fmtF(s.p999, 1),
			fmt.Sprintf("%5.2f (%.2f+%.2f)", s.cpu, s.cpuCli, s.cpuSrv),
			fmt.Sprintf("%5s (%s+%s)", fmtF(s.al, 1), fmtF(s.alCli, 1), fmtF(s.alSrv, 1)),
			ratio(s.qps, g.qps), ratio(s.p50, g.p50), ratio(s.p99, g.p99), ratio(s.cpu, g.cpu))
		if withBrpc {
			fmt.Fprintf(w, " %8s %8s %8s %8s", ratio(s.qps, b.qps), ratio(s.avg, b.avg), ratio(s.p99, b.p99), ratio(s.cpu, b.cpu))
		}
		fmt.Fprintln(w)
		if s.errors > 0 {
			fmt.Fprintf(w, "%-14s   %d failed calls in the measured windows\n", "", s.errors)
		}
	}
	fmt.Fprintln(w)
}

// printSummary prints QPS, the mean and the percentiles of every scenario
// side by side, with the ratio to grpc-go; then QPS and the mean with the
// ratio to brpc-brpc if it ran.
func printSummary(w io.Writer, scs []scenario, fws []string, res map[scenario]map[string][]runResult) {
	type measure struct {
		title string
		get   func(summary) float64
	}
	qps := measure{"QPS", func(s summary) float64 { return s.qps }}
	avg := measure{"avg µs", func(s summary) float64 { return s.avg }}
	p50 := measure{"p50 µs", func(s summary) float64 { return s.p50 }}
	p99 := measure{"p99 µs", func(s summary) float64 { return s.p99 }}
	tables := []struct {
		base, name string
		measures   []measure
	}{{grpcBase, "grpc-go", []measure{qps, avg, p50, p99}}}
	if slices.Contains(fws, brpcBase) {
		tables = append(tables, struct {
			base, name string
			measures   []measure
		}{brpcBase, "brpc", []measure{qps, avg, p99}})
	}
	for _, t := range tables {
		for _, m := range t.measures {
			fmt.Fprintf(w, "== summary: %s (x %s)\n%-9s", m.title, t.name, "scenario")
			for _, fw := range fws {
				fmt.Fprintf(w, " %20s", fw)
			}
			fmt.Fprintln(w)
			for _, sc := range scs {
				fmt.Fprintf(w, "%-9s", sc.name())
				var base float64
				if rs, ok := res[sc][t.base]; ok {
					base = m.get(summarize(rs))
				}
				for _, fw := range fws {
					v := m.get(summarize(res[sc][fw]))
					cell := "-"
					if !math.IsNaN(v) {
						cell = fmt.Sprintf("%.1f (%sx)", v, ratio(v, base))
					}
					fmt.Fprintf(w, " %20s", cell)
				}
				fmt.Fprintln(w)
			}
			fmt.Fprintln(w)
		}
	}
}
