package echobench

import (
	"bytes"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Lines of brpc's multi_threaded_echo_c++ echo_client, as a smoke run
// printed them (-thread_num 1 -request_size 16 against its echo_server).
var brpcClientOutput = []string{
	"I1201 15:33:16.029091  2163     0 client.cpp:145 main] Sending EchoRequest at qps=0 latency=0",
	"I1201 15:33:17.029313  2163     0 client.cpp:145 main] Sending EchoRequest at qps=13079 latency=75",
	"I1201 15:33:18.029437  2163     0 client.cpp:145 main] Sending EchoRequest at qps=12920 latency=75",
	"I1201 15:33:18.992171  2163     0 client.cpp:145 main] Sending EchoRequest at qps=12444 latency=78",
	"I1201 15:33:18.992204  2163     0 client.cpp:149 main] EchoClient is going to quit",
}

func TestParseBrpcClientLine(t *testing.T) {
	for i, c := range []struct {
		qps, lat float64
		ok       bool
	}{{0, 0, true}, {13079, 75, true}, {12920, 75, true}, {12444, 78, true}, {0, 0, false}} {
		q, l, ok := parseBrpcClientLine(brpcClientOutput[i])
		if q != c.qps || l != c.lat || ok != c.ok {
			t.Errorf("line %d: %v %v %v, want %v %v %v", i, q, l, ok, c.qps, c.lat, c.ok)
		}
	}
	if _, _, ok := parseBrpcClientLine("W1201 15:33:14.013341  2143     0 src/bthread/bthread.cpp:511 bthread_setconcurrency_by_tag] Fail to set concurrency"); ok {
		t.Error("a warning parsed as a per-second line")
	}
}

// The driver reads the lines at the times of their log stamps here.
func brpcLines(t *testing.T) []timedLine {
	var ls []timedLine
	for _, l := range brpcClientOutput {
		at, err := time.Parse("15:04:05.000000", strings.Fields(l)[1])
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, timedLine{at: at, text: l})
	}
	return ls
}

func TestBrpcWindow(t *testing.T) {
	ls := brpcLines(t)
	at := func(s string) time.Time {
		v, err := time.Parse("15:04:05.000", s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, c := range []struct {
		t0, t1  string
		qps     float64
		avg     time.Duration
		seconds int
	}{
		// The whole run: the first line (qps=0, before bvar's first
		// sample) never counts; the last, 0.96 s after the one before,
		// covers a second within the window's slack.
		{"15:33:15.000", "15:33:19.000", 12920, time.Duration((13079*75 + 12920*75 + 12444*78) * 1000 / (13079 + 12920 + 12444)), 3},
		// A 2 s window from 15:33:16.05: the lines of 17.03 and 18.03 cover
		// its seconds, 18.99 (covering 17.99-18.99) is past its end + slack.
		{"15:33:16.050", "15:33:18.050", 12999.5, 75 * time.Microsecond, 2},
		// A window starting at 16.5: the line of 17.03 covers 16.03-17.03,
		// mostly before it, and does not count.
		{"15:33:16.500", "15:33:18.500", 12920, 75 * time.Microsecond, 1},
	} {
		qps, avg, n, err := brpcWindow(ls, at(c.t0), at(c.t1))
		if err != nil {
			t.Errorf("%s-%s: %v", c.t0, c.t1, err)
			continue
		}
		if qps != c.qps || avg.Round(time.Nanosecond) != c.avg || n != c.seconds {
			t.Errorf("%s-%s: qps %v avg %v over %d s, want %v %v %d", c.t0, c.t1, qps, avg, n, c.qps, c.avg, c.seconds)
		}
	}
	if _, _, _, err := brpcWindow(ls, at("15:33:16.500"), at("15:33:17.400")); err == nil {
		t.Error("a window holding no whole second of the client: no error")
	}
}

func TestParseProcStat(t *testing.T) {
	// /proc/PID/stat of a process whose name holds a space and a ')'.
	stat := "2163 (echo) client) S 2100 2163 2100 0 -1 4194560 1393 0 0 0 250 37 0 0 20 0 12 0 47100 1061113856 3072 18446744073709551615 1 1 0 0 0 0 0 4096 17000 0 0 0 17 1 0 0 0 0 0\n"
	got, err := parseProcStat(stat, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if want := 2870 * time.Millisecond; got != want {
		t.Errorf("utime+stime %v, want %v", got, want)
	}
	if _, err := parseProcStat("2163 (x) S 1 2", 10*time.Millisecond); err == nil {
		t.Error("a short stat line: no error")
	}
	if runtime.GOOS == "linux" {
		if _, err := processCPUOf(os.Getpid()); err != nil {
			t.Errorf("this process's CPU time: %v", err)
		}
	}
}

func TestSelectFrameworksWithoutBrpc(t *testing.T) {
	t.Setenv(brpcDirEnv, "")
	*frameworks = "gobrpc-single,gobrpc-brpc,brpc-brpc,rawtcp,brpc-gobrpc"
	defer func() { *frameworks = Flags.Lookup("frameworks").DefValue }()
	var log bytes.Buffer
	fws, err := selectFrameworks(&log)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(fws, ","); got != "gobrpc-single,rawtcp" {
		t.Errorf("frameworks %s", got)
	}
	if n := strings.Count(log.String(), "\n"); n != 1 || !strings.Contains(log.String(), brpcDirEnv) {
		t.Errorf("log %q: want one line naming %s", log.String(), brpcDirEnv)
	}
}

// A report with brpc's rows: the unmeasured columns read "-", the ratios
// to brpc-brpc are there.
func TestReportWithBrpc(t *testing.T) {
	fws := []string{"gobrpc-single", "grpc", "gobrpc-brpc", "brpc-brpc", "brpc-gobrpc"}
	sc := scenario{payload: 16, callers: 1}
	res := map[string][]runResult{}
	for i, fw := range fws {
		calls := int64(10000 * (i + 1))
		r := runResult{calls: calls, elapsed: time.Second, avg: 80 * time.Microsecond,
			p50: 70 * time.Microsecond, p99: 120 * time.Microsecond, p999: 200 * time.Microsecond,
			cli: usage{cpu: 300 * time.Millisecond, mallocs: uint64(3 * calls)}, srv: usage{cpu: 400 * time.Millisecond, mallocs: uint64(4 * calls)}}
		cf := clientFrameworks[fw]
		if cf.dial == nil {
			r.external, r.cli.noMallocs = true, true
		}
		if cf.server == brpcServerRole {
			r.srv.noMallocs = true
		}
		res[fw] = []runResult{r}
	}
	var b bytes.Buffer
	printLegend(&b, fws)
	printScenario(&b, sc, fws, res)
	printSummary(&b, []scenario{sc}, fws, map[scenario]map[string][]runResult{sc: res})
	out := b.String()
	for _, want := range []string{"QPS/brpc", "== summary: QPS (x brpc)", "== summary: avg µs (x brpc)", "== summary: p99 µs (x brpc)", "no p50 (-)"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	seen := map[string]bool{}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) < 6 || !strings.HasPrefix(l, f[0]+" ") {
			continue // not a row
		}
		seen[f[0]] = true
		switch f[0] {
		case "brpc-brpc":
			// QPS avg p50 p99 p999: no p50; p99 and p999 from its recorder.
			if f[1] != "40000" || f[2] != "80.0" || f[3] != "-" || f[4] != "120.0" || f[5] != "200.0" {
				t.Errorf("brpc-brpc row %q", l)
			}
			if !strings.Contains(l, "- (-+-)") || !strings.HasSuffix(l, "1.00     1.00     1.00     1.00") {
				t.Errorf("brpc-brpc row %q: want allocations - (-+-) and ratios 1.00 to itself", l)
			}
		case "gobrpc-brpc":
			if !strings.Contains(l, "- (3.0+-)") || f[3] != "70.0" {
				t.Errorf("gobrpc-brpc row %q", l)
			}
		case "brpc-gobrpc":
			if !strings.Contains(l, "- (-+4.0)") {
				t.Errorf("brpc-gobrpc row %q", l)
			}
		}
	}
	for _, fw := range fws {
		if !seen[fw] {
			t.Errorf("no row of %s:\n%s", fw, out)
		}
	}
}
