package echobench

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
)

// summary is the median of each measure over a framework's rounds.
type summary struct {
	qps, p50, p99, p999 float64 // latencies in µs
	cpu, cpuCli, cpuSrv float64 // CPU seconds per 100k calls
	al, alCli, alSrv    float64 // allocations per call
	errors              int64
	rounds              int
}

func median(rs []runResult, f func(runResult) float64) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
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
	s.p50 = median(rs, func(r runResult) float64 { return us(r.p50) })
	s.p99 = median(rs, func(r runResult) float64 { return us(r.p99) })
	s.p999 = median(rs, func(r runResult) float64 { return us(r.p999) })
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

func rounds(n int) string {
	if n == 1 {
		return "1 round"
	}
	return fmt.Sprintf("%d rounds", n)
}

func fmtUs(d time.Duration) string { return fmt.Sprintf("%.1fµs", us(d)) }

// ratio is a/b, "-" when b is missing.
func ratio(a, b float64) string {
	if b == 0 {
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

func printScenario(w io.Writer, sc scenario, fws []string, res map[string][]runResult) {
	fmt.Fprintf(w, "== %s payload, %d callers (median of %s)\n", sizeName(sc.payload), sc.callers, rounds(len(res[fws[0]])))
	fmt.Fprintf(w, "%-14s %9s %9s %9s %9s  %-21s  %-21s %8s %8s %8s %8s\n",
		"framework", "QPS", "p50 µs", "p99 µs", "p999 µs", "CPU s/100k (cli+srv)", "allocs/call (cli+srv)", "QPS/grpc", "p50/grpc", "p99/grpc", "CPU/grpc")
	var g summary
	if rs, ok := res["grpc"]; ok {
		g = summarize(rs)
	}
	for _, fw := range fws {
		s := summarize(res[fw])
		fmt.Fprintf(w, "%-14s %9.0f %9.1f %9.1f %9.1f  %-21s  %-21s %8s %8s %8s %8s\n",
			fw, s.qps, s.p50, s.p99, s.p999,
			fmt.Sprintf("%5.2f (%.2f+%.2f)", s.cpu, s.cpuCli, s.cpuSrv),
			fmt.Sprintf("%5.1f (%.1f+%.1f)", s.al, s.alCli, s.alSrv),
			ratio(s.qps, g.qps), ratio(s.p50, g.p50), ratio(s.p99, g.p99), ratio(s.cpu, g.cpu))
		if s.errors > 0 {
			fmt.Fprintf(w, "%-14s   %d failed calls in the measured windows\n", "", s.errors)
		}
	}
	fmt.Fprintln(w)
}

// printSummary prints QPS and p99 of every scenario side by side, with the
// ratio to grpc-go.
func printSummary(w io.Writer, scs []scenario, fws []string, res map[scenario]map[string][]runResult) {
	for _, m := range []struct {
		title string
		get   func(summary) float64
	}{
		{"QPS", func(s summary) float64 { return s.qps }},
		{"p50 µs", func(s summary) float64 { return s.p50 }},
		{"p99 µs", func(s summary) float64 { return s.p99 }},
	} {
		fmt.Fprintf(w, "== summary: %s (x grpc-go)\n%-9s", m.title, "scenario")
		for _, fw := range fws {
			fmt.Fprintf(w, " %20s", fw)
		}
		fmt.Fprintln(w)
		for _, sc := range scs {
			fmt.Fprintf(w, "%-9s", sc.name())
			var g float64
			if rs, ok := res[sc]["grpc"]; ok {
				g = m.get(summarize(rs))
			}
			for _, fw := range fws {
				v := m.get(summarize(res[sc][fw]))
				fmt.Fprintf(w, " %20s", fmt.Sprintf("%.1f (%sx)", v, ratio(v, g)))
			}
			fmt.Fprintln(w)
		}
		fmt.Fprintln(w)
	}
}
