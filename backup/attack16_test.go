package backup

// attack16: outside-attacker tests of AdaptivePolicy.

import (
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gobrpc/gobrpc/bvar"
	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/internal/ctrl"
)

// a16Ended is ended (adaptive_test.go) with a latency in µs of any size
// and the backup flag.
func a16Ended(us int64, failed, backedUp bool) *controller.Controller {
	c := ended(0, failed)
	st := ctrl.Of(c)
	st.LatencyUs = us
	st.HasBackupRequest = backedUp
	return c
}

// Every bad field is an error naming it, never a panic; extreme but valid
// values are accepted.
func TestAttack16ValidationExtremes(t *testing.T) {
	for _, tc := range []struct {
		o     AdaptiveOptions
		field string
	}{
		{AdaptiveOptions{MaxExtraLoad: math.NaN()}, "MaxExtraLoad"},
		{AdaptiveOptions{MaxExtraLoad: math.Inf(1)}, "MaxExtraLoad"},
		{AdaptiveOptions{MaxExtraLoad: math.Inf(-1)}, "MaxExtraLoad"},
		{AdaptiveOptions{MaxExtraLoad: math.Copysign(0, -1)}, "MaxExtraLoad"},
		{AdaptiveOptions{MaxExtraLoad: 1 + 1e-15}, "MaxExtraLoad"},
		{AdaptiveOptions{MaxExtraLoad: 0.05, MinBackupMs: math.MinInt32}, "MinBackupMs"},
		{AdaptiveOptions{MaxExtraLoad: 0.05, MaxBackupMs: math.MinInt32}, "MaxBackupMs"},
		{AdaptiveOptions{MaxExtraLoad: 0.05, MinBackupMs: math.MaxInt32, MaxBackupMs: 1}, "MaxBackupMs"},
		{AdaptiveOptions{MaxExtraLoad: 0.05, WindowSeconds: math.MaxInt}, "WindowSeconds"},
		{AdaptiveOptions{MaxExtraLoad: 0.05, WindowSeconds: math.MinInt}, "WindowSeconds"},
		{AdaptiveOptions{MaxExtraLoad: 0.05, MinSamples: math.MinInt}, "MinSamples"},
	} {
		var err error
		require.NotPanics(t, func() { _, err = NewAdaptivePolicy(tc.o) }, "%+v", tc.o)
		if assert.Error(t, err, "%+v", tc.o) {
			assert.Contains(t, err.Error(), "AdaptiveOptions."+tc.field)
		}
	}
	for _, o := range []AdaptiveOptions{
		{MaxExtraLoad: 1, MinBackupMs: math.MaxInt32, MaxBackupMs: math.MaxInt32},
		{MaxExtraLoad: 0.05, WindowSeconds: bvar.MaxWindowSize, MinSamples: math.MaxInt},
		{MaxExtraLoad: 0.05, MinSamples: 1},
	} {
		var p *AdaptivePolicy
		var err error
		require.NotPanics(t, func() { p, err = NewAdaptivePolicy(o) })
		require.NoError(t, err, "%+v", o)
		require.NotPanics(t, func() {
			p.OnRPCEnd(a16Ended(1000, false, false))
			p.DoBackup(nil)
			p.Delay()
			p.GetBackupRequestMs(nil)
		})
		p.Close()
	}
}

// Found by the attack: a tiny MaxExtraLoad (below about 1.1e-18, e.g.
// 5e-324) made the default MinSamples, max(100, ceil(10/MaxExtraLoad)),
// overflow int to a negative value, so the first tick trusted a delay of
// 0 with no sample at all; below 2^-20 the budget's per-call deposit
// truncated to 0 and no backup was ever allowed. MaxExtraLoad now starts
// at MinExtraLoad (0.0001), where MinSamples is 100,000 and the deposit
// is 104 units.
func TestAttack16TinyMaxExtraLoadIsRefused(t *testing.T) {
	for _, share := range []float64{1e-19, math.SmallestNonzeroFloat64, 5e-7, MinExtraLoad / 2} {
		_, err := NewAdaptivePolicy(AdaptiveOptions{MaxExtraLoad: share})
		if assert.Error(t, err, "MaxExtraLoad %g", share) {
			assert.Contains(t, err.Error(), "AdaptiveOptions.MaxExtraLoad")
		}
		assert.Error(t, MaxExtraLoadFlag.SetValue(share), "the flag refuses %g too", share)
	}
	next := manual(t)
	p := newAdaptive(t, AdaptiveOptions{MaxExtraLoad: MinExtraLoad})
	assert.Equal(t, 100_000, p.Options().MinSamples)
	next(time.Second) // a tick with no sample at all
	_, ok := p.Delay()
	assert.False(t, ok, "no successful call yet: no delay")
	for range 20_000 {
		p.OnRPCEnd(nil) // completed calls earn 2 backups
	}
	allowed := 0
	for range 10 {
		if p.DoBackup(nil) {
			allowed++
		}
	}
	assert.Equal(t, 1, allowed, "20,000 × 0.0001 earn 1.98 backups in the budget's fixed point: one")
}

// The per-second budget: in every second the backups allowed stay within
// MaxExtraLoad × the calls completed in it + 1 (the carry), with OnRPCEnd,
// DoBackup and the sampler's ticks racing each other.
func TestAttack16BudgetStrictUnderConcurrency(t *testing.T) {
	manual(t)
	const share = 0.05
	p := newAdaptive(t, AdaptiveOptions{MaxExtraLoad: share, MinSamples: 10})
	now := time.Unix(3_000_000, 0)
	for sec := range 20 {
		completions := 200 + 97*sec
		before := p.Backups()
		var wg sync.WaitGroup
		var ended atomic.Int64
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := g; i < completions; i += 4 {
					p.OnRPCEnd(a16Ended(int64(1000+i), i%7 == 0, i%3 == 0))
					ended.Add(1)
					for range 3 { // a stall: every call wants a backup
						p.DoBackup(nil)
					}
				}
			}()
		}
		wg.Wait()
		got := p.Backups() - before
		limit := share*float64(ended.Load()) + 1
		assert.LessOrEqual(t, float64(got), limit, "second %d: %d backups for %d completions", sec, got, ended.Load())
		now = now.Add(time.Second)
		bvar.SampleAt(now)
	}
}

// Calls far slower than an hour, 0 µs calls, and a huge MinBackupMs:
// the delay stays a sane non-negative duration, never an overflow.
func TestAttack16ExtremeLatencies(t *testing.T) {
	next := manual(t)
	p := newAdaptive(t, AdaptiveOptions{MaxExtraLoad: 0.05, MinSamples: 10})
	for range 100 {
		p.OnRPCEnd(a16Ended(math.MaxInt64, false, false))
	}
	next(time.Second)
	d, ok := p.Delay()
	require.True(t, ok)
	assert.Positive(t, d, "a delay after calls of MaxInt64 µs")
	assert.GreaterOrEqual(t, d, time.Hour, "at least the hour the histogram tells apart")
	assert.Positive(t, p.GetBackupRequestMs(nil))

	z := newAdaptive(t, AdaptiveOptions{MaxExtraLoad: 0.05, MinSamples: 10})
	for range 100 {
		z.OnRPCEnd(a16Ended(0, false, false))
	}
	d, ok = z.Delay()
	require.True(t, ok, "the cold start ends after MinSamples calls, before a tick")
	assert.Equal(t, time.Duration(0), d)
	assert.Equal(t, int32(0), z.GetBackupRequestMs(nil))

	big := newAdaptive(t, AdaptiveOptions{MaxExtraLoad: 0.05, MinSamples: 10, MinBackupMs: math.MaxInt32})
	for range 100 {
		big.OnRPCEnd(a16Ended(5, false, false))
	}
	d, ok = big.Delay()
	require.True(t, ok)
	assert.Equal(t, time.Duration(math.MaxInt32)*time.Millisecond, d)
	assert.Equal(t, int32(math.MaxInt32), big.GetBackupRequestMs(nil))
}

// Failed calls are no latency samples, and teach the delay nothing even
// when they are the vast majority.
func TestAttack16FailuresAreNoSamples(t *testing.T) {
	next := manual(t)
	p := newAdaptive(t, AdaptiveOptions{MaxExtraLoad: 0.05, MinSamples: 50})
	for i := range 5000 {
		p.OnRPCEnd(a16Ended(int64(time.Hour/time.Microsecond), true, i%2 == 0))
	}
	next(time.Second)
	_, ok := p.Delay()
	require.False(t, ok, "5000 failures are not 50 successes")
	for range 60 {
		p.OnRPCEnd(a16Ended(1000, false, false))
		p.OnRPCEnd(a16Ended(int64(time.Hour/time.Microsecond), true, false))
	}
	next(time.Second)
	d, ok := p.Delay()
	require.True(t, ok)
	assert.Less(t, d, 2*time.Millisecond, "only the 1 ms successes count")
}

// Close twice, use after Close, racing Close with the calls and ticks: no
// panic, no race (run with -race), no goroutine left (TestMain's goleak).
func TestAttack16CloseRaces(t *testing.T) {
	manual(t)
	for round := range 20 {
		p, err := NewAdaptivePolicy(AdaptiveOptions{MaxExtraLoad: 0.5, MinSamples: 1, Name: "a16_close_race"})
		require.NoError(t, err)
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					p.OnRPCEnd(a16Ended(int64(100+i%1000), i%5 == g, i%2 == 0))
					p.DoBackup(nil)
					p.Delay()
					p.GetBackupRequestMs(nil)
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			now := time.Unix(4_000_000+int64(round)*100, 0)
			for i := range 20 {
				bvar.SampleAt(now.Add(time.Duration(i) * time.Second))
			}
		}()
		time.Sleep(5 * time.Millisecond)
		var cw sync.WaitGroup
		for range 3 {
			cw.Add(1)
			go func() { defer cw.Done(); p.Close() }()
		}
		cw.Wait()
		time.Sleep(2 * time.Millisecond)
		close(stop)
		wg.Wait()
		p.Close()
		_, ok := bvar.Describe("a16_close_race_backup_delay_us")
		assert.False(t, ok, "Close hides the variables")
		// The name is free again.
		q, err := NewAdaptivePolicy(AdaptiveOptions{MaxExtraLoad: 0.5, Name: "a16_close_race"})
		require.NoError(t, err)
		q.Close()
	}
}

// Two policies with one Name: the second is an error that says which name
// is taken, and leaves the first's variables exposed and working.
func TestAttack16NameCollision(t *testing.T) {
	manual(t)
	p := newAdaptive(t, AdaptiveOptions{MaxExtraLoad: 0.5, MinSamples: 1, Name: "a16_dup"})
	_, err := NewAdaptivePolicy(AdaptiveOptions{MaxExtraLoad: 0.5, Name: "a16_dup"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "a16_dup")
	_, ok := bvar.Describe("a16_dup_backup_delay_us")
	assert.True(t, ok, "the first policy keeps its variables")
	_, ok = bvar.Describe("a16_dup_backup_budget")
	assert.True(t, ok)

	// Only the budget's name taken: the delay's must not stay exposed.
	other, err := bvar.NewPassiveStatus("a16_half_backup_budget", func() int64 { return 1 })
	require.NoError(t, err)
	defer other.Hide()
	_, err = NewAdaptivePolicy(AdaptiveOptions{MaxExtraLoad: 0.5, Name: "a16_half"})
	require.Error(t, err)
	_, ok = bvar.Describe("a16_half_backup_delay_us")
	assert.False(t, ok, "a failed NewAdaptivePolicy leaves nothing exposed")

	p.OnRPCEnd(a16Ended(7000, false, false))
	v, _ := bvar.Describe("a16_dup_backup_delay_us")
	us, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	require.NoError(t, err)
	assert.InDelta(t, 7000, us, 7000*0.02, "the first policy's delay, within a histogram bucket")
}

// BUG (low; use after Close): Close stops the ticks, and with them the
// per-second budget's reset, but "a closed policy keeps its last delay"
// and channels that still hold it keep asking. The budget then banks
// MaxExtraLoad × every call completed since Close, without the carry cap
// below one backup: after a quiet spell, a stall gets a burst of backups
// far beyond MaxExtraLoad × the calls completed in its second. Here 10
// seconds of 1000 calls/s bank 500 backups, all allowed in the stall's
// first second, which completed 100 calls (limit 0.05 × 100 + 1 = 6).
func TestAttack16ClosedPolicyBudgetBanks(t *testing.T) {
	next := manual(t)
	p := newAdaptive(t, AdaptiveOptions{MaxExtraLoad: 0.05, MinSamples: 10})
	for range 20 {
		p.OnRPCEnd(a16Ended(1000, false, false))
	}
	_, ok := p.Delay()
	require.True(t, ok)
	p.Close()
	for range 10 { // ten quiet seconds after Close
		for range 1000 {
			p.OnRPCEnd(a16Ended(1000, false, false))
		}
		next(time.Second)
	}
	// The stall's second: 100 calls complete, every one wants a backup.
	before := p.Backups()
	for range 100 {
		p.OnRPCEnd(a16Ended(1000, false, false))
		for range 10 {
			p.DoBackup(nil)
		}
	}
	got := p.Backups() - before
	assert.LessOrEqual(t, got, int64(6), "backups in one second after Close: %d", got)
}
