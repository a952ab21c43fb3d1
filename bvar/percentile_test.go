package bvar

import (
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHistBucketsTileTheRange(t *testing.T) {
	next := uint64(0)
	for i := range histBuckets {
		lo, w := histBucketRange(i)
		require.Equal(t, next, lo, "bucket %d starts where %d ends", i, i-1)
		require.Equal(t, i, histBucket(lo), "bucket of lo %d", lo)
		require.Equal(t, i, histBucket(lo+w-1), "bucket of hi %d", lo+w-1)
		if lo >= 2*histSubBuckets {
			assert.LessOrEqual(t, float64(w)/float64(lo), 1.0/histSubBuckets, "relative width of %d", i)
		}
		next = lo + w
	}
	assert.Equal(t, uint64(histMaxUs)+1, next)
	assert.Equal(t, histBuckets-1, histBucket(math.MaxUint64), "larger values go to the last bucket")
	assert.Equal(t, histBuckets-1, histBucket(histMaxUs+1))
}

// The histogram's window, by hand: deltas enter and leave exactly, across
// far-apart buckets (multi-byte gaps in the encoding).
func TestPercentileHistWindow(t *testing.T) {
	h := newPercentileHist(2)
	ns := func(s int) int64 { return int64(s) * 1e9 }
	q := func(p float64) int64 {
		var out [1]int64
		h.quantiles([]float64{p}, out[:], -1, -1)
		return out[0]
	}
	h.record(5)
	h.takeSample(ns(0)) // the baseline: 5 is before the window
	n, span := h.window()
	assert.Equal(t, uint64(0), n)
	assert.Equal(t, int64(0), span)
	assert.Equal(t, int64(0), q(0.5))

	h.record(1)
	h.record(3_000_000_000)
	h.record(-7) // counts as 0
	h.takeSample(ns(1))
	n, span = h.window()
	assert.Equal(t, uint64(3), n)
	assert.Equal(t, ns(1), span)
	assert.Equal(t, int64(0), q(0.1))
	assert.Equal(t, int64(1), q(0.5))
	big := q(1)
	assert.InDelta(t, 3e9, float64(big), 3e9/histSubBuckets)

	h.record(100)
	h.takeSample(ns(2))
	n, span = h.window()
	assert.Equal(t, uint64(4), n)
	assert.Equal(t, ns(2), span)

	h.takeSample(ns(3)) // second 1 leaves the window
	n, span = h.window()
	assert.Equal(t, uint64(1), n)
	assert.Equal(t, ns(2), span)
	assert.Equal(t, int64(100), q(0.0001))
	assert.Equal(t, int64(100), q(1))

	h.takeSample(ns(4))
	n, _ = h.window()
	assert.Equal(t, uint64(0), n)
	assert.Equal(t, int64(0), q(0.99))
	for _, c := range h.win {
		if c != nil {
			assert.Equal(t, histChunk{}, *c, "the window drains to zero")
		}
	}
}

func TestQuantileRank(t *testing.T) {
	assert.Equal(t, uint64(900000), quantileRank(0.9, 1_000_000))
	assert.Equal(t, uint64(1), quantileRank(0, 10))
	assert.Equal(t, uint64(1), quantileRank(math.NaN(), 10))
	assert.Equal(t, uint64(1), quantileRank(-1, 10))
	assert.Equal(t, uint64(10), quantileRank(2, 10))
	assert.Equal(t, uint64(1), quantileRank(0.05, 10))
	assert.Equal(t, uint64(10), quantileRank(0.95, 10))
}

// A P id beyond the shards (GOMAXPROCS raised after the histogram was
// made) uses the shared overflow chunks; nothing is lost.
func TestPercentileHistOverflowShard(t *testing.T) {
	old := runtime.GOMAXPROCS(1)
	h := newPercentileHist(10)
	runtime.GOMAXPROCS(max(old, 4))
	defer runtime.GOMAXPROCS(old)
	h.takeSample(0)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 5000 {
				h.record(int64(g*1000 + i%1000))
				if i%100 == 0 {
					runtime.Gosched()
				}
			}
		}()
	}
	wg.Wait()
	h.takeSample(1e9)
	n, _ := h.window()
	assert.Equal(t, uint64(40000), n)
	if runtime.NumCPU() > 1 {
		used := false
		for ci := range h.overflow.chunks {
			used = used || h.overflow.chunks[ci].Load() != nil
		}
		t.Logf("overflow shard used: %v", used)
	}
}

// The accuracy requirement: over 1,000,000 samples, the share of
// samples at or below each reported percentile is within 1% of p.
func TestLatencyPercentileAccuracy(t *testing.T) {
	const n = 1_000_000
	rng := rand.New(rand.NewPCG(2026, 7))
	logNormal := func(medianUs, sigma float64) func() int64 {
		mu := math.Log(medianUs)
		return func() int64 { return int64(math.Exp(mu + sigma*rng.NormFloat64())) }
	}
	// The extra log-normals use fewer samples: under -race a Record costs
	// about a microsecond.
	dists := []struct {
		name string
		n    int
		gen  func() int64
	}{
		{"lognormal median 2ms sigma 1", n, logNormal(2000, 1)},
		{"lognormal median 500us sigma 0.25 (narrow)", n / 4, logNormal(500, 0.25)},
		{"lognormal median 10ms sigma 2 (wide)", n / 4, logNormal(10000, 2)},
		{"uniform 0..100ms", n, func() int64 { return rng.Int64N(100_000) }},
		{"bimodal 85% ~800us, 15% ~40ms", n, func() int64 {
			if rng.Float64() < 0.85 {
				return int64(math.Exp(math.Log(800) + 0.3*rng.NormFloat64()))
			}
			return int64(math.Exp(math.Log(40000) + 0.2*rng.NormFloat64()))
		}},
	}
	ps := []float64{0.5, 0.8, 0.9, 0.99, 0.999, 0.9999}
	for _, d := range dists {
		t.Run(d.name, func(t *testing.T) {
			samples := make([]int64, d.n)
			now := manual(t)
			r, err := NewLatencyRecorderWindow("", 10)
			require.NoError(t, err)
			defer r.Close()
			SampleAt(now)
			for i := range samples {
				samples[i] = d.gen()
				r.RecordUs(samples[i])
			}
			SampleAt(now.Add(time.Second))
			got := make([]int64, len(ps))
			for i, p := range ps {
				got[i] = r.LatencyPercentile(p)
			}
			// One pass counts the samples at or below each reported value
			// (sorting a million values takes seconds under -race).
			atOrBelow := make([]int, len(ps))
			for _, v := range samples {
				for i, g := range got {
					if v <= g {
						atOrBelow[i]++
					}
				}
			}
			worst := 0.0
			for i, p := range ps {
				share := float64(atOrBelow[i]) / float64(d.n)
				if !assert.InDelta(t, p, share, 0.01, "p%v: reported %d µs", p*100, got[i]) {
					sorted := slices.Sorted(slices.Values(samples))
					t.Logf("exact p%v: %d µs", p*100, sorted[quantileRank(p, uint64(d.n))-1])
				}
				worst = max(worst, math.Abs(share-p))
			}
			t.Logf("max rank error %.4f%%", worst*100)
			// The bundle agrees with the histogram.
			assert.Equal(t, int64(d.n), r.Count())
			assert.Equal(t, slices.Max(samples), r.MaxLatency())
			assert.InDelta(t, float64(d.n), r.QPS(), 0.5)
			cdf := r.CDF()
			require.Len(t, cdf, 20)
			assert.True(t, slices.IsSortedFunc(cdf, func(a, b CDFPoint) int { return int(a.LatencyUs - b.LatencyUs) }))
			assert.Equal(t, r.LatencyPercentile(0.9999), cdf[19].LatencyUs)
		})
	}
}

func TestPercentileHistRecentQuantile(t *testing.T) {
	h := newPercentileHist(3)
	ns := func(s int) int64 { return int64(s) * 1e9 }

	v, n := h.recentQuantile(0.5, 1, 0)
	assert.Equal(t, uint64(0), n, "nothing recorded")
	assert.Equal(t, int64(0), v)

	// Before the first sample every value counts.
	for range 10 {
		h.record(1000)
	}
	v, n = h.recentQuantile(0.5, 100, 0)
	assert.Equal(t, uint64(10), n)
	assert.InDelta(t, 1000, float64(v), 1000.0/histSubBuckets)

	h.takeSample(ns(0)) // baseline: the 10 values are before the window now
	v, n = h.recentQuantile(0.5, 1, 0)
	assert.Equal(t, uint64(0), n)

	for range 100 {
		h.record(1000) // second 1
	}
	h.takeSample(ns(1))
	for range 100 {
		h.record(5000) // second 2
	}
	h.takeSample(ns(2))
	for range 50 {
		h.record(9000) // since the latest sample
	}
	v, n = h.recentQuantile(0.5, 50, 0)
	assert.Equal(t, uint64(50), n, "the unsampled values are enough")
	assert.InDelta(t, 9000, float64(v), 9000.0/histSubBuckets)
	v, n = h.recentQuantile(0.5, 51, 0)
	assert.Equal(t, uint64(150), n, "then the newest second")
	assert.InDelta(t, 5000, float64(v), 5000.0/histSubBuckets)
	_, n = h.recentQuantile(0.5, 1, 2)
	assert.Equal(t, uint64(250), n, "at least 2 whole seconds")
	v, n = h.recentQuantile(0.1, 1000, 0)
	assert.Equal(t, uint64(250), n, "at most the window")
	assert.InDelta(t, 1000, float64(v), 1000.0/histSubBuckets)

	// Seconds that left the window are not read.
	h.takeSample(ns(3))
	h.takeSample(ns(4))
	h.takeSample(ns(5))
	_, n = h.recentQuantile(0.5, 1000, 0)
	assert.Equal(t, uint64(50), n, "only the 9000s are still in the 3 s window")
	h.takeSample(ns(6))
	_, n = h.recentQuantile(0.5, 1000, 0)
	assert.Equal(t, uint64(0), n)
}

// recentQuantile is the value at rank ceil(p*N) of h.recent, and N.
func (h *percentileHist) recentQuantile(p float64, minCount uint64, minSeconds int) (us int64, n uint64) {
	s := h.recent(minCount, minSeconds)
	if s.n == 0 {
		return 0, 0
	}
	return s.atRank(quantileRank(p, s.n)), s.n
}

func TestLatencySnapshot(t *testing.T) {
	r, err := NewHistogram(10)
	assert.NoError(t, err)
	defer r.Close()
	for range 90 {
		r.RecordUs(1000)
	}
	for range 10 {
		r.RecordUs(50_000)
	}
	s := r.RecentLatencies(1, 0)
	assert.Equal(t, int64(100), s.Count())
	assert.InDelta(t, 1000, float64(s.Percentile(0.9)), 1000.0/histSubBuckets)
	assert.InDelta(t, 50_000, float64(s.Percentile(0.91)), 50_000.0/histSubBuckets)
	assert.InDelta(t, 50_000, float64(s.AtRank(1000)), 50_000.0/histSubBuckets, "clamped")
	assert.Equal(t, int64(0), (&LatencySnapshot{&histSnapshot{}}).Percentile(0.5))
	r.Close()
	r.Close() // twice is fine
	_, err = NewHistogram(MaxWindowSize + 1)
	assert.Error(t, err)
}
