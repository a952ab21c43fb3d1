package backup

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/gobrpc/gobrpc/bvar"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// manual drives the bvar sampler (and so the policy's clock) by hand.
func manual(t *testing.T) func(d time.Duration) {
	bvar.SetManualSampling(true)
	t.Cleanup(func() { bvar.SetManualSampling(false) })
	now := time.Unix(2_000_000, 0)
	bvar.SampleAt(now)
	return func(d time.Duration) {
		now = now.Add(d)
		bvar.SampleAt(now)
	}
}

func newPolicy(t *testing.T, mutate func(*RateLimitedOptions)) *RateLimitedPolicy {
	o := DefaultRateLimitedOptions()
	if mutate != nil {
		mutate(&o)
	}
	p, err := NewRateLimitedPolicy(o)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

func TestValidation(t *testing.T) {
	cases := map[string]struct {
		mutate func(*RateLimitedOptions)
		field  string
	}{
		"ms -2":          {func(o *RateLimitedOptions) { o.BackupRequestMs = -2 }, "BackupRequestMs"},
		"ratio 0":        {func(o *RateLimitedOptions) { o.MaxBackupRatio = 0 }, "MaxBackupRatio"},
		"ratio -0.1":     {func(o *RateLimitedOptions) { o.MaxBackupRatio = -0.1 }, "MaxBackupRatio"},
		"ratio 1.001":    {func(o *RateLimitedOptions) { o.MaxBackupRatio = 1.001 }, "MaxBackupRatio"},
		"window 0":       {func(o *RateLimitedOptions) { o.WindowSizeSeconds = 0 }, "WindowSizeSeconds"},
		"window 3601":    {func(o *RateLimitedOptions) { o.WindowSizeSeconds = 3601 }, "WindowSizeSeconds"},
		"interval 0":     {func(o *RateLimitedOptions) { o.UpdateIntervalSeconds = 0 }, "UpdateIntervalSeconds"},
		"an empty value": {func(o *RateLimitedOptions) { *o = RateLimitedOptions{} }, "MaxBackupRatio"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			o := DefaultRateLimitedOptions()
			tc.mutate(&o)
			p, err := NewRateLimitedPolicy(o)
			assert.Nil(t, p)
			assert.ErrorContains(t, err, tc.field)
		})
	}
	// Valid edges, and an interval longer than the window (a warning only).
	for _, mutate := range []func(*RateLimitedOptions){
		func(o *RateLimitedOptions) { o.MaxBackupRatio = 1 },
		func(o *RateLimitedOptions) { o.WindowSizeSeconds = 3600 },
		func(o *RateLimitedOptions) { o.WindowSizeSeconds = 1; o.UpdateIntervalSeconds = 5 },
		func(o *RateLimitedOptions) { o.BackupRequestMs = 0 },
	} {
		newPolicy(t, mutate)
	}
}

func TestGetBackupRequestMsReturnsAsIs(t *testing.T) {
	assert.Equal(t, int32(-1), newPolicy(t, nil).GetBackupRequestMs(nil))
	assert.Equal(t, int32(7), newPolicy(t, func(o *RateLimitedOptions) { o.BackupRequestMs = 7 }).GetBackupRequestMs(nil))
}

func TestColdStartAllowsThenOutstandingBackupsRefuse(t *testing.T) {
	tick := manual(t)
	p := newPolicy(t, func(o *RateLimitedOptions) { o.WindowSizeSeconds = 1; o.UpdateIntervalSeconds = 1 })
	assert.True(t, p.DoBackup(nil), "cold start")
	tick(time.Second)
	tick(time.Second)
	// One backup, nothing completed: the ratio is 1.0, which is not below 0.1.
	assert.False(t, p.DoBackup(nil))
	assert.Equal(t, 1.0, p.Ratio())
}

func TestRatioBelowMaxAllows(t *testing.T) {
	tick := manual(t)
	p := newPolicy(t, func(o *RateLimitedOptions) {
		o.MaxBackupRatio = 0.5
		o.WindowSizeSeconds = 1
		o.UpdateIntervalSeconds = 1
	})
	for range 20 {
		p.backups.Add(1) // 20 backups decided
	}
	for range 50 {
		p.OnRPCEnd(nil)
	}
	tick(time.Second)
	assert.True(t, p.DoBackup(nil))
	assert.InDelta(t, 0.4, p.Ratio(), 1e-9)

	// 30 more backups and no completion push the ratio to 1.0.
	for range 30 {
		p.backups.Add(1)
	}
	tick(time.Second)
	assert.False(t, p.DoBackup(nil))
}

// Under 8 goroutines calling DoBackup for a whole interval, the ratio is
// recomputed once per interval.
func TestRefreshIsElectedOncePerInterval(t *testing.T) {
	tick := manual(t)
	p := newPolicy(t, func(o *RateLimitedOptions) { o.UpdateIntervalSeconds = 2; o.MaxBackupRatio = 1 })
	p.DoBackup(nil) // the first refresh
	require.Equal(t, int64(1), p.refreshes.Load())
	for second := 1; second <= 6; second++ {
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 1000 {
					p.DoBackup(nil)
				}
			}()
		}
		wg.Wait()
		tick(time.Second)
	}
	// The interval starts at the first tick (second 1): seconds 3 and 5
	// made the ratio due again; the one due at 7 waits for the next call.
	assert.Equal(t, int64(3), p.refreshes.Load())
}

// Strict mode: backups in a second are at most max(1, ratio × RPCs
// completed so far in that second).
func TestStrictBudget(t *testing.T) {
	tick := manual(t)
	p := newPolicy(t, func(o *RateLimitedOptions) {
		o.MaxBackupRatio = 0.1
		o.Strict = true
		o.WindowSizeSeconds = 10
		o.UpdateIntervalSeconds = 5
	})
	// Fast traffic fills the window: 1000 RPCs a second, no backups.
	for range 3 {
		for range 1000 {
			p.OnRPCEnd(nil)
		}
		tick(time.Second)
	}
	// A stall: completions fall to 50 a second while every call wants a
	// backup. The window ratio stays low; the budget does not.
	for second := range 5 {
		allowed := 0
		for range 50 {
			for range 4 {
				if p.DoBackup(nil) {
					allowed++
				}
			}
			p.OnRPCEnd(nil)
		}
		assert.LessOrEqual(t, allowed, 6, "second %d: 1 + 0.1 × 50 completed", second)
		assert.GreaterOrEqual(t, allowed, 5, "second %d", second)
		tick(time.Second)
	}
	// Unspent budget does not carry over: a quiet second leaves one.
	tick(time.Second)
	assert.True(t, p.DoBackup(nil))
	assert.False(t, p.DoBackup(nil))
}

func TestBestEffortAllowsAStallToBackUpEveryCall(t *testing.T) {
	tick := manual(t)
	p := newPolicy(t, nil) // ratio 0.1, window 10 s, interval 5 s
	for range 3 {
		for range 1000 {
			p.OnRPCEnd(nil)
		}
		tick(time.Second)
	}
	p.DoBackup(nil)
	allowed := 0
	for range 200 {
		if p.DoBackup(nil) {
			allowed++
		}
	}
	assert.Equal(t, 200, allowed, "brpc's documented best-effort behaviour")
}

func TestNamedPolicyExposesItsRatio(t *testing.T) {
	manual(t)
	p := newPolicy(t, func(o *RateLimitedOptions) { o.Name = "test_policy"; o.Strict = true })
	_, ok := bvar.Describe("test_policy_backup_ratio")
	assert.True(t, ok)
	_, ok = bvar.Describe("test_policy_backup_budget")
	assert.True(t, ok)
	p.Close()
	_, ok = bvar.Describe("test_policy_backup_ratio")
	assert.False(t, ok)
}

// The path taken when backups are being refused (the ratio is at its
// limit): what every call pays during a latency spike.
func BenchmarkDoBackupRefused(b *testing.B) {
	p, _ := NewRateLimitedPolicy(RateLimitedOptions{BackupRequestMs: -1, MaxBackupRatio: 0.1, WindowSizeSeconds: 10, UpdateIntervalSeconds: 5})
	defer p.Close()
	p.DoBackup(nil) // one backup, nothing completed: the ratio becomes 1
	p.refreshDue.Store(true)
	b.ReportAllocs()
	for b.Loop() {
		p.DoBackup(nil)
	}
}

func BenchmarkDoBackupRefusedParallel(b *testing.B) {
	p, _ := NewRateLimitedPolicy(RateLimitedOptions{BackupRequestMs: -1, MaxBackupRatio: 0.1, WindowSizeSeconds: 10, UpdateIntervalSeconds: 5})
	defer p.Close()
	p.DoBackup(nil)
	p.refreshDue.Store(true)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			p.DoBackup(nil)
		}
	})
}

// The path that allows (and counts) a backup.
func BenchmarkDoBackup(b *testing.B) {
	p, _ := NewRateLimitedPolicy(RateLimitedOptions{BackupRequestMs: -1, MaxBackupRatio: 1, WindowSizeSeconds: 10, UpdateIntervalSeconds: 5})
	defer p.Close()
	b.ReportAllocs()
	for b.Loop() {
		p.DoBackup(nil)
	}
}

func BenchmarkDoBackupParallel(b *testing.B) {
	p, _ := NewRateLimitedPolicy(RateLimitedOptions{BackupRequestMs: -1, MaxBackupRatio: 1, WindowSizeSeconds: 10, UpdateIntervalSeconds: 5})
	defer p.Close()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			p.DoBackup(nil)
		}
	})
}
