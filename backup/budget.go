package backup

import "sync/atomic"

// budgetUnit is one backup in a budget, which counts fractions: each
// completed RPC earns a share (MaxBackupRatio, MaxExtraLoad) of a backup.
const budgetUnit = 1 << 20

// secondBudget is the strict per-second allowance of backups: every
// completed RPC earns share of a backup, a backup spends one, and the
// sampler starts a new second once a second. What a second starts with
// is the owner's choice (see start).
type secondBudget struct {
	left    atomic.Int64 // in budgetUnit; may dip below 0 when two spend at once (refused)
	deposit int64        // what one completed RPC earns
}

func newSecondBudget(share float64) *secondBudget {
	return &secondBudget{deposit: int64(share * budgetUnit)}
}

// earn adds one completed RPC's share.
func (b *secondBudget) earn() { b.left.Add(b.deposit) }

// spend takes one backup if the budget holds one.
func (b *secondBudget) spend() bool {
	return b.left.Load() >= budgetUnit && b.left.Add(-budgetUnit) >= 0
}

// startWithOne begins a second with one whole backup (RateLimitedPolicy's strict
// mode: a quiet channel may still send its first backup).
func (b *secondBudget) startWithOne() { b.left.Store(budgetUnit) }

// startWithCarry begins a second with what is left of the last one, less
// than one backup: a second never sends more than its completions earn
// plus that fraction, and at low rates the fractions add up to backups
// across seconds instead of being lost.
func (b *secondBudget) startWithCarry() {
	for {
		old := b.left.Load()
		carry := min(max(old, 0), budgetUnit-1)
		if b.left.CompareAndSwap(old, carry) {
			return
		}
	}
}

// backups is the budget in backups, for a variable.
func (b *secondBudget) backups() float64 { return float64(max(b.left.Load(), 0)) / budgetUnit }
