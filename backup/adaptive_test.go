package backup

import (
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gobrpc/gobrpc/bvar"
	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/internal/ctrl"
)

func newAdaptive(t *testing.T, o AdaptiveOptions) *AdaptivePolicy {
	p, err := NewAdaptivePolicy(o)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

// ended is a Controller as a channel leaves it for OnRPCEnd.
func ended(latency time.Duration, failed bool) *controller.Controller {
	c := controller.New()
	st := ctrl.Of(c)
	st.LatencyUs = latency.Microseconds()
	if failed {
		st.ErrorCode = int32(controller.ERPCTIMEDOUT)
	}
	return c
}

func TestAdaptiveValidationNamesTheField(t *testing.T) {
	for _, tc := range []struct {
		o     AdaptiveOptions
		field string
	}{
		{AdaptiveOptions{}, "MaxExtraLoad"},
		{AdaptiveOptions{MaxExtraLoad: -0.1}, "MaxExtraLoad"},
		{AdaptiveOptions{MaxExtraLoad: 1.5}, "MaxExtraLoad"},
		{AdaptiveOptions{MaxExtraLoad: 0.05, MinBackupMs: -1}, "MinBackupMs"},
		{AdaptiveOptions{MaxExtraLoad: 0.05, MaxBackupMs: -1}, "MaxBackupMs"},
		{AdaptiveOptions{MaxExtraLoad: 0.05, MinBackupMs: 10, MaxBackupMs: 5}, "MaxBackupMs"},
		{AdaptiveOptions{MaxExtraLoad: 0.05, WindowSeconds: -1}, "WindowSeconds"},
		{AdaptiveOptions{MaxExtraLoad: 0.05, WindowSeconds: bvar.MaxWindowSize + 1}, "WindowSeconds"},
		{AdaptiveOptions{MaxExtraLoad: 0.05, MinSamples: -1}, "MinSamples"},
		{AdaptiveOptions{MaxExtraLoad: 0.05, MaxBackups: -1}, "MaxBackups"},
		{AdaptiveOptions{MaxExtraLoad: 0.05, MaxBackups: 9}, "MaxBackups"},
	} {
		_, err := NewAdaptivePolicy(tc.o)
		if assert.Error(t, err, "%+v", tc.o) {
			assert.Contains(t, err.Error(), "AdaptiveOptions."+tc.field)
		}
	}
	p := newAdaptive(t, AdaptiveOptions{MaxExtraLoad: 0.05})
	assert.Equal(t, 200, p.Options().MinSamples, "10 / 5%")
	assert.Equal(t, DefaultAdaptiveWindowSeconds, p.Options().WindowSeconds)
	assert.Equal(t, 1, p.MaxBackupRequests(nil), "one backup, as brpc")
	p2 := newAdaptive(t, AdaptiveOptions{MaxExtraLoad: 0.5})
	assert.Equal(t, 100, p2.Options().MinSamples, "at least 100")
}

// Backups start once MinSamples calls succeeded, before any second ticks;
// failed calls earn budget but teach the delay nothing.
func TestAdaptiveColdStart(t *testing.T) {
	manual(t)
	p := newAdaptive(t, AdaptiveOptions{MaxExtraLoad: 0.05})
	_, ok := p.Delay()
	assert.False(t, ok)
	assert.Equal(t, int32(-1), p.GetBackupRequestMs(nil), "inherit the channel's until trusted")
	for range 1000 {
		p.OnRPCEnd(ended(time.Hour, true))
	}
	_, ok = p.Delay()
	assert.False(t, ok, "failures are no latency samples")
	for i := range 200 {
		// 1.00 .. 1.99 ms: the p95 is about 1.95 ms.
		p.OnRPCEnd(ended(time.Millisecond+time.Duration(i%100)*10*time.Microsecond, false))
	}
	d, ok := p.Delay()
	require.True(t, ok, "200 successes are enough")
	assert.InDelta(t, 1950, float64(d.Microseconds()), 40)
	assert.Equal(t, int32(2), p.GetBackupRequestMs(nil), "rounded up to whole ms")
	got, ok := p.BackupRequestDelay(nil)
	assert.True(t, ok)
	assert.Equal(t, d, got)
}

// The delay follows a shift in latency within a second: the percentile
// reads the last WindowSeconds (3) seconds, not a long window.
func TestAdaptiveDelayFollowsAShift(t *testing.T) {
	tick := manual(t)
	p := newAdaptive(t, AdaptiveOptions{MaxExtraLoad: 0.05})
	rng := rand.New(rand.NewPCG(1, 2))
	second := func(base time.Duration, n int) {
		for range n {
			p.OnRPCEnd(ended(base+time.Duration(rng.IntN(500))*time.Microsecond, false))
		}
		tick(time.Second)
	}
	for range 5 {
		second(time.Millisecond, 5000) // 1.0-1.5 ms
	}
	d, _ := p.Delay()
	assert.InDelta(t, 1475, float64(d.Microseconds()), 50)
	second(5*time.Millisecond, 1000) // 5.0-5.5 ms, at a fifth of the rate
	d, _ = p.Delay()
	assert.GreaterOrEqual(t, d, 5*time.Millisecond, "one second of it: 9%% of the window")
	for range 3 {
		second(5*time.Millisecond, 1000)
	}
	d, _ = p.Delay()
	assert.InDelta(t, 5475, float64(d.Microseconds()), 150, "the window holds only the new latencies")
	// A quiet spell: the percentile reads further back for MinSamples.
	for range 5 {
		second(20*time.Millisecond, 10)
	}
	d, _ = p.Delay()
	assert.InDelta(t, 5475, float64(d.Microseconds()), 150, "50 slow calls are 5%% of the 1050 read")
}

// A call that sent a backup counts as taking the delay: when a little more
// than MaxExtraLoad of the calls are slow, the delay stays where the slow
// ones start instead of climbing among the backed-up calls.
func TestAdaptiveBackedUpCallsCountAtTheDelay(t *testing.T) {
	tick := manual(t)
	p := newAdaptive(t, AdaptiveOptions{MaxExtraLoad: 0.05})
	backedUp := func(latency time.Duration) *controller.Controller {
		c := ended(latency, false)
		ctrl.Of(c).HasBackupRequest = true
		return c
	}
	for range 950 {
		p.OnRPCEnd(ended(time.Millisecond, false))
	}
	for range 50 {
		p.OnRPCEnd(ended(50*time.Millisecond, false))
	}
	tick(time.Second)
	d0, ok := p.Delay()
	require.True(t, ok)
	assert.InDelta(t, 1000, float64(d0.Microseconds()), 20)
	for range 10 {
		// 6% slow, all backed up: answered at delay + 1 ms.
		for range 940 {
			p.OnRPCEnd(ended(time.Millisecond, false))
		}
		for range 60 {
			p.OnRPCEnd(backedUp(d0 + time.Millisecond))
		}
		tick(time.Second)
	}
	d, _ := p.Delay()
	assert.InDelta(t, float64(d0.Microseconds()), float64(d.Microseconds()), 20, "no climb")
}

func TestAdaptiveFloorAndCeiling(t *testing.T) {
	tick := manual(t)
	low := newAdaptive(t, AdaptiveOptions{MaxExtraLoad: 0.1, MinBackupMs: 3})
	high := newAdaptive(t, AdaptiveOptions{MaxExtraLoad: 0.1, MaxBackupMs: 20})
	for range 1000 {
		low.OnRPCEnd(ended(500*time.Microsecond, false))
		high.OnRPCEnd(ended(200*time.Millisecond, false))
	}
	tick(time.Second)
	d, _ := low.Delay()
	assert.Equal(t, 3*time.Millisecond, d)
	d, _ = high.Delay()
	assert.Equal(t, 20*time.Millisecond, d)
}

// A stall: every call wants a backup. Each second sends at most what its
// completions earned (MaxExtraLoad each) plus less than one carried over.
func TestAdaptiveBudgetHoldsEverySecond(t *testing.T) {
	tick := manual(t)
	p := newAdaptive(t, AdaptiveOptions{MaxExtraLoad: 0.05})
	total, totalAllowed := 0, 0
	for second, completions := range []int{1000, 320, 320, 50, 7, 7, 7, 320} {
		allowed := 0
		for range completions {
			for range 3 {
				if p.DoBackup(nil) {
					allowed++
				}
			}
			p.OnRPCEnd(ended(50*time.Millisecond, false))
		}
		assert.LessOrEqual(t, float64(allowed), 0.05*float64(completions)+1, "second %d", second)
		if completions >= 20 {
			assert.GreaterOrEqual(t, float64(allowed), 0.05*float64(completions)-1, "second %d", second)
		}
		total += completions
		totalAllowed += allowed
		tick(time.Second)
	}
	assert.LessOrEqual(t, float64(totalAllowed), 0.05*float64(total), "never more than the share overall")
	assert.GreaterOrEqual(t, float64(totalAllowed), 0.05*float64(total)-1, "fractions carry over: slow seconds still add up")
	assert.Equal(t, int64(totalAllowed), p.Backups())
}

func TestAdaptiveConcurrentUse(t *testing.T) {
	p := newAdaptive(t, AdaptiveOptions{MaxExtraLoad: 0.05, MinSamples: 10})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range 2000 {
				p.OnRPCEnd(ended(time.Duration(i)*time.Microsecond, i%7 == 0))
				p.DoBackup(nil)
				p.BackupRequestDelay(nil)
			}
		})
	}
	wg.Wait()
	_, ok := p.Delay()
	assert.True(t, ok)
	assert.LessOrEqual(t, float64(p.Backups()), 0.05*16000+1)
}

func TestAdaptiveNamedPolicyExposesItsDelay(t *testing.T) {
	manual(t)
	p := newAdaptive(t, AdaptiveOptions{MaxExtraLoad: 0.05, Name: "adaptive_test"})
	v, ok := bvar.Describe("adaptive_test_backup_delay_us")
	require.True(t, ok)
	assert.Equal(t, "0", v)
	for range 200 {
		p.OnRPCEnd(ended(1500*time.Microsecond, false))
	}
	v, _ = bvar.Describe("adaptive_test_backup_delay_us")
	us, err := strconv.Atoi(v)
	require.NoError(t, err)
	assert.InDelta(t, 1500, us, 1500.0/64, "within a histogram bucket")
	_, ok = bvar.Describe("adaptive_test_backup_budget")
	assert.True(t, ok)
	p.Close()
	_, ok = bvar.Describe("adaptive_test_backup_delay_us")
	assert.False(t, ok, "hidden on Close")
	again, err := NewAdaptivePolicy(AdaptiveOptions{MaxExtraLoad: 0.05, Name: "adaptive_test"})
	require.NoError(t, err, "the name is free again")
	again.Close()
}

// When more than MaxExtraLoad of the calls reach the delay, the budget
// refuses some backups; those calls keep their own latency, a sample of
// all that reached the delay, and the delay rises to where MaxExtraLoad of
// the calls lie beyond it.
func TestAdaptiveDelayRisesWhenTheBudgetRefuses(t *testing.T) {
	tick := manual(t)
	p := newAdaptive(t, AdaptiveOptions{MaxExtraLoad: 0.05})
	for range 1000 {
		p.OnRPCEnd(ended(time.Millisecond, false))
	}
	tick(time.Second)
	d0, ok := p.Delay()
	require.True(t, ok)
	assert.InDelta(t, 1000, float64(d0.Microseconds()), 20)
	// Now 4% of calls take 3 ms and 4% take 50 ms: 8% reach a 1 ms delay,
	// 5% may back up. The delay should move into the 3 ms calls (the 50 ms
	// ones alone are fewer than 5%).
	rng := rand.New(rand.NewPCG(3, 4))
	for range 4 {
		for i := range 1000 {
			lat := time.Millisecond
			switch r := rng.IntN(100); {
			case r < 4:
				lat = 3 * time.Millisecond
			case r < 8:
				lat = 50 * time.Millisecond
			}
			d, _ := p.Delay()
			if lat > d && p.DoBackup(nil) {
				c := ended(d+time.Millisecond, false)
				ctrl.Of(c).HasBackupRequest = true
				p.OnRPCEnd(c)
				continue
			}
			_ = i
			p.OnRPCEnd(ended(lat, false))
		}
		tick(time.Second)
	}
	d, _ := p.Delay()
	assert.InDelta(t, 3000, float64(d.Microseconds()), 100, "among the 3 ms calls")
}
