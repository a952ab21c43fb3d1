package backup

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gobrpc/gobrpc/bvar"
	"github.com/gobrpc/gobrpc/controller"
)

// AdaptiveOptions configure an AdaptivePolicy. Only MaxExtraLoad is
// required: the zero value of every other field is its default.
type AdaptiveOptions struct {
	// MaxExtraLoad is the extra load accepted, as backups per completed
	// RPC, in [0.0001, 1]: 0.05 allows 5% more requests. The delay is the
	// (1 - MaxExtraLoad) percentile of recent successful latencies (5%
	// extra: backups after the p95), and a strict per-second budget holds
	// the backups to MaxExtraLoad × completed RPCs whatever the latencies.
	MaxExtraLoad float64
	// MinBackupMs is the shortest delay (0: no floor), MaxBackupMs the
	// longest (0: no ceiling; a delay at or beyond a call's timeout never
	// fires). Both >= 0, and MaxBackupMs >= MinBackupMs when set.
	MinBackupMs, MaxBackupMs int32
	// WindowSeconds is how many of the latest whole seconds the percentile
	// reads (with the current second so far), in [1, 3600]; 0 means 3.
	// When they hold fewer than MinSamples successful calls it reads
	// further back, up to a minute (or WindowSeconds if longer). A short
	// window follows a change within a few seconds; at high rates three
	// seconds hold tens of thousands of calls.
	WindowSeconds int
	// MinSamples is how many successful latencies a percentile needs
	// before the policy trusts it; 0 means max(100, 10 / MaxExtraLoad)
	// (200 for 5%): on average 10 of them lie beyond the percentile, so the
	// share of calls that back up is within about a third of MaxExtraLoad
	// (one standard deviation of a count of 10 is 3.2), and the budget
	// bounds it anyway. Until then the channel's own BackupRequestMs
	// applies (none if unset).
	MinSamples int
	// MaxBackups is how many backups one call may send, in [1, 8]; 0
	// means 1 (brpc's single backup). A second one is due one delay after
	// the first and goes to a third server: it rescues the calls whose
	// first attempt and backup are both slow (with 5% slow calls, 0.25% of
	// them: their p99.9), and comes out of the same budget.
	MaxBackups int
	// Name, when set, exposes <Name>_backup_delay_us (the current delay, 0
	// until the first percentile is trusted) and <Name>_backup_budget
	// (backups left this second).
	Name string
}

// AdaptivePolicy sends backups with no delay to configure: it picks the
// delay from the channel's own recent latencies so that about
// MaxExtraLoad of the calls back up, as Finagle's BackupRequestFilter
// does, and a strict per-second budget holds the extra load to
// MaxExtraLoad of the completed calls even when every call is slow (a
// stall downstream cannot double the load). Use one policy per channel:
// its latencies are the channel's.
//
//	p, err := backup.NewAdaptivePolicy(backup.AdaptiveOptions{MaxExtraLoad: 0.05})
//	if err != nil { ... }
//	defer p.Close()
//	opts.BackupRequestPolicy = p
//
// Or without code: -backup_request_max_extra_load=0.05 (or
// channel.Options.BackupRequestMaxExtraLoad).
//
// The delay is recomputed once a second by the bvar sampler (tests drive
// it with bvar.SetManualSampling and bvar.SampleAt), and as soon as the
// first MinSamples calls succeeded, so backups start within a second or
// so of a channel's first traffic, not after a window fills.
type AdaptivePolicy struct {
	opts       AdaptiveOptions
	percentile float64
	minSamples int64
	minUs      int64
	maxUs      int64 // 0: none

	latencies *bvar.Histogram // successful calls
	budget    *secondBudget
	hook      *bvar.SampleHook

	delayUs   atomic.Int64 // the current delay; -1 until a percentile is trusted
	computing atomic.Bool  // one recompute at a time
	ended     atomic.Int64 // calls ended while no delay was trusted (cold start)
	backups   atomic.Int64 // backups allowed
	refusals  atomic.Int64 // backups the budget refused

	// The backups asked for and refused in each of the last
	// WindowSeconds seconds, for recompute.
	countsMu   sync.Mutex
	counts     []backupCounts // ring, one per second
	countsNext int
	countsLast backupCounts // the totals at the latest tick

	delayVar  *bvar.PassiveStatus[int64]
	budgetVar *bvar.PassiveStatus[float64]
	closed    atomic.Bool
}

var (
	_ controller.BackupDelayPolicy = (*AdaptivePolicy)(nil)
	_ controller.MultiBackupPolicy = (*AdaptivePolicy)(nil)
)

// MinExtraLoad is the smallest MaxExtraLoad: one backup per 10,000 calls.
// Below it the default MinSamples (10 / MaxExtraLoad) would need more than
// 100,000 calls to trust a percentile, and a call's share of the budget
// would vanish in its fixed-point unit.
const MinExtraLoad = 0.0001

// DefaultAdaptiveWindowSeconds is AdaptiveOptions.WindowSeconds's default.
const DefaultAdaptiveWindowSeconds = 3

// minRefusedSample is how many refused calls the delay's correction
// needs: with a handful, one value more or less beyond the rank moves the
// delay between clusters of latencies (a few refusals at the start of
// each second, while the new second's budget fills, are common).
const minRefusedSample = 20

// maxAdaptiveBackups bounds AdaptiveOptions.MaxBackups.
const maxAdaptiveBackups = 8

// adaptiveLookbackSeconds is how far back the percentile may read to
// find MinSamples calls.
const adaptiveLookbackSeconds = 60

// NewAdaptivePolicy validates o and returns a policy; an error names the
// bad field. Close it when no channel uses it any more.
func NewAdaptivePolicy(o AdaptiveOptions) (*AdaptivePolicy, error) {
	switch {
	case !(o.MaxExtraLoad >= MinExtraLoad && o.MaxExtraLoad <= 1):
		return nil, fmt.Errorf("backup: AdaptiveOptions.MaxExtraLoad = %v, want [%g, 1]", o.MaxExtraLoad, MinExtraLoad)
	case o.MinBackupMs < 0:
		return nil, fmt.Errorf("backup: AdaptiveOptions.MinBackupMs = %d, want >= 0", o.MinBackupMs)
	case o.MaxBackupMs < 0:
		return nil, fmt.Errorf("backup: AdaptiveOptions.MaxBackupMs = %d, want >= 0 (0: no ceiling)", o.MaxBackupMs)
	case o.MaxBackupMs > 0 && o.MaxBackupMs < o.MinBackupMs:
		return nil, fmt.Errorf("backup: AdaptiveOptions.MaxBackupMs = %d is below MinBackupMs = %d", o.MaxBackupMs, o.MinBackupMs)
	case o.WindowSeconds < 0 || o.WindowSeconds > bvar.MaxWindowSize:
		return nil, fmt.Errorf("backup: AdaptiveOptions.WindowSeconds = %d, want [1, %d] (0: %d)",
			o.WindowSeconds, bvar.MaxWindowSize, DefaultAdaptiveWindowSeconds)
	case o.MaxBackups < 0 || o.MaxBackups > maxAdaptiveBackups:
		return nil, fmt.Errorf("backup: AdaptiveOptions.MaxBackups = %d, want [1, %d] (0: 1)", o.MaxBackups, maxAdaptiveBackups)
	case o.MinSamples < 0:
		return nil, fmt.Errorf("backup: AdaptiveOptions.MinSamples = %d, want >= 0 (0: max(100, 10 / MaxExtraLoad))", o.MinSamples)
	}
	if o.WindowSeconds == 0 {
		o.WindowSeconds = DefaultAdaptiveWindowSeconds
	}
	if o.MaxBackups == 0 {
		o.MaxBackups = 1
	}
	if o.MinSamples == 0 {
		o.MinSamples = int(max(100, math.Ceil(10/o.MaxExtraLoad)))
	}
	latencies, err := bvar.NewHistogram(max(o.WindowSeconds, adaptiveLookbackSeconds))
	if err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	p := &AdaptivePolicy{
		opts:       o,
		percentile: 1 - o.MaxExtraLoad,
		minSamples: int64(o.MinSamples),
		minUs:      int64(o.MinBackupMs) * 1000,
		maxUs:      int64(o.MaxBackupMs) * 1000,
		latencies:  latencies,
		budget:     newSecondBudget(o.MaxExtraLoad),
		counts:     make([]backupCounts, o.WindowSeconds),
	}
	p.delayUs.Store(-1)
	p.hook = bvar.NewSampleHook(p.tick)
	if o.Name != "" {
		if p.delayVar, err = bvar.NewPassiveStatus(o.Name+"_backup_delay_us",
			func() int64 { return max(p.delayUs.Load(), 0) }); err != nil {
			p.Close()
			return nil, err
		}
		if p.budgetVar, err = bvar.NewPassiveStatus(o.Name+"_backup_budget", p.budget.backups); err != nil {
			p.Close()
			return nil, err
		}
	}
	return p, nil
}

// tick runs once a second on the sampler, after the latency window moved:
// a new second of budget, and the delay from the latest latencies.
func (p *AdaptivePolicy) tick(time.Time) {
	p.budget.startWithCarry()
	p.countsMu.Lock()
	total := p.totals()
	p.counts[p.countsNext] = backupCounts{total.asked - p.countsLast.asked, total.refused - p.countsLast.refused}
	p.countsNext = (p.countsNext + 1) % len(p.counts)
	p.countsLast = total
	p.countsMu.Unlock()
	p.recompute()
}

// backupCounts are backups asked for (allowed or refused) and refused.
type backupCounts struct{ asked, refused int64 }

func (p *AdaptivePolicy) totals() backupCounts {
	refused := p.refusals.Load()
	return backupCounts{p.backups.Load() + refused, refused}
}

// recentCounts sums the last WindowSeconds seconds and the current one.
func (p *AdaptivePolicy) recentCounts() backupCounts {
	p.countsMu.Lock()
	defer p.countsMu.Unlock()
	total := p.totals()
	sum := backupCounts{total.asked - p.countsLast.asked, total.refused - p.countsLast.refused}
	for _, c := range p.counts {
		sum.asked += c.asked
		sum.refused += c.refused
	}
	return sum
}

// recompute sets the delay to the (1 - MaxExtraLoad) percentile of the
// most recent successful latencies when at least MinSamples exist (else
// it keeps the last one).
//
// The calls that sent a backup are recorded at the delay (see OnRPCEnd):
// all we know is that their first attempt took at least that long. So
// when more than MaxExtraLoad of the calls reached the delay, the
// percentile lies above it, among values the backups hid. The calls the
// budget refused a backup reached the delay too and kept their own
// latency: they are a random sample of all the calls that reached it, so
// the delay goes where MaxExtraLoad of the calls would lie above it by
// that sample. Without the correction the delay would stay wherever up to
// twice MaxExtraLoad of the calls exceed it, and the budget, not the
// delay, would pick which slow calls back up.
func (p *AdaptivePolicy) recompute() {
	if !p.computing.CompareAndSwap(false, true) {
		return
	}
	defer p.computing.Store(false)
	snap := p.latencies.RecentLatencies(p.minSamples, p.opts.WindowSeconds)
	n := snap.Count()
	if n < p.minSamples {
		return
	}
	us := snap.Percentile(p.percentile)
	if p.delayUs.Load() >= 0 && p.refusals.Load() > 0 {
		// reached: the calls whose delay expired (a backup was asked
		// for); the refused ones kept their own latency, and are the only
		// values above every delay used meanwhile.
		c := p.recentCounts()
		reached := min(c.asked, n)
		if float64(reached) > p.opts.MaxExtraLoad*float64(n) && c.refused >= minRefusedSample {
			// MaxExtraLoad×n of the reached calls should lie beyond the new
			// delay; by the refused sample, that is the top
			// MaxExtraLoad×n × refused/reached of the values.
			beyond := p.opts.MaxExtraLoad * float64(n) * float64(min(c.refused, reached)) / float64(reached)
			us = max(us, snap.AtRank(n-int64(beyond)))
		}
	}
	us = max(us, p.minUs)
	if p.maxUs > 0 {
		us = min(us, p.maxUs)
	}
	p.delayUs.Store(us)
}

// BackupRequestDelay returns the delay: the percentile, or ok false (the
// channel's BackupRequestMs) until one is trusted.
func (p *AdaptivePolicy) BackupRequestDelay(*controller.Controller) (time.Duration, bool) {
	us := p.delayUs.Load()
	if us < 0 {
		return 0, false
	}
	return time.Duration(us) * time.Microsecond, true
}

// GetBackupRequestMs is the delay rounded up to whole milliseconds, for
// callers that only know brpc's interface; -1 (inherit) until a
// percentile is trusted. Channels use BackupRequestDelay.
func (p *AdaptivePolicy) GetBackupRequestMs(*controller.Controller) int32 {
	us := p.delayUs.Load()
	if us < 0 {
		return -1
	}
	return int32(min((us+999)/1000, math.MaxInt32))
}

// MaxBackupRequests is AdaptiveOptions.MaxBackups.
func (p *AdaptivePolicy) MaxBackupRequests(*controller.Controller) int { return p.opts.MaxBackups }

// DoBackup allows a backup while this second's budget holds one; a closed
// policy allows none (its budget no longer starts new seconds).
func (p *AdaptivePolicy) DoBackup(*controller.Controller) bool {
	if p.closed.Load() || !p.budget.spend() {
		p.refusals.Add(1)
		return false
	}
	p.backups.Add(1)
	return true
}

// OnRPCEnd earns the budget its share and records a successful call's
// latency. During the cold start it recomputes the delay every quarter of
// MinSamples ended calls, so that backups start as soon as enough calls
// succeeded rather than at the next second.
//
// A call that sent a backup counts as taking the delay, not its own
// latency: its first attempt took at least that long, and how much longer
// the backup hid. Its own latency (delay + the backup's) would put the
// percentile among the backed-up calls whenever slightly more than
// MaxExtraLoad of the calls are slow, and the delay would climb by one
// round trip per recompute; counted at the delay, the percentile stays
// where the slow calls start. Calls the budget refused a backup keep their
// own latency, which is how the delay rises when every call gets slower.
func (p *AdaptivePolicy) OnRPCEnd(cntl *controller.Controller) {
	p.budget.earn()
	if cntl != nil && !cntl.Failed() {
		us := cntl.LatencyUs()
		if d := p.delayUs.Load(); d >= 0 && cntl.HasBackupRequest() {
			us = min(us, d)
		}
		p.latencies.RecordUs(us)
	}
	if p.delayUs.Load() < 0 && p.ended.Add(1)%max(p.minSamples/4, 1) == 0 {
		p.recompute()
	}
}

// Delay is the current delay; ok is false until a percentile is trusted.
func (p *AdaptivePolicy) Delay() (time.Duration, bool) { return p.BackupRequestDelay(nil) }

// Backups is how many backups the policy allowed.
func (p *AdaptivePolicy) Backups() int64 { return p.backups.Load() }

// Options returns the policy's options, defaults filled in.
func (p *AdaptivePolicy) Options() AdaptiveOptions { return p.opts }

// Close stops the policy's sampling and hides its variables. A closed
// policy keeps its last delay and allows no more backups.
func (p *AdaptivePolicy) Close() {
	if p.closed.Swap(true) {
		return
	}
	p.hook.Close()
	p.latencies.Close()
	if p.delayVar != nil {
		p.delayVar.Hide()
	}
	if p.budgetVar != nil {
		p.budgetVar.Hide()
	}
}
