package limiter

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The convergence tests drive each limiter with simServer (sim_test.go):
// M workers taking L each, so the capacity is C = M/L requests per second
// and C×L = M. The offered load is 3×C for overloadFor, then 0.5×C for
// lightFor.

const (
	overloadFor = 30 * time.Second
	lightFor    = 15 * time.Second

	// The documented times (docs/en/concurrency_limiter.md): from the
	// start of a 3×C overload to a limit within 20% of C×L.
	autoSettle = 5 * time.Second
	bbrSettle  = 3 * time.Second
)

type simConfig struct {
	workers int
	latency time.Duration
}

func (c simConfig) String() string {
	return fmt.Sprintf("C=%.0f/s,L=%v", float64(c.workers)/c.latency.Seconds(), c.latency)
}

// overloadThenLight offers 3×C from now on for overloadFor, then 0.5×C for
// lightFor, and returns when the overload started.
func overloadThenLight(t *testing.T, s *simServer) time.Duration {
	t.Helper()
	start := time.Duration(s.now - simStart)
	s.setRate(3 * s.capacity())
	s.run(overloadFor)
	s.setRate(0.5 * s.capacity())
	s.run(lightFor)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("trace (one line per second):\n%s", s.summary())
		}
	})
	return start
}

// assertSettles checks that from settle until the overload ends the limit
// stays within 20% of C×L, and logs the worst deviation.
func assertSettles(t *testing.T, s *simServer, from, to time.Duration) {
	t.Helper()
	worst := 0.0
	for _, p := range s.between(from, to) {
		worst = max(worst, math.Abs(float64(p.limit)/s.cl()-1))
		if !assert.InDelta(t, s.cl(), float64(p.limit), 0.2*s.cl(), "limit at %v (C×L = %.0f)", p.t, s.cl()) {
			return
		}
	}
	t.Logf("limit within %.0f%% of C×L=%.0f from %v to %v", 100*worst, s.cl(), from, to)
}

// admitRatio is the mean of admitted/offered over (from, to].
func admitRatio(s *simServer, from, to time.Duration) float64 {
	sum, n := 0.0, 0
	for _, p := range s.between(from, to) {
		sum += p.admitRatio
		n++
	}
	return sum / float64(n)
}

func meanLimit(s *simServer, from, to time.Duration) float64 {
	sum, n := 0.0, 0
	for _, p := range s.between(from, to) {
		sum += float64(p.limit)
		n++
	}
	return sum / float64(n)
}

// newSimAuto is an auto limiter on the simulator's clock, remeasuring the
// no-load latency every 25 s (so once in each run), with no floor.
func newSimAuto(s *simServer) *autoLimiter {
	return newAuto(s.clock, func(int64) int64 { return 0 }, 1)
}

func TestAutoConverges(t *testing.T) {
	for _, c := range []simConfig{{50, 20 * time.Millisecond}, {100, 10 * time.Millisecond}} {
		t.Run(c.String(), func(t *testing.T) {
			t.Parallel()
			s := newSimServer(c.workers, c.latency, 1)
			a := newSimAuto(s)
			s.lim = a
			firstRemeasureUs := a.remeasureStartUs
			start := overloadThenLight(t, s)
			end := start + overloadFor
			assertSettles(t, s, start+autoSettle, end)
			assert.Greater(t, a.remeasureStartUs, firstRemeasureUs, "the no-load latency was remeasured")
			// The load drops: explore_ratio climbs back to its maximum, so
			// the limit rises above what it was under overload, and
			// nothing is rejected.
			overloaded := meanLimit(s, end-10*time.Second, end)
			risen := 0.0
			for _, p := range s.between(end, end+5*time.Second) {
				risen = max(risen, float64(p.limit))
			}
			assert.Greater(t, risen, 1.1*overloaded, "the limit rises when the load drops")
			assert.GreaterOrEqual(t, admitRatio(s, end, end+10*time.Second), 0.99)
		})
	}
}

// auto measures the no-load latency on a server that is not queueing. A
// server overloaded from its very first request, with C×L below
// -auto_cl_initial_max_concurrency (40), queues from the start; normal
// traffic first lets auto see the no-load latency.
func TestAutoWarmStart(t *testing.T) {
	t.Parallel()
	s := newSimServer(20, 5*time.Millisecond, 1) // C×L = 20
	s.lim = newSimAuto(s)
	s.setRate(0.5 * s.capacity())
	s.run(5 * time.Second)
	start := overloadThenLight(t, s)
	assertSettles(t, s, start+autoSettle, start+overloadFor)
}

// With C×L well above -auto_cl_max_sample_count (200), a window closes
// within a fraction of a latency and its qps is noisy; more samples per
// window keep the limit within 20%. From the initial 40 the limit grows
// at most 30% (max explore ratio) per window, here 1 s: 10× takes 9 s.
// Not parallel: it changes a flag.
func TestAutoLargeCL(t *testing.T) {
	defer func(v int32) { require.NoError(t, autoMaxSampleCount.SetValue(v)) }(autoMaxSampleCount.Get())
	require.NoError(t, autoMaxSampleCount.SetValue(1000))
	s := newSimServer(400, 100*time.Millisecond, 1) // C×L = 400
	s.lim = newSimAuto(s)
	start := overloadThenLight(t, s)
	assertSettles(t, s, start+15*time.Second, start+overloadFor)
}

func TestBBRConverges(t *testing.T) {
	for _, c := range []simConfig{
		{50, 20 * time.Millisecond},
		{30, 5 * time.Millisecond},
		{200, 50 * time.Millisecond},
		{40, 100 * time.Millisecond}, // as slow as a bucket
	} {
		t.Run(c.String(), func(t *testing.T) {
			t.Parallel()
			s := newSimServer(c.workers, c.latency, 1)
			s.lim = newBBR(s.clock)
			start := overloadThenLight(t, s)
			end := start + overloadFor
			assertSettles(t, s, start+bbrSettle, end)
			// The load drops: after a window without overload the limit
			// is lifted, and nothing is rejected.
			lifted := time.Duration(-1)
			for _, p := range s.between(end, end+lightFor) {
				if p.limit == 0 {
					lifted = p.t - end
					break
				}
			}
			assert.True(t, lifted >= 0 && lifted <= bbrWindow+2*time.Second, "lifted %v after the load dropped", lifted)
			assert.Equal(t, int64(0), s.lim.MaxConcurrency())
			assert.GreaterOrEqual(t, admitRatio(s, end+time.Second, end+lightFor), 0.995)
		})
	}
}

// When the overload follows normal traffic the window already holds the
// no-queue latency, and the limit is right within a second.
func TestBBRWarmStart(t *testing.T) {
	t.Parallel()
	s := newSimServer(50, 20*time.Millisecond, 2)
	s.lim = newBBR(s.clock)
	s.setRate(0.5 * s.capacity())
	s.run(10 * time.Second)
	for _, p := range s.trace {
		require.Equal(t, int64(0), p.limit, "no limit under normal load (at %v)", p.t)
		require.Equal(t, 1.0, p.admitRatio)
	}
	start := overloadThenLight(t, s)
	assertSettles(t, s, start+time.Second, start+overloadFor)
}

// The timeout limiter has no C×L estimate: it admits up to its
// max_concurrency while the average latency is below the request's
// timeout, and sheds when it is not.
func TestTimeoutLimiter(t *testing.T) {
	t.Parallel()
	t.Run("loose timeout: a constant max_concurrency", func(t *testing.T) {
		t.Parallel()
		// 60 in flight take 24 ms, under the 30 ms timeout.
		s := newSimServer(50, 20*time.Millisecond, 1)
		s.timeoutMs = 30
		s.lim = newTimeout(500, 60, s.clock)
		overloadThenLight(t, s)
		inflight := 0.0
		points := s.between(time.Second, overloadFor)
		for _, p := range points {
			require.Equal(t, int64(60), p.limit)
			require.LessOrEqual(t, p.inflight, int64(60))
			require.Less(t, p.meanLatency, 30*time.Millisecond, "at %v", p.t)
			inflight += float64(p.inflight)
		}
		assert.Greater(t, inflight/float64(len(points)), 58.0)
		assert.Equal(t, 1.0, admitRatio(s, overloadFor+time.Second, overloadFor+lightFor))
	})
	t.Run("tight timeout: sheds, then reopens", func(t *testing.T) {
		t.Parallel()
		// 100 in flight would take 40 ms, over the 25 ms timeout the
		// client sends (meta field 8); the limiter's own 500 ms does not
		// apply.
		s := newSimServer(50, 20*time.Millisecond, 1)
		s.timeoutMs = 25
		s.lim = newTimeout(500, 100, s.clock)
		overloadThenLight(t, s)
		assert.Less(t, admitRatio(s, time.Second, overloadFor), 0.2, "sheds the overload")
		// brpc would stay shut: lone requests of 20 ms make fewer than
		// -timeout_cl_min_sample_count samples a window. Starved windows
		// count here, so it reopens.
		assert.GreaterOrEqual(t, admitRatio(s, overloadFor+3*time.Second, overloadFor+lightFor), 0.999)
	})
}
