// Command rate_limited_backup shows what -backup_request_max_ratio does
// during a latency spike. It starts local echo servers, drives them with
// closed-loop callers through two channels that back up after
// -backup_request_ms (A: unlimited, B: with the ratio limit), makes every
// request slow for -spike_s seconds, and prints, second by second, side
// by side, the share of calls that sent a backup and the p99 latency.
//
//	go run ./example/rate_limited_backup
//	go run ./example/rate_limited_backup -strict=false   # brpc's best-effort mode
//
// A and B run one after the other on separate servers, each for
// -duration_s seconds (plus a second of warm-up): on a small machine two
// concurrent runs would compete for the same cores and skew each other.
// The whole demo takes about 35 s with the defaults.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"time"

	"github.com/gobrpc/gobrpc/backup"
	"github.com/gobrpc/gobrpc/channel"
	"github.com/gobrpc/gobrpc/testsupport/loadtest"
)

var (
	durationS  = flag.Int("duration_s", 15, "measured seconds of each run")
	spikeAtS   = flag.Int("spike_at_s", 6, "the spike starts after this many measured seconds")
	spikeS     = flag.Int("spike_s", 4, "seconds the spike lasts")
	spikeMs    = flag.Int("spike_ms", 50, "latency of every request during the spike, ms")
	callers    = flag.Int("callers", 16, "closed-loop callers per run")
	servers    = flag.Int("servers", 3, "local servers per run")
	backupMs   = flag.Int("backup_request_ms", 5, "backup request delay of both channels, ms")
	strict     = flag.Bool("strict", true, "build B in strict mode (sets -backup_request_ratio_strict for B's channel)")
	concurrent = flag.Bool("concurrent", false, "run A and B at the same time instead of one after the other")
)

// normal is the servers' latency outside the spike: 1 ms, 5% at 50 ms.
var normal = loadtest.Profile{Base: time.Millisecond, SlowFraction: 0.05, Slow: 50 * time.Millisecond}

func main() {
	// -backup_request_max_ratio is the framework's flag (package backup,
	// default -1: no limit). This demo defaults it to 0.05 and applies it
	// to B only, through Options.BackupRequestMaxRatio.
	if err := backup.MaxRatioFlag.SetValue(0.05); err != nil {
		log.Fatal(err)
	}
	flag.CommandLine.Lookup("backup_request_max_ratio").DefValue = "0.05"
	flag.Parse()
	ratio := backup.MaxRatioFlag.Get()
	currentRatio = ratio
	if err := backup.MaxRatioFlag.SetValue(-1); err != nil { // A must not inherit it
		log.Fatal(err)
	}
	if *spikeAtS < 0 || *spikeS < 1 || *spikeAtS+*spikeS > *durationS {
		log.Fatalf("want 0 <= -spike_at_s and 1 <= -spike_s with -spike_at_s + -spike_s <= -duration_s (%d)", *durationS)
	}
	spike := loadtest.Profile{Base: time.Duration(*spikeMs) * time.Millisecond}

	var phases []loadtest.Phase
	if *spikeAtS > 0 {
		phases = append(phases, loadtest.Phase{Name: "normal", Seconds: *spikeAtS, Profile: normal})
	}
	phases = append(phases, loadtest.Phase{Name: "SPIKE", Seconds: *spikeS, Profile: spike})
	if rest := *durationS - *spikeAtS - *spikeS; rest > 0 {
		phases = append(phases, loadtest.Phase{Name: "normal", Seconds: rest, Profile: normal})
	}

	mode := "best-effort mode (brpc's): a backup is allowed while backups / calls over the last " +
		flagValue("backup_request_ratio_window_size_s") + " s\n     (refreshed every " +
		flagValue("backup_request_ratio_update_interval_s") + " s) is below the ratio"
	strictMode := loadtest.StrictOff
	if *strict {
		strictMode = loadtest.StrictOn
		mode = "strict mode: the window ratio as in brpc, and in each second at most\n     max(1, ratio x calls completed so far in that second) backups"
	}
	limitDesc := fmt.Sprintf("-backup_request_max_ratio=%g", ratio)
	if ratio <= 0 {
		limitDesc = "no limit either (-backup_request_max_ratio=-1)"
		mode = "unlimited"
	}

	order := "one after the other (A, then B) on separate servers, so they do not compete for CPU"
	if *concurrent {
		order = "at the same time on separate servers, sharing this machine's CPUs"
	}
	fmt.Printf("Backup requests during a latency spike: unlimited (A) versus %s (B)\n\n", limitDesc)
	fmt.Printf("  %d local servers answer in %v; from second %d to %d (SPIKE) every request takes %v.\n",
		*servers, normal, *spikeAtS+1, *spikeAtS+*spikeS, spike)
	fmt.Printf("  %d closed-loop callers per channel; a call with no answer after %d ms sends a backup to another server.\n",
		*callers, *backupMs)
	fmt.Printf("  A: backups unlimited.  B: %s,\n     %s.\n", limitDesc, mode)
	fmt.Printf("  A and B run %s,\n  %d s each (%s, GOMAXPROCS=%d).\n\n", order, *durationS, runtime.Version(), runtime.GOMAXPROCS(0))
	fmt.Println("  What to look at: in normal seconds both back up ~5% of calls and keep p99 far below the 50 ms")
	fmt.Println("  of the slow requests. During the SPIKE, A backs up nearly every call (bk% ~100, load ~2x: twice")
	fmt.Println("  the requests on servers that are already slow), while B keeps backups near the ratio.")
	fmt.Println("  bk% = backups sent / calls completed in that second; load = requests the servers received / calls.")
	fmt.Println()

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	cfg := func(r float64, s loadtest.StrictMode) loadtest.Config {
		o := channel.DefaultOptions()
		o.TimeoutMs = 1000
		o.BackupRequestMs = int32(*backupMs)
		o.BackupRequestMaxRatio = -1
		if r > 0 {
			o.BackupRequestMaxRatio = r
		}
		return loadtest.Config{Servers: *servers, Callers: *callers, Options: &o, Strict: s,
			WarmupSeconds: 1, Phases: phases}
	}
	var a, b *loadtest.Result
	var errA, errB error
	if *concurrent {
		fmt.Printf("running A and B (%d s)...\n", *durationS+2)
		done := make(chan struct{})
		go func() {
			defer close(done)
			b, errB = loadtest.Run(ctx, cfg(ratio, strictMode))
		}()
		a, errA = loadtest.Run(ctx, cfg(-1, loadtest.StrictFromFlag))
		<-done
	} else {
		fmt.Printf("running A (%d s)...\n", *durationS+2)
		a, errA = loadtest.Run(ctx, cfg(-1, loadtest.StrictFromFlag))
		if errA == nil {
			fmt.Printf("running B (%d s)...\n", *durationS+2)
			b, errB = loadtest.Run(ctx, cfg(ratio, strictMode))
		}
	}
	for _, err := range []error{errA, errB} {
		if err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println()
	printTable(a, b)
	fmt.Println()
	printSummary(a, b)
}

func flagValue(name string) string {
	if f := flag.Lookup(name); f != nil {
		return f.Value.String()
	}
	return "?"
}

const colW = 31 // width of one run's columns

func printTable(a, b *loadtest.Result) {
	fmt.Printf("%-12s | %-*s | %-*s\n", "", colW, "A: unlimited backups", colW, "B: "+limitLabel())
	fmt.Printf("%3s  %-7s | %7s %6s %6s %8s | %7s %6s %6s %8s\n",
		"sec", "phase", "calls", "bk%", "load", "p99 ms", "calls", "bk%", "load", "p99 ms")
	fmt.Println(strings.Repeat("-", 12) + "-+-" + strings.Repeat("-", colW) + "-+-" + strings.Repeat("-", colW))
	for i := range max(len(a.Seconds), len(b.Seconds)) {
		var phase string
		cells := [2]string{}
		for j, r := range []*loadtest.Result{a, b} {
			if i >= len(r.Seconds) {
				cells[j] = strings.Repeat(" ", colW)
				continue
			}
			s := r.Seconds[i]
			phase = s.Phase
			cells[j] = fmt.Sprintf("%7d %5.1f%% %5.2fx %8.1f", s.Calls, 100*s.BackupRatio(), s.Load(), msOf(s.P99))
		}
		fmt.Printf("%3d  %-7s | %s | %s\n", i+1, phase, cells[0], cells[1])
	}
}

func limitLabel() string {
	if r := currentRatio; r > 0 {
		s := fmt.Sprintf("max ratio %g", r)
		if *strict {
			return s + ", strict"
		}
		return s + ", best effort"
	}
	return "unlimited too"
}

// currentRatio is B's ratio (-1: no limit), for labels.
var currentRatio float64

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func printSummary(a, b *loadtest.Result) {
	fmt.Println("Summary")
	fmt.Printf("  %-38s %8s %7s %7s %8s %8s\n", "", "calls", "bk%", "load", "p50 ms", "p99 ms")
	for _, row := range []struct {
		name string
		r    *loadtest.Result
	}{{"A: unlimited backups", a}, {"B: " + limitLabel(), b}} {
		for _, ph := range []string{"normal", "SPIKE"} {
			s := row.r.Phase(ph)
			fmt.Printf("  %-38s %8d %6.1f%% %6.2fx %8.2f %8.2f\n", row.name+", "+ph, s.Calls,
				100*s.BackupRatio(), s.Load(), msOf(s.P50), msOf(s.P99))
		}
	}
	fmt.Println()
	sa, sb := a.Phase("SPIKE"), b.Phase("SPIKE")
	fmt.Printf("  During the SPIKE, A sent %d backups for %d calls (%.0f%%): the servers got %.2fx the requests.\n",
		sa.Backups, sa.Calls, 100*sa.BackupRatio(), sa.Load())
	fmt.Printf("  B sent %d backups for %d calls (%.1f%%): %.2fx.", sb.Backups, sb.Calls, 100*sb.BackupRatio(), sb.Load())
	if start := b.PhaseStart("SPIKE"); start >= 0 && *strict && currentRatio > 0 {
		worst := 0.0
		for i := start + 1; i < len(b.Seconds) && b.Seconds[i].Phase == "SPIKE"; i++ {
			worst = max(worst, b.Seconds[i].BackupRatio())
		}
		fmt.Printf(" Worst SPIKE second after the first: %.1f%%.", 100*worst)
	}
	fmt.Println()
	if !*strict && currentRatio > 0 {
		fmt.Println("  Best-effort mode: the window still holds the fast seconds before the spike, so the ratio looks")
		fmt.Println("  low and B may back up every call until a refresh sees the spike; afterwards the window holds")
		fmt.Println("  the spike's backups and B may refuse every backup for a while. -strict bounds every second.")
	}
}
