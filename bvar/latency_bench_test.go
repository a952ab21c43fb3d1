package bvar

import (
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"
)

// benchLatencies are log-normal latencies (median 2 ms), so Record visits
// buckets across several octaves as real traffic does.
var benchLatencies = func() []int64 {
	rng := rand.New(rand.NewPCG(1, 2))
	v := make([]int64, 4096)
	for i := range v {
		v[i] = int64(math.Exp(math.Log(2000) + rng.NormFloat64()))
	}
	return v
}()

func BenchmarkLatencyRecorderRecord(b *testing.B) {
	r := NewLatencyRecorder("")
	defer r.Close()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		r.RecordUs(benchLatencies[i&4095])
		i++
	}
}

func BenchmarkLatencyRecorderRecordDuration(b *testing.B) {
	r := NewLatencyRecorder("")
	defer r.Close()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		r.Record(time.Duration(benchLatencies[i&4095]) * time.Microsecond)
		i++
	}
}

func BenchmarkLatencyRecorderRecordParallel(b *testing.B) {
	r := NewLatencyRecorder("")
	defer r.Close()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := rand.IntN(4096)
		for pb.Next() {
			r.RecordUs(benchLatencies[i&4095])
			i++
		}
	})
}

// The histogram alone, the part that is new compared with the reducers.
func BenchmarkPercentileHistRecord(b *testing.B) {
	h := newPercentileHist(10)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		h.record(benchLatencies[i&4095])
		i++
	}
}

// filledRecorder returns a recorder whose window holds size seconds of
// perSecond log-normal latencies each, sampled on its own sources only.
func filledRecorder(size, perSecond int, start int64) *LatencyRecorder {
	r, err := NewLatencyRecorderWindow("", size)
	if err != nil {
		panic(err)
	}
	sample := func(t int64) {
		r.avgWin.s.takeSample(t)
		r.maxWin.s.takeSample(t)
		r.minWin.s.takeSample(t)
		r.hist.takeSample(t)
	}
	sample(start)
	procs := runtime.GOMAXPROCS(0)
	for s := 1; s <= size+1; s++ {
		var wg sync.WaitGroup
		for g := range procs { // so that every P gets its chunks
			wg.Go(func() {
				for i := g; i < perSecond; i += procs {
					r.RecordUs(benchLatencies[(s*perSecond+i)&4095])
				}
			})
		}
		wg.Wait()
		sample(start + int64(s)*1e9)
	}
	return r
}

// What /vars pays to print a recorder's 11 variables.
func BenchmarkLatencyRecorderDescribeAll(b *testing.B) {
	SetManualSampling(true)
	defer SetManualSampling(false)
	r := filledRecorder(10, 2000, 0)
	defer r.Close()
	b.ReportAllocs()
	for b.Loop() {
		for _, v := range r.vars {
			_ = v.v.(Variable).Describe()
		}
	}
}

// What the sampler pays per recorder per second (histogram only: the
// three reducer windows cost what any Window does).
func BenchmarkPercentileHistTakeSample(b *testing.B) {
	h := newPercentileHist(10)
	now := int64(0)
	b.ReportAllocs()
	for b.Loop() {
		for i := range 2000 {
			h.record(benchLatencies[i])
		}
		now += 1e9
		h.takeSample(now)
	}
}

// The memory a recorder holds with a full 10-second window: idle (never
// recorded), and busy (2,000 log-normal latencies a second, recorded from
// every P). Reported as B/recorder; the ns/op is meaningless.
func BenchmarkLatencyRecorderFootprint(b *testing.B) {
	for _, c := range []struct {
		name      string
		perSecond int
	}{{"idle", 0}, {"busy", 2000}} {
		b.Run(c.name, func(b *testing.B) {
			SetManualSampling(true)
			defer SetManualSampling(false)
			const count = 200
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			rs := make([]*LatencyRecorder, count)
			for i := range rs {
				rs[i] = filledRecorder(10, c.perSecond, 0)
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			for b.Loop() {
			}
			b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/count, "B/recorder")
			b.ReportMetric(float64(runtime.GOMAXPROCS(0)), "Ps")
			for _, r := range rs {
				r.Close()
			}
		})
	}
}
