package bvar

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var latencySuffixes = []string{
	"_count", "_latency", "_latency_80", "_latency_90", "_latency_99", "_latency_999",
	"_latency_9999", "_latency_cdf", "_latency_percentiles", "_max_latency", "_qps",
}

// exposedWith lists the exposed names starting with base+"_".
func exposedWith(base string) []string {
	var out []string
	for _, n := range List() {
		if strings.HasPrefix(n, base+"_") {
			out = append(out, n)
		}
	}
	return out
}

func namesOf(base string) []string {
	out := make([]string, len(latencySuffixes))
	for i, s := range latencySuffixes {
		out[i] = base + s
	}
	return out
}

func TestLatencyRecorderNames(t *testing.T) {
	cases := []struct{ prefix, base string }{
		{"rpc_server_8000_example_echo_service_echo", "rpc_server_8000_example_echo_service_echo"},
		{"foo_latency", "foo"},
		{"FooLatency", "foo"},
		{"foolatency", "foo"},
		{"foo.bar.Latency", "foo_bar"},
		{"HTTPServer", "httpserver"},
		{"example.EchoService.Echo", "example_echo_service_echo"},
		{"foo_LATENCY", "foo_latency"}, // brpc strips only "latency" and "Latency"
	}
	for _, c := range cases {
		t.Run(c.prefix, func(t *testing.T) {
			r := NewLatencyRecorder(c.prefix)
			defer r.Close()
			assert.Equal(t, namesOf(c.base), exposedWith(c.base))
			assert.Equal(t, c.base+"_latency", r.Name())
			r.Hide()
			assert.Empty(t, exposedWith(c.base))
			assert.Equal(t, "", r.Name())
		})
	}
	for _, bad := range []string{"", "latency", "Latency"} {
		r, err := NewLatencyRecorderWindow("", 0)
		require.NoError(t, err)
		assert.Error(t, r.Expose(bad), bad)
		r.Close()
	}
}

func TestLatencyRecorderExposeConflicts(t *testing.T) {
	a := NewLatencyRecorder("conflict_latency")
	defer a.Close()
	// A second recorder under the same prefix is refused as a whole.
	_, err := NewLatencyRecorderWindow("conflict", 5)
	assert.ErrorContains(t, err, "conflict_latency")
	b := NewLatencyRecorder("conflict") // logged, left unexposed
	defer b.Close()
	assert.Equal(t, "", b.Name())
	assert.Equal(t, namesOf("conflict"), exposedWith("conflict"), "the first keeps its names")

	// One taken name in the middle of the bundle: nothing stays exposed.
	taken := NewAdder[int64]("partial_qps")
	defer taken.Hide()
	assert.ErrorContains(t, b.Expose("partial"), "partial_qps")
	assert.Equal(t, []string{"partial_qps"}, exposedWith("partial"))

	// Re-exposing moves every name.
	require.NoError(t, b.Expose("moved"))
	require.NoError(t, b.Expose("moved_again_latency"))
	assert.Empty(t, exposedWith("moved_latency"))
	assert.Equal(t, namesOf("moved_again"), exposedWith("moved_again"))

	_, err = NewLatencyRecorderWindow("", MaxWindowSize+1)
	assert.Error(t, err)
	r, err := NewLatencyRecorderWindow("", -1)
	require.NoError(t, err)
	assert.Equal(t, 10, r.WindowSize(), "<= 0 means brpc's bvar_dump_interval")
	r.Close()
}

func TestLatencyRecorderWindowExact(t *testing.T) {
	now := manual(t)
	r, err := NewLatencyRecorderWindow("exact_latency", 3)
	require.NoError(t, err)
	defer r.Close()
	at := func(s int) time.Time { return now.Add(time.Duration(s) * time.Second) }
	describe := func(suffix string) string {
		v, ok := Describe("exact" + suffix)
		require.True(t, ok, suffix)
		return v
	}

	// Nothing sampled yet: everything reads 0, the count does not wait.
	r.RecordUs(40)
	assert.Equal(t, int64(1), r.Count())
	assert.Equal(t, int64(0), r.Latency())
	assert.Equal(t, int64(0), r.MaxLatency())
	assert.Equal(t, 0.0, r.QPS())
	assert.Equal(t, int64(0), r.LatencyPercentile(0.5))
	assert.Equal(t, [4]int64{}, r.LatencyPercentiles())
	assert.Equal(t, "0", describe("_max_latency"))
	assert.Equal(t, `"[0,0,0,0]"`, describe("_latency_percentiles"))
	assert.Equal(t, `{"label":"cdf","data":[[10,0],[20,0],[30,0],[40,0],[50,0],[60,0],[70,0],[80,0],[90,0],`+
		`[91,0],[92,0],[93,0],[94,0],[95,0],[96,0],[97,0],[98,0],[99,0],[100,0],[101,0]]}`, describe("_latency_cdf"))

	SampleAt(at(0)) // the 40 µs is before the first sample: outside every window
	assert.Equal(t, int64(0), r.Latency())

	// Second s (1..5) records s*10, s*10+1 ... s*10+9 µs.
	for s := 1; s <= 5; s++ {
		for i := range 10 {
			r.Record(time.Duration(s*10+i)*time.Microsecond + 999*time.Nanosecond)
		}
		SampleAt(at(s))
		if s == 1 {
			assert.Equal(t, int64(14), r.Latency(), "(10+...+19)/10")
			assert.Equal(t, int64(19), r.MaxLatency())
			assert.Equal(t, 10.0, r.QPS())
			assert.Equal(t, int64(14), r.LatencyPercentile(0.5))
		}
	}
	// The window holds seconds 3, 4, 5: 30..59.
	assert.Equal(t, int64(51), r.Count())
	assert.Equal(t, int64(44), r.Latency())
	assert.Equal(t, int64(59), r.MaxLatency())
	assert.Equal(t, 10.0, r.QPS())
	assert.Equal(t, int64(30), r.LatencyPercentile(0))
	assert.Equal(t, int64(44), r.LatencyPercentile(0.5), "rank 15 of 30..59")
	assert.Equal(t, [4]int64{53, 56, 59, 59}, r.LatencyPercentiles(), "ranks 24, 27, 30, 30")
	assert.Equal(t, "44", describe("_latency"))
	assert.Equal(t, "59", describe("_max_latency"))
	assert.Equal(t, "51", describe("_count"))
	assert.Equal(t, "10", describe("_qps"))
	assert.Equal(t, "53", describe("_latency_80"))
	assert.Equal(t, "56", describe("_latency_90"))
	assert.Equal(t, "59", describe("_latency_99"))
	assert.Equal(t, "59", describe("_latency_999"))
	assert.Equal(t, "59", describe("_latency_9999"))
	assert.Equal(t, `"[53,56,59,59]"`, describe("_latency_percentiles"))
	assert.Equal(t, `{"label":"cdf","data":[[10,32],[20,35],[30,38],[40,41],[50,44],[60,47],[70,50],[80,53],[90,56],`+
		`[91,57],[92,57],[93,57],[94,58],[95,58],[96,58],[97,59],[98,59],[99,59],[100,59],[101,59]]}`, describe("_latency_cdf"))
	cdf := r.CDF()
	assert.Equal(t, CDFPoint{Percent: 99.99, LatencyUs: 59}, cdf[19])
	assert.Equal(t, CDFPoint{Percent: 10, LatencyUs: 32}, cdf[0])

	// Wide buckets interpolate and never pass the exact maximum.
	r.RecordUs(1_000_000)
	r.RecordUs(1_000_100)
	SampleAt(at(6))
	assert.Equal(t, int64(1_000_100), r.MaxLatency())
	assert.Equal(t, int64(1_000_100), r.LatencyPercentile(1))
	p := r.LatencyPercentile(0.95) // rank 21 of 22: the first of the two
	assert.InDelta(t, 1_000_000, float64(p), 1_000_000/histSubBuckets)

	// Idle seconds drain the window back to zero (not the Maxer's minimum).
	for s := 7; s <= 9; s++ {
		SampleAt(at(s))
	}
	assert.Equal(t, int64(0), r.Latency())
	assert.Equal(t, int64(0), r.MaxLatency())
	assert.Equal(t, 0.0, r.QPS())
	assert.Equal(t, int64(0), r.LatencyPercentile(0.99))
	assert.Equal(t, int64(53), r.Count())
}

func TestLatencyRecorderQPSRounding(t *testing.T) {
	now := manual(t)
	r, err := NewLatencyRecorderWindow("", 10)
	require.NoError(t, err)
	defer r.Close()
	SampleAt(now)
	for s := 1; s <= 10; s++ {
		if s <= 3 {
			r.RecordUs(5)
		}
		SampleAt(now.Add(time.Duration(s) * time.Second))
	}
	assert.InDelta(t, 0.3, r.QPS(), 1e-9)
	ones := 0
	for range 10000 {
		v := r.qpsRounded()
		require.True(t, v == 0 || v == 1, v)
		ones += int(v)
	}
	assert.InDelta(t, 3000, ones, 300, "randomized rounding is unbiased")
}

func TestLatencyRecorderConcurrent(t *testing.T) {
	now := manual(t)
	r, err := NewLatencyRecorderWindow("concurrent", MaxWindowSize)
	require.NoError(t, err)
	defer r.Close()
	SampleAt(now)
	const goroutines, each = 4, 20000
	var writers, reader sync.WaitGroup
	stop := make(chan struct{})
	reader.Add(1)
	go func() { // sample, read and re-expose while the writers write
		defer reader.Done()
		for s := 1; ; s++ {
			select {
			case <-stop:
				return
			default:
			}
			if s < MaxWindowSize-10 { // keep every second in the window
				SampleAt(now.Add(time.Duration(s) * time.Second))
			}
			_ = r.Latency() + r.MaxLatency() + r.Count() + r.LatencyPercentile(0.99)
			_ = r.CDF()
			_ = r.QPS()
			var b strings.Builder
			_, _ = Dump(&b, "concurrent_*")
			if s%10 == 0 {
				r.Hide()
				assert.NoError(t, r.Expose(fmt.Sprintf("concurrent%d", s%20)))
			}
		}
	}()
	for g := range goroutines {
		writers.Add(1)
		go func() {
			defer writers.Done()
			for i := range each {
				r.RecordUs(int64(g*100_000 + i))
			}
		}()
	}
	writers.Wait()
	close(stop)
	reader.Wait()
	SampleAt(now.Add(time.Hour))
	n, _ := r.hist.window()
	assert.Equal(t, uint64(goroutines*each), n, "every value is in the window once")
	assert.Equal(t, int64(goroutines*each), r.Count())
	assert.Equal(t, int64(3*100_000+each-1), r.MaxLatency())
}

// Close releases the sampler: the goroutine exits with the last window
// (goleak checks at the end of the package's tests).
func TestLatencyRecorderCloseReleasesSampler(t *testing.T) {
	collector.mu.Lock()
	before := len(collector.sources)
	collector.mu.Unlock()
	r := NewLatencyRecorder("close_test")
	r.Record(3 * time.Millisecond)
	collector.mu.Lock()
	assert.Equal(t, before+4, len(collector.sources), "three windows and the histogram")
	assert.NotNil(t, collector.stop, "the sampler runs")
	collector.mu.Unlock()

	r.Close()
	r.Close() // idempotent
	collector.mu.Lock()
	assert.Equal(t, before, len(collector.sources))
	if before == 0 {
		assert.Nil(t, collector.stop, "the sampler stops")
	}
	collector.mu.Unlock()
	assert.Empty(t, exposedWith("close_test"))
	assert.Error(t, r.Expose("close_test"))
	r.RecordUs(1) // harmless after Close
	assert.Equal(t, int64(2), r.Count())
}

// With the real sampler the window fills by itself.
func TestLatencyRecorderRealTime(t *testing.T) {
	r := NewLatencyRecorder("")
	defer r.Close()
	require.Eventually(t, func() bool {
		r.Record(1500 * time.Microsecond)
		return r.QPS() > 0
	}, 5*time.Second, 20*time.Millisecond)
	assert.Equal(t, int64(1500), r.LatencyPercentile(0.5))
	assert.Equal(t, int64(1500), r.Latency())
}

func ExampleLatencyRecorder() {
	rec := NewLatencyRecorder("example.EchoService.Echo")
	defer rec.Close()
	start := time.Now()
	// ... serve a request ...
	rec.Record(time.Since(start))
	fmt.Println(rec.Name(), rec.Count())
	// Output: example_echo_service_echo_latency 1
}
