package backup

import (
	"fmt"
	"log/slog"
	"math"
	"sync/atomic"
	"time"

	"github.com/gobrpc/gobrpc/bvar"
	"github.com/gobrpc/gobrpc/controller"
)

// RateLimitedOptions configure a RateLimitedPolicy (brpc's
// RateLimitedBackupPolicyOptions, plus Strict and Name).
type RateLimitedOptions struct {
	// BackupRequestMs is the backup delay; -1 inherits the channel's
	// BackupRequestMs. Must be >= -1.
	BackupRequestMs int32
	// MaxBackupRatio is the largest ratio of backups to completed RPCs
	// over the window, in (0, 1]. A backup is allowed while the ratio is
	// below it.
	MaxBackupRatio float64
	// WindowSizeSeconds is the sliding window, in [1, 3600].
	WindowSizeSeconds int
	// UpdateIntervalSeconds is how often the cached ratio is recomputed,
	// >= 1. Larger than the window is allowed (with a warning).
	UpdateIntervalSeconds int
	// Strict also caps the backups of each second at max(1,
	// MaxBackupRatio × RPCs completed so far in that second): every
	// completed RPC earns MaxBackupRatio of a backup, a backup spends one,
	// and the sampler resets the budget to one backup each second. The
	// window ratio alone lets a stall that follows fast traffic back up
	// every call until the window slides past the fast seconds; strict
	// mode bounds every second but the one the stall starts in.
	Strict bool
	// Name, when set, exposes the policy's variables as <Name>_backup_ratio
	// (the cached ratio) and, in strict mode, <Name>_backup_budget.
	Name string
}

// DefaultRateLimitedOptions returns brpc's defaults: inherit the delay,
// ratio 0.1, a 10 s window refreshed every 5 s.
func DefaultRateLimitedOptions() RateLimitedOptions {
	return RateLimitedOptions{BackupRequestMs: -1, MaxBackupRatio: 0.1, WindowSizeSeconds: 10, UpdateIntervalSeconds: 5}
}

// RateLimitedPolicy allows a backup while backups / completed RPCs over a
// sliding window stays below a maximum, as brpc's RateLimitedBackupPolicy.
//
// The hot path (DoBackup) is two atomic loads, plus one Adder write when
// it allows: the ratio is cached, and recomputed at most once per update
// interval by the one caller that wins a compare-and-swap. Time comes from
// the bvar sampler (which also fills the windows), so tests drive it with
// bvar.SetManualSampling and bvar.SampleAt.
type RateLimitedPolicy struct {
	opts RateLimitedOptions

	total, backups       *bvar.Adder[int64]  // completed RPCs, backups decided
	totalWin, backupWin  *bvar.Window[int64] // the same over the window
	hook                 *bvar.SampleHook
	cachedRatio          atomic.Uint64 // float64 bits
	refreshDue           atomic.Bool   // set by the sampler once per update interval
	lastRefreshNs        int64         // sampler goroutine only
	budget               *secondBudget // strict: backups left this second
	refreshes            atomic.Int64  // how many times the ratio was recomputed
	ratioVar, budgetVar  *bvar.PassiveStatus[float64]
	closed               atomic.Bool
	intervalNs, windowNs int64
}

var _ Policy = (*RateLimitedPolicy)(nil)

// NewRateLimitedPolicy validates o and returns a policy (brpc's
// CreateRateLimitedBackupPolicy, with an error naming the bad option
// instead of NULL). Close it when no channel uses it any more.
func NewRateLimitedPolicy(o RateLimitedOptions) (*RateLimitedPolicy, error) {
	switch {
	case o.BackupRequestMs < -1:
		return nil, fmt.Errorf("backup: RateLimitedOptions.BackupRequestMs = %d, want >= -1", o.BackupRequestMs)
	case !(o.MaxBackupRatio > 0 && o.MaxBackupRatio <= 1):
		return nil, fmt.Errorf("backup: RateLimitedOptions.MaxBackupRatio = %v, want (0, 1]", o.MaxBackupRatio)
	case o.WindowSizeSeconds < 1 || o.WindowSizeSeconds > bvar.MaxWindowSize:
		return nil, fmt.Errorf("backup: RateLimitedOptions.WindowSizeSeconds = %d, want [1, %d]", o.WindowSizeSeconds, bvar.MaxWindowSize)
	case o.UpdateIntervalSeconds < 1:
		return nil, fmt.Errorf("backup: RateLimitedOptions.UpdateIntervalSeconds = %d, want >= 1", o.UpdateIntervalSeconds)
	}
	if o.UpdateIntervalSeconds > o.WindowSizeSeconds {
		slog.Warn("backup: the ratio's update interval is longer than its window",
			"UpdateIntervalSeconds", o.UpdateIntervalSeconds, "WindowSizeSeconds", o.WindowSizeSeconds)
	}
	p := &RateLimitedPolicy{
		opts:       o,
		total:      bvar.NewAdder[int64](""),
		backups:    bvar.NewAdder[int64](""),
		intervalNs: int64(o.UpdateIntervalSeconds) * int64(time.Second),
		windowNs:   int64(o.WindowSizeSeconds) * int64(time.Second),
	}
	var err error
	if p.totalWin, err = bvar.NewWindow("", p.total, o.WindowSizeSeconds); err != nil {
		return nil, err
	}
	if p.backupWin, err = bvar.NewWindow("", p.backups, o.WindowSizeSeconds); err != nil {
		p.totalWin.Close()
		return nil, err
	}
	p.refreshDue.Store(true) // the first call computes the ratio, as brpc's
	p.budget = newSecondBudget(o.MaxBackupRatio)
	p.budget.startWithOne() // strict: one backup until the first tick
	p.hook = bvar.NewSampleHook(p.tick)
	if o.Name != "" {
		if p.ratioVar, err = bvar.NewPassiveStatus(o.Name+"_backup_ratio", p.Ratio); err != nil {
			p.Close()
			return nil, err
		}
		if o.Strict {
			if p.budgetVar, err = bvar.NewPassiveStatus(o.Name+"_backup_budget",
				p.budget.backups); err != nil {
				p.Close()
				return nil, err
			}
		}
	}
	return p, nil
}

// tick runs once a second on the sampler, after the windows were sampled:
// it marks the ratio due for a refresh once per update interval and, in
// strict mode, starts the new second's budget at one backup (unspent
// budget does not carry over).
func (p *RateLimitedPolicy) tick(now time.Time) {
	ns := now.UnixNano()
	switch {
	case p.lastRefreshNs == 0: // the first call refreshes anyway; the interval starts here
		p.lastRefreshNs = ns
	case ns-p.lastRefreshNs >= p.intervalNs:
		p.lastRefreshNs = ns
		p.refreshDue.Store(true)
	}
	if p.opts.Strict {
		p.budget.startWithOne()
	}
}

// GetBackupRequestMs returns the configured delay (-1: the channel's).
func (p *RateLimitedPolicy) GetBackupRequestMs(*controller.Controller) int32 {
	return p.opts.BackupRequestMs
}

// DoBackup allows a backup while the cached ratio is below the maximum
// (and, in strict mode, this second's budget lasts). An allowed backup is
// counted at once.
func (p *RateLimitedPolicy) DoBackup(*controller.Controller) bool {
	if p.refreshDue.Load() && p.refreshDue.CompareAndSwap(true, false) {
		p.refresh()
	}
	if math.Float64frombits(p.cachedRatio.Load()) >= p.opts.MaxBackupRatio {
		return false
	}
	if p.opts.Strict && !p.budget.spend() {
		return false
	}
	p.backups.Add(1)
	return true
}

// refresh recomputes the cached ratio (brpc's ShouldAllow, winner side).
func (p *RateLimitedPolicy) refresh() {
	p.refreshes.Add(1)
	total, backups := p.totalWin.Get(), p.backupWin.Get()
	if total <= 0 { // cold start or an idle window: lifetime counts
		total, backups = p.total.Get(), p.backups.Get()
	}
	ratio := 0.0
	switch {
	case total > 0:
		ratio = float64(backups) / float64(total)
	case backups > 0:
		ratio = 1 // backups outstanding, nothing completed: be conservative
	}
	p.cachedRatio.Store(math.Float64bits(ratio))
}

// OnRPCEnd counts a completed RPC (and, in strict mode, adds its share to
// this second's budget).
func (p *RateLimitedPolicy) OnRPCEnd(*controller.Controller) {
	p.total.Add(1)
	if p.opts.Strict {
		p.budget.earn()
	}
}

// Ratio is the cached ratio of backups to completed RPCs.
func (p *RateLimitedPolicy) Ratio() float64 { return math.Float64frombits(p.cachedRatio.Load()) }

// Options returns the policy's options.
func (p *RateLimitedPolicy) Options() RateLimitedOptions { return p.opts }

// Close stops the policy's sampling and hides its variables. A closed
// policy keeps answering with its last ratio.
func (p *RateLimitedPolicy) Close() {
	if p.closed.Swap(true) {
		return
	}
	p.hook.Close()
	p.totalWin.Close()
	p.backupWin.Close()
	if p.ratioVar != nil {
		p.ratioVar.Hide()
	}
	if p.budgetVar != nil {
		p.budgetVar.Hide()
	}
}
