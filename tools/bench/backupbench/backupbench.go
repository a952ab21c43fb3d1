// Package backupbench measures backup requests against local servers
// (testsupport/loadtest), in the scenario brpc's rate-limited backup policy
// was measured with:
//
//   - steady: 3 servers answering in 1 ms, 5% of requests in 50 ms, 16
//     closed-loop callers; no backup, backup after 5 ms, and backup after
//     5 ms with -backup_request_max_ratio=0.05 (best effort), one after the
//     other. Target, from C++ brpc in this scenario (p99 50.3 ms without
//     backups, 6.5 ms with them, 4.9% extra requests): p99 with backups
//     <= 0.15 x p99 without, extra requests <= 5.5%.
//     The adaptive policy (-backup_request_max_extra_load=0.05, no delay
//     configured) runs beside them from a fresh channel. Target: p99 <=
//     0.15 x p99 without, extra requests <= 5.5%, within 5 s of start.
//   - shift: 20 s of that traffic, then 10 s where the normal latency is
//     5 ms instead of 1. Target for the adaptive policy: its delay follows
//     within 5 s and extra requests stay <= MaxExtraLoad every second.
//   - stall: 20 s of that traffic, then 10 s where every request takes
//     50 ms, for unlimited backups, ratio 0.05 best effort, ratio 0.05
//     strict and adaptive 0.05. Target: unlimited backups roughly double
//     the load; strict mode keeps backups <= 6% of calls in every second
//     of the stall but its first, the adaptive policy <= 5%.
//
// Run from tools/bench (the whole run takes about 6 minutes):
//
//	go run ./cmd/backupbench
//	go run ./cmd/backupbench -duration_s 5 -normal_s 5 -stall_s 4   # a quick check
package backupbench

import (
	"context"
	"flag"
	"fmt"
	"io"
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
	scenario  = Flags.String("scenario", "all", "steady, shift, stall or all")
	duration  = Flags.Int("duration_s", 20, "seconds measured per mode in the steady scenario")
	normalS   = Flags.Int("normal_s", 20, "seconds of normal traffic before the stall")
	stallS    = Flags.Int("stall_s", 10, "seconds of the stall")
	shiftS    = Flags.Int("shift_s", 10, "seconds after the shift")
	shiftMs   = Flags.Float64("shift_ms", 5, "normal latency of a request after the shift, ms")
	extraLoad = Flags.Float64("max_extra_load", 0.05, "MaxExtraLoad of the adaptive channels")
	warmupS   = Flags.Int("warmup_s", 1, "unmeasured seconds before each run")
	servers   = Flags.Int("servers", 3, "number of local servers")
	callers   = Flags.Int("callers", 16, "closed-loop callers")
	backupMs  = Flags.Int("backup_ms", 5, "backup_request_ms of the channels with backups")
	maxRatio  = Flags.Float64("max_ratio", 0.05, "BackupRequestMaxRatio of the limited channels")
	baseMs    = Flags.Float64("base_ms", 1, "normal latency of a request, ms")
	slowPct   = Flags.Float64("slow_pct", 5, "percentage of normal requests that are slow")
	slowMs    = Flags.Float64("slow_ms", 50, "latency of a slow request, ms")
	stallMs   = Flags.Float64("stall_ms", 50, "latency of every request during the stall, ms")
	timeoutMs = Flags.Int("timeout_ms", 1000, "RPC timeout, ms")
	perSecond = Flags.Bool("per_second", false, "also print the steady scenario second by second")
)

func ms(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }

func normalProfile() loadtest.Profile {
	return loadtest.Profile{Base: ms(*baseMs), SlowFraction: *slowPct / 100, Slow: ms(*slowMs)}
}

// mode is one channel configuration.
type mode struct {
	name     string
	backupMs int32   // -1: none
	ratio    float64 // <= 0: unlimited
	strict   loadtest.StrictMode
	adaptive float64 // > 0: an AdaptivePolicy with this MaxExtraLoad
	backups  int     // its MaxBackups
}

func adaptiveMode() mode {
	return mode{name: fmt.Sprintf("adaptive %g", *extraLoad), backupMs: -1, adaptive: *extraLoad, backups: 1}
}

func adaptive2Mode() mode {
	return mode{name: fmt.Sprintf("adaptive %g, 2 backups", *extraLoad), backupMs: -1, adaptive: *extraLoad, backups: 2}
}

func (m mode) options() *channel.Options {
	o := channel.DefaultOptions()
	o.TimeoutMs = int32(*timeoutMs)
	o.BackupRequestMs = m.backupMs
	o.BackupRequestMaxRatio = -1
	if m.ratio > 0 {
		o.BackupRequestMaxRatio = m.ratio
	}
	o.BackupRequestMaxExtraLoad = -1
	return &o
}

// Flags are backupbench's flags, parsed by Main. The framework's own flags
// (flag.CommandLine: -backup_request_ratio_window_size_s ...) are accepted
// too.
var Flags = flag.NewFlagSet("backupbench", flag.ExitOnError)

// Main runs the scenarios -scenario names with args (the command line after
// the program and subcommand names).
func Main(args []string) error {
	flag.CommandLine.VisitAll(func(f *flag.Flag) {
		if Flags.Lookup(f.Name) == nil {
			Flags.Var(f.Value, f.Name, f.Usage)
		}
	})
	if err := Flags.Parse(args); err != nil {
		return err
	}
	switch *scenario {
	case "all", "steady", "shift", "stall":
	default:
		return fmt.Errorf("backupbench: -scenario %q: want steady, shift, stall or all", *scenario)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	out := os.Stdout
	fmt.Fprintf(out, "backupbench: %s, GOMAXPROCS=%d, load average %s\n", runtime.Version(), runtime.GOMAXPROCS(0), loadAvg())
	fmt.Fprintf(out, "%d local servers, %d closed-loop callers, one channel per mode (list://, rr, timeout %d ms, max_retry 3)\n\n",
		*servers, *callers, *timeoutMs)
	if *scenario == "all" || *scenario == "steady" {
		if err := steady(ctx, out); err != nil {
			return fmt.Errorf("backupbench steady: %w", err)
		}
	}
	if *scenario == "all" || *scenario == "shift" {
		if err := shift(ctx, out); err != nil {
			return fmt.Errorf("backupbench shift: %w", err)
		}
	}
	if *scenario == "all" || *scenario == "stall" {
		if err := stall(ctx, out); err != nil {
			return fmt.Errorf("backupbench stall: %w", err)
		}
	}
	return nil
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

func run(ctx context.Context, m mode, phases []loadtest.Phase) (*loadtest.Result, error) {
	runtime.GC()
	time.Sleep(300 * time.Millisecond) // let the previous run's connections go
	cfg := loadtest.Config{
		Servers: *servers, Callers: *callers, Options: m.options(), Strict: m.strict,
		WarmupSeconds: *warmupS, Phases: phases,
	}
	if m.adaptive > 0 {
		// A fresh policy per run (what Options.BackupRequestMaxExtraLoad
		// builds, with MaxBackups).
		p, err := backup.NewAdaptivePolicy(backup.AdaptiveOptions{MaxExtraLoad: m.adaptive, MaxBackups: m.backups})
		if err != nil {
			return nil, err
		}
		defer p.Close()
		cfg.Options.BackupRequestPolicy = p
		cfg.BackupDelay = p.Delay
	}
	res, err := loadtest.Run(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.name, err)
	}
	if res.Total.Errors > 0 {
		fmt.Fprintf(os.Stderr, "%s: %d failed calls, first: %s\n", m.name, res.Total.Errors, res.FirstError)
	}
	return res, nil
}

// runAll runs every mode through the same phases, one after the other.
func runAll(ctx context.Context, modes []mode, phases []loadtest.Phase) ([]*loadtest.Result, error) {
	var results []*loadtest.Result
	for _, m := range modes {
		res, err := run(ctx, m, phases)
		if err != nil {
			return nil, err
		}
		results = append(results, res)
	}
	return results, nil
}

func fmtMs(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }

func steady(ctx context.Context, out io.Writer) error {
	p := normalProfile()
	modes := []mode{
		{name: "no backup", backupMs: -1},
		{name: fmt.Sprintf("backup %d ms", *backupMs), backupMs: int32(*backupMs)},
		{name: fmt.Sprintf("backup %d ms, max ratio %g", *backupMs, *maxRatio), backupMs: int32(*backupMs), ratio: *maxRatio, strict: loadtest.StrictOff},
		adaptiveMode(),
		adaptive2Mode(),
	}
	fmt.Fprintf(out, "== steady: servers answer in %v; %d s per mode, run one after the other\n\n", p, *duration)
	results, err := runAll(ctx, modes, []loadtest.Phase{{Name: "steady", Seconds: *duration, Profile: p}})
	if err != nil {
		return err
	}
	var sums []loadtest.Summary
	for _, r := range results {
		sums = append(sums, r.Total)
	}
	if *perSecond {
		fmt.Fprintf(out, "%6s", "")
		for _, m := range modes {
			fmt.Fprintf(out, " | %-31s", m.name)
		}
		fmt.Fprintf(out, "\n%6s", "second")
		for range modes {
			fmt.Fprintf(out, " | %6s %7s %7s %7s", "calls", "backup", "refused", "p99 ms")
		}
		fmt.Fprintln(out)
		for i := range results[0].Seconds {
			fmt.Fprintf(out, "%6d", i+1)
			for _, r := range results {
				if i >= len(r.Seconds) {
					fmt.Fprintf(out, " | %31s", "")
					continue
				}
				s := r.Seconds[i]
				fmt.Fprintf(out, " | %6d %6.1f%% %6.1f%% %7s", s.Calls, 100*s.BackupRatio(), 100*ratio(s.Refused, s.Calls), fmtMs(s.P99))
			}
			fmt.Fprintln(out)
		}
		fmt.Fprintln(out)
	}
	fmt.Fprintf(out, "%-28s %8s %6s %7s %7s %7s %7s %9s %8s %8s %7s\n",
		"mode", "calls", "QPS", "p50 ms", "p99 ms", "p999 ms", "max ms", "extra req", "backups", "refused", "p99/nb")
	for i, s := range sums {
		fmt.Fprintf(out, "%-28s %8d %6.0f %7s %7s %7s %7s %8.2f%% %7.2f%% %7.2f%% %7.3f\n",
			modes[i].name, s.Calls, s.QPS(), fmtMs(s.P50), fmtMs(s.P99), fmtMs(s.P999), fmtMs(s.Max),
			100*s.ExtraLoad(), 100*s.BackupRatio(), 100*ratio(s.Refused, s.Calls), float64(s.P99)/float64(sums[0].P99))
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out, "extra req = requests the servers received / calls - 1; backups (refused) = backups sent (vetoed by the")
	fmt.Fprintln(out, "ratio limit) / calls; p99/nb = p99 / p99 without backup. Percentiles are exact, over every call.")
	fmt.Fprintln(out, "C++ brpc in this scenario: p99 50.3 ms without backups, 6.5 ms with them (0.13x), 4.9% extra requests.")
	for _, i := range []int{1, 2, 3, 4} {
		s := sums[i]
		r := float64(s.P99) / float64(sums[0].P99)
		fmt.Fprintf(out, "target %-28s p99 ratio %.4f <= 0.15: %s; extra requests %.2f%% <= 5.5%%: %s\n",
			modes[i].name+":", r, verdict(r <= 0.15), 100*s.ExtraLoad(), verdict(s.ExtraLoad() <= 0.055))
	}
	// The adaptive channel starts cold (the warm-up second included):
	// its first seconds, and the first 5 measured on their own.
	ad := results[3]
	fmt.Fprintf(out, "%s, from a fresh channel (%d s warm-up): delay per second ", modes[3].name, *warmupS)
	for i := range min(len(ad.Seconds), 6) {
		fmt.Fprintf(out, "%s ", fmtDelay(ad.Seconds[i].BackupDelay))
	}
	first := ad.Summarize(0, min(5, len(ad.Seconds)))
	fr := float64(first.P99) / float64(sums[0].P99)
	fmt.Fprintf(out, "ms\ntarget %-28s first 5 s: p99 ratio %.4f <= 0.15: %s; extra requests %.2f%% <= 5.5%%: %s; p99.9 %s ms\n",
		modes[3].name+":", fr, verdict(fr <= 0.15), 100*first.ExtraLoad(), verdict(first.ExtraLoad() <= 0.055), fmtMs(first.P999))
	fmt.Fprintln(out)
	fmt.Fprintln(out, "backup lateness: how long after its due time (call start + backup delay) each backup left, in µs,")
	fmt.Fprintln(out, "from the channel's <prefix>_backup_lateness LatencyRecorder (its last 10 s). Target p99 <= 200 µs.")
	for _, i := range []int{1, 2, 3, 4} {
		l := results[i].BackupLatenessUs
		fmt.Fprintf(out, "%-28s avg %5d  p90 %5d  p99 %5d  p99.9 %5d  max %5d: %s\n", modes[i].name,
			l.Avg, l.P90, l.P99, l.P999, l.Max, verdict(l.P99 >= 0 && l.P99 <= 200))
	}
	fmt.Fprintln(out)
	return nil
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func verdict(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}

func stall(ctx context.Context, out io.Writer) error {
	p := normalProfile()
	sp := loadtest.Profile{Base: ms(*stallMs)}
	modes := []mode{
		{name: "unlimited", backupMs: int32(*backupMs)},
		{name: fmt.Sprintf("ratio %g best effort", *maxRatio), backupMs: int32(*backupMs), ratio: *maxRatio, strict: loadtest.StrictOff},
		{name: fmt.Sprintf("ratio %g strict", *maxRatio), backupMs: int32(*backupMs), ratio: *maxRatio, strict: loadtest.StrictOn},
		adaptiveMode(),
	}
	fmt.Fprintf(out, "== stall: %d s of %v, then %d s where every request takes %v; backup after %d ms; "+
		"window %s s, refresh every %s s; modes run one after the other\n\n",
		*normalS, p, *stallS, sp, *backupMs, flagValue("backup_request_ratio_window_size_s"), flagValue("backup_request_ratio_update_interval_s"))
	phases := []loadtest.Phase{{Name: "normal", Seconds: *normalS, Profile: p}, {Name: "stall", Seconds: *stallS, Profile: sp}}
	results, err := runAll(ctx, modes, phases)
	if err != nil {
		return err
	}
	// Per second: the last two normal seconds, then the stall.
	fmt.Fprintf(out, "%-8s", "")
	for _, m := range modes {
		fmt.Fprintf(out, " | %-29s", m.name)
	}
	fmt.Fprintf(out, "\n%-8s", "second")
	for range modes {
		fmt.Fprintf(out, " | %6s %6s %7s %6s", "calls", "backup", "bk/call", "load")
	}
	fmt.Fprintln(out)
	start := results[0].PhaseStart("stall")
	for i := max(start-2, 0); i < len(results[0].Seconds); i++ {
		label := fmt.Sprintf("stall %d", i-start+1)
		if i < start {
			label = fmt.Sprintf("normal%+d", i-start)
		}
		fmt.Fprintf(out, "%-8s", label)
		for _, r := range results {
			if i >= len(r.Seconds) {
				fmt.Fprintf(out, " | %29s", "")
				continue
			}
			s := r.Seconds[i]
			fmt.Fprintf(out, " | %6d %6d %6.1f%% %5.2fx", s.Calls, s.Backups, 100*s.BackupRatio(), s.Load())
		}
		fmt.Fprintln(out)
	}
	fmt.Fprintf(out, "%-8s", "stall")
	for _, r := range results {
		s := r.Phase("stall")
		fmt.Fprintf(out, " | %6d %6d %6.1f%% %5.2fx", s.Calls, s.Backups, 100*s.BackupRatio(), s.Load())
	}
	fmt.Fprintf(out, "\n%-8s", "normal")
	for _, r := range results {
		s := r.Phase("normal")
		fmt.Fprintf(out, " | %6d %6d %6.1f%% %5.2fx", s.Calls, s.Backups, 100*s.BackupRatio(), s.Load())
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out)
	fmt.Fprintln(out, "backup = backups sent in that sampler second; bk/call = backups / calls completed in it;")
	fmt.Fprintln(out, "load = requests the servers received / calls completed (the load multiplier; 1.00x = no extra request).")
	u := results[0].Phase("stall")
	fmt.Fprintf(out, "target unlimited: roughly doubles the load during the stall: %.2fx\n", u.Load())
	worst, at := 0.0, 0
	st := results[2]
	for i := st.PhaseStart("stall") + 1; i < len(st.Seconds); i++ {
		if r := st.Seconds[i].BackupRatio(); r >= worst {
			worst, at = r, i-st.PhaseStart("stall")+1
		}
	}
	fmt.Fprintf(out, "target strict: backups <= 6%% of calls in every stall second but the first: worst %.2f%% (stall second %d): %s\n",
		100*worst, at, verdict(worst <= 0.06))
	ad := results[3]
	worstLoad, at := worstExtra(ad, "stall")
	fmt.Fprintf(out, "target %s: extra requests <= %g%% in every stall second but the first: worst %.2f%% (stall second %d): %s\n",
		modes[3].name, 100**extraLoad, 100*worstLoad, at, verdict(worstLoad <= *extraLoad+0.001))
	fmt.Fprint(out, "p99.9 per phase, ms:")
	for i, r := range results {
		fmt.Fprintf(out, "  %s: normal %s, stall %s", modes[i].name, fmtMs(r.Phase("normal").P999), fmtMs(r.Phase("stall").P999))
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out)
	return nil
}

// worstExtra is the largest share of backups per completed call over the
// seconds of a phase after its first, and which second (from 1) it was.
// Backups, not server requests: a request that arrived in the next second
// would move load between seconds.
func worstExtra(r *loadtest.Result, phase string) (worst float64, at int) {
	start := r.PhaseStart(phase)
	for i := start + 1; i < len(r.Seconds) && r.Seconds[i].Phase == phase; i++ {
		if b := r.Seconds[i].BackupRatio(); b >= worst {
			worst, at = b, i-start+1
		}
	}
	return worst, at
}

func fmtDelay(d time.Duration) string {
	if d < 0 {
		return "-"
	}
	return fmtMs(d)
}

// shift: the normal latency moves from base_ms to shift_ms. A fixed delay
// set for the old latency now backs up nearly every call; the adaptive
// policy's delay follows.
func shift(ctx context.Context, out io.Writer) error {
	p := normalProfile()
	sp := p
	sp.Base = ms(*shiftMs)
	modes := []mode{
		{name: "no backup", backupMs: -1},
		{name: fmt.Sprintf("backup %d ms", *backupMs), backupMs: int32(*backupMs)},
		{name: fmt.Sprintf("backup %d ms, ratio %g strict", *backupMs, *maxRatio), backupMs: int32(*backupMs), ratio: *maxRatio, strict: loadtest.StrictOn},
		adaptiveMode(),
	}
	fmt.Fprintf(out, "== shift: %d s of %v, then %d s of %v; modes run one after the other\n\n", *normalS, p, *shiftS, sp)
	phases := []loadtest.Phase{{Name: "normal", Seconds: *normalS, Profile: p}, {Name: "shifted", Seconds: *shiftS, Profile: sp}}
	results, err := runAll(ctx, modes, phases)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%-9s", "")
	for _, m := range modes[1:] {
		fmt.Fprintf(out, " | %-28s", m.name)
	}
	fmt.Fprintf(out, "\n%-9s", "second")
	for range modes[1:] {
		fmt.Fprintf(out, " | %7s %7s %6s %5s", "delay", "p99 ms", "backup", "load")
	}
	fmt.Fprintln(out)
	start := results[0].PhaseStart("shifted")
	for i := max(start-2, 0); i < len(results[0].Seconds); i++ {
		label := fmt.Sprintf("shifted %d", i-start+1)
		if i < start {
			label = fmt.Sprintf("normal%+d", i-start)
		}
		fmt.Fprintf(out, "%-9s", label)
		for k, r := range results[1:] {
			if i >= len(r.Seconds) {
				fmt.Fprintf(out, " | %28s", "")
				continue
			}
			s := r.Seconds[i]
			delay := fmtDelay(s.BackupDelay)
			if modes[k+1].adaptive <= 0 {
				delay = fmt.Sprintf("%d", *backupMs)
			}
			fmt.Fprintf(out, " | %7s %7s %5.1f%% %4.2fx", delay, fmtMs(s.P99), 100*s.BackupRatio(), s.Load())
		}
		fmt.Fprintln(out)
	}
	fmt.Fprintln(out)
	fmt.Fprintf(out, "%-34s %9s %9s %9s %9s %9s %9s\n", "mode", "p99 norm", "p99 shift", "p999 norm", "p999 shift", "extra norm", "extra shift")
	for i, r := range results {
		n, sh := r.Phase("normal"), r.Phase("shifted")
		fmt.Fprintf(out, "%-34s %9s %9s %9s %10s %9.2f%% %10.2f%%\n", modes[i].name, fmtMs(n.P99), fmtMs(sh.P99),
			fmtMs(n.P999), fmtMs(sh.P999), 100*n.ExtraLoad(), 100*sh.ExtraLoad())
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out, "delay = the adaptive policy's delay at the end of the second (ms); backup = backups / calls completed;")
	fmt.Fprintln(out, "load = requests the servers received / calls completed.")
	ad := results[3]
	// Followed: the delay is at least the new normal latency (the p95 of
	// the shifted profile lies at or above it) in every second from the
	// fifth after the shift.
	followed := 0
	for i := start; i < len(ad.Seconds); i++ {
		if ad.Seconds[i].BackupDelay < ms(*shiftMs) {
			followed = 0
			continue
		}
		if followed == 0 {
			followed = i - start + 1
		}
	}
	worst, at := worstExtra(ad, "shifted")
	fmt.Fprintf(out, "target %s: delay >= %v from shifted second %d on (<= 5: %s); backups <= %g%% of calls in every shifted second but the first: worst %.2f%% (second %d): %s\n",
		modes[3].name, ms(*shiftMs), followed, verdict(followed > 0 && followed <= 5), 100**extraLoad, 100*worst, at, verdict(worst <= *extraLoad+0.001))
	fmt.Fprintln(out)
	return nil
}

func flagValue(name string) string {
	if f := flag.Lookup(name); f != nil {
		return f.Value.String()
	}
	return "?"
}
