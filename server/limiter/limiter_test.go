package limiter

import (
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestNew(t *testing.T) {
	for _, c := range []struct {
		spec    string
		want    string // "nil", a limiter type, or "error"
		max     int64  // MaxConcurrency, when a limiter
		errText string
	}{
		{spec: "", want: "nil"},
		{spec: "unlimited", want: "nil"},
		{spec: " Unlimited ", want: "nil"},
		{spec: "0", want: "nil"},
		{spec: "12", want: "*limiter.constant", max: 12},
		{spec: "constant:7", want: "*limiter.constant", max: 7},
		{spec: "auto", want: "*limiter.autoLimiter", max: 40},
		{spec: "AUTO", want: "*limiter.autoLimiter", max: 40},
		{spec: "bbr", want: "*limiter.bbrLimiter", max: 0},
		{spec: "timeout", want: "*limiter.timeoutLimiter", max: 100},
		{spec: "timeout:300", want: "*limiter.timeoutLimiter", max: 100},
		{spec: "timeout:timeout_ms=300,max_concurrency=50", want: "*limiter.timeoutLimiter", max: 50},
		{spec: "-3", want: "error", errText: "negative"},
		{spec: "nosuch", want: "error", errText: "auto, bbr, constant, timeout"},
		{spec: "constant:0", want: "error", errText: "positive integer"},
		{spec: "constant:x", want: "error", errText: "positive integer"},
		{spec: "auto:1", want: "error", errText: "no parameter"},
		{spec: "bbr:1", want: "error", errText: "no parameter"},
		{spec: "timeout:speed=1", want: "error", errText: "unknown timeout parameter"},
		{spec: "timeout:max_concurrency=-1", want: "error", errText: "bad timeout parameter"},
	} {
		t.Run(c.spec, func(t *testing.T) {
			l, err := New(c.spec)
			switch c.want {
			case "nil":
				require.NoError(t, err)
				assert.Nil(t, l)
			case "error":
				require.Error(t, err)
				assert.Nil(t, l)
				assert.Contains(t, err.Error(), c.errText)
			default:
				require.NoError(t, err)
				require.NotNil(t, l)
				assert.Equal(t, c.want, typeName(l))
				assert.Equal(t, c.max, l.MaxConcurrency())
			}
		})
	}
}

func typeName(l Limiter) string {
	switch l.(type) {
	case *constant:
		return "*limiter.constant"
	case *autoLimiter:
		return "*limiter.autoLimiter"
	case *bbrLimiter:
		return "*limiter.bbrLimiter"
	case *timeoutLimiter:
		return "*limiter.timeoutLimiter"
	}
	return "other"
}

func TestTimeoutParam(t *testing.T) {
	l, err := New("timeout:timeout_ms=30,max_concurrency=5")
	require.NoError(t, err)
	tl := l.(*timeoutLimiter)
	assert.Equal(t, int64(30), tl.timeoutMs)
	assert.Equal(t, int64(5), tl.maxConcurrency)
	l, err = New("timeout:250")
	require.NoError(t, err)
	assert.Equal(t, int64(250), l.(*timeoutLimiter).timeoutMs)
	l, err = New("timeout")
	require.NoError(t, err)
	assert.Equal(t, int64(500), l.(*timeoutLimiter).timeoutMs, "-timeout_cl_default_timeout_ms")
}

func TestNames(t *testing.T) {
	names := Names()
	assert.Subset(t, names, []string{"auto", "bbr", "constant", "timeout"})
	assert.IsIncreasing(t, names)
}

// half admits every other request: a user's own limiter.
type half struct {
	mu sync.Mutex
	n  int64
}

func (h *half) OnRequested(int64, Request) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n++
	return h.n%2 == 1
}
func (h *half) OnResponded(int32, time.Duration) {}
func (h *half) MaxConcurrency() int64            { return 0 }

func TestRegister(t *testing.T) {
	var got string
	Register("Half", func(param string) (Limiter, error) {
		got = param
		if param == "bad" {
			return nil, errors.New("bad half")
		}
		return &half{}, nil
	})
	t.Cleanup(func() {
		registry.Lock()
		delete(registry.m, "half")
		registry.Unlock()
	})
	assert.Contains(t, Names(), "half")

	l, err := New("half:x")
	require.NoError(t, err)
	assert.Equal(t, "x", got)
	assert.True(t, l.OnRequested(1, Request{}))
	assert.False(t, l.OnRequested(1, Request{}))

	_, err = New("HALF:bad")
	assert.EqualError(t, err, "bad half")
}

func TestConstant(t *testing.T) {
	l := NewConstant(3)
	for c := int64(1); c <= 3; c++ {
		assert.True(t, l.OnRequested(c, Request{}), "concurrency %d", c)
	}
	assert.False(t, l.OnRequested(4, Request{}))
	l.OnResponded(0, time.Millisecond)
	assert.Equal(t, int64(3), l.MaxConcurrency())
}

func TestGateMask(t *testing.T) {
	for _, c := range []struct {
		events float64
		reads  int64
		want   int64
	}{
		{0, 8, 0}, {15, 8, 0}, {16, 8, 1}, {100, 8, 7}, {1e9, 8, maxGate - 1},
	} {
		assert.Equal(t, c.want, gateMask(c.events, c.reads), "%v events, %d reads", c.events, c.reads)
	}
}

// fakeClock is a manual nanosecond clock.
type fakeClock struct{ ns int64 }

func (c *fakeClock) now() int64              { return c.ns }
func (c *fakeClock) advance(d time.Duration) { c.ns += int64(d) }

func newTestAuto(c *fakeClock) *autoLimiter {
	return newAuto(c.now, func(n int64) int64 { return n / 2 }, 4)
}

func TestAutoSampling(t *testing.T) {
	t.Run("one sample per interval", func(t *testing.T) {
		c := &fakeClock{ns: int64(time.Second)}
		a := newTestAuto(c)
		for range 1000 {
			a.OnResponded(0, time.Millisecond) // all at the same instant
		}
		assert.Equal(t, int64(1), a.sw.succCount)
		assert.Equal(t, int64(1000), a.totalSucc.Load(), "every success counts for the qps")
	})
	t.Run("ELIMIT is not sampled", func(t *testing.T) {
		c := &fakeClock{ns: int64(time.Second)}
		a := newTestAuto(c)
		for range 300 {
			c.advance(time.Millisecond)
			a.OnResponded(elimit, time.Millisecond)
		}
		assert.Zero(t, a.sw.succCount+a.sw.failCount)
		assert.Equal(t, int64(40), a.MaxConcurrency())
	})
	t.Run("a window short of samples is discarded", func(t *testing.T) {
		c := &fakeClock{ns: int64(time.Second)}
		a := newTestAuto(c)
		for range 60 { // 60 samples over 1.2 s: fewer than 100
			c.advance(20 * time.Millisecond)
			a.OnResponded(0, 10*time.Millisecond)
		}
		assert.Less(t, a.sw.succCount, int64(60), "the window restarted")
		assert.Equal(t, int64(-1), a.minLatencyUs, "nothing was submitted")
		assert.Equal(t, int64(40), a.MaxConcurrency())
	})
	t.Run("a window of failures halves the limit", func(t *testing.T) {
		c := &fakeClock{ns: int64(time.Second)}
		a := newTestAuto(c)
		for range 200 {
			c.advance(time.Millisecond)
			a.OnResponded(int32(1008), 10*time.Millisecond) // ERPCTIMEDOUT
		}
		assert.Equal(t, int64(20), a.MaxConcurrency())
		for range 200 * 4 {
			c.advance(time.Millisecond)
			a.OnResponded(int32(1008), 10*time.Millisecond)
		}
		assert.Equal(t, int64(4), a.MaxConcurrency(), "never below the floor")
	})
	t.Run("limit from min latency and qps", func(t *testing.T) {
		c := &fakeClock{ns: int64(time.Second)}
		a := newTestAuto(c)
		// 200 successes of 10 ms, one per ms: qps ~1000, limit
		// 10 ms × 1000/s × (1 + 0.3) = 13.
		for range 200 {
			c.advance(time.Millisecond)
			a.OnResponded(0, 10*time.Millisecond)
		}
		assert.Equal(t, int64(10000), a.minLatencyUs)
		assert.InDelta(t, 1000, a.emaMaxQps, 10)
		assert.Equal(t, int64(13), a.MaxConcurrency())
		assert.True(t, a.OnRequested(13, Request{}))
		assert.False(t, a.OnRequested(14, Request{}))
	})
	t.Run("failed requests punish the latency", func(t *testing.T) {
		c := &fakeClock{ns: int64(time.Second)}
		a := newTestAuto(c)
		for i := range 200 {
			c.advance(time.Millisecond)
			code := int32(0)
			if i%2 == 1 {
				code = 2001 // EINTERNAL
			}
			a.OnResponded(code, 10*time.Millisecond)
		}
		// (100×10 ms + 100×10 ms × 1.0) / 100 successes = 20 ms.
		assert.Equal(t, int64(20000), a.minLatencyUs)
	})
	t.Run("remeasure", func(t *testing.T) {
		c := &fakeClock{ns: int64(time.Second)}
		a := newTestAuto(c)
		step := func() {
			c.advance(time.Millisecond)
			a.OnResponded(0, 10*time.Millisecond)
		}
		// Due 25 + 12.5 s after the start (randN = n/2): the window that
		// closes then lowers the limit to ceil(ema_max_qps × 10 ms × 0.9),
		// ema_max_qps being a little over 1000/s.
		for a.resetLatencyUs == 0 {
			step()
		}
		assert.GreaterOrEqual(t, c.ns, int64(38500*time.Millisecond))
		assert.Less(t, c.ns, int64(38800*time.Millisecond))
		assert.Equal(t, int64(math.Ceil(a.emaMaxQps*0.01*0.9)), a.MaxConcurrency())
		assert.InDelta(t, 9.5, a.MaxConcurrency(), 0.5)
		// 2 × avg latency later, min_latency is forgotten and measured
		// afresh.
		due := a.resetLatencyUs
		for a.resetLatencyUs != 0 {
			step()
		}
		assert.Equal(t, due, c.ns/1000)
		assert.Equal(t, int64(-1), a.minLatencyUs)
		assert.Equal(t, c.ns/1000+37_500_000, a.remeasureStartUs, "the next one is 25..50 s away")
	})
}

func TestTimeoutAdmission(t *testing.T) {
	c := &fakeClock{ns: int64(time.Second)}
	l := newTimeout(100, 10, c.now) // avg starts at 500 µs
	assert.True(t, l.OnRequested(10, Request{TimeoutMs: -1}))
	assert.False(t, l.OnRequested(11, Request{TimeoutMs: -1}), "max_concurrency")
	// A window of 200 samples of 50 ms.
	for range 200 {
		c.advance(time.Millisecond)
		l.OnResponded(0, 50*time.Millisecond)
	}
	assert.Equal(t, int64(50000), l.avgLatencyUs.Load())
	assert.True(t, l.OnRequested(5, Request{TimeoutMs: -1}), "50 ms < the 100 ms default")
	assert.True(t, l.OnRequested(5, Request{}), "0: the client sent no timeout")
	assert.False(t, l.OnRequested(5, Request{TimeoutMs: 40}), "50 ms >= the client's 40 ms")
	assert.True(t, l.OnRequested(1, Request{TimeoutMs: 40}), "a lone request is always admitted")
	assert.True(t, l.OnRequested(5, Request{TimeoutMs: 60}))
	assert.Equal(t, int64(10), l.MaxConcurrency())
}

func TestBBRSaturationScan(t *testing.T) {
	b := newBBR((&fakeClock{ns: int64(time.Hour)}).now)
	t0 := b.rolled
	set := func(deltas ...int64) {
		b.ring = [bbrBuckets]bbrStat{}
		for i, d := range deltas { // the last delta is bucket t0-1
			k := t0 - int64(len(deltas)) + int64(i)
			b.ring[bbrSlot(k)] = bbrStat{admitted: 1000 + d, passes: 1000}
		}
	}
	// 4σ of noise here is 4√2000 ≈ 179: smaller changes are flat.
	for _, c := range []struct {
		deltas []int64
		want   bool
	}{
		{[]int64{500}, true},
		{[]int64{500, -300, 500}, true},        // rising never behind falling
		{[]int64{-300, 500, 500}, false},       // the oldest change fell
		{[]int64{500, -300, -300, 500}, false}, // fell behind on the third
		{[]int64{100, -50, 20}, true},          // flat wobbles, sum 70 ≥ 1
		{[]int64{100, -150}, false},            // sum < 1
		{[]int64{-300, 500, 500, 0, 0, 0}, false},
	} {
		set(c.deltas...)
		assert.Equal(t, c.want, b.saturated(t0), "%v", c.deltas)
	}
	// Only the recent half of the window counts.
	set(append([]int64{-300}, make([]int64, bbrRecent)...)...)
	b.ring[bbrSlot(t0-1)] = bbrStat{admitted: 1500, passes: 1000}
	assert.True(t, b.saturated(t0), "a fall 51 buckets ago is forgotten")
}

// Every limiter is safe for concurrent use (run with -race).
func TestConcurrentUse(t *testing.T) {
	for _, spec := range []string{"10", "auto", "bbr", "timeout"} {
		l, err := New(spec)
		require.NoError(t, err)
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 20000 {
					if l.OnRequested(int64(1+i%12), Request{TimeoutMs: int64(g)}) {
						l.OnResponded(int32(i%3), time.Duration(i%1000)*time.Microsecond)
					}
					_ = l.MaxConcurrency()
				}
			}()
		}
		wg.Wait()
	}
}

func TestProbeMovesAtLeastOne(t *testing.T) {
	cases := []struct {
		base int64
		gain float64
		want int64
	}{
		{4, 1.1, 5}, {4, 0.875, 3}, {4, 1, 4}, {1, 0.875, 1}, {100, 1.1, 110}, {100, 0.875, 88},
	}
	for _, c := range cases {
		if got := probeLimit(c.base, c.gain); got != c.want {
			t.Errorf("probeLimit(%d, %v) = %d, want %d", c.base, c.gain, got, c.want)
		}
	}
}
