package builtin

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gobrpc/gobrpc/bvar"
)

func TestParseNumber(t *testing.T) {
	for s, want := range map[string]bool{
		"0": true, "-12": true, "3.25": true, "1e+06": true, "0.123": true,
		"": false, `"12"`: false, "true": false, "NaN": false, "inf": false, "+Inf": false,
		`{"label":"cdf"}`: false, "[1,2]": false, "12abc": false,
	} {
		_, ok := parseNumber(s)
		assert.Equal(t, want, ok, s)
	}
}

func TestHistoryRecordsAndForgets(t *testing.T) {
	now := manualSampling(t)
	p := New(&fakeServer{}, Options{})
	defer p.Close()
	num := bvar.NewStatus[float64]("bt_hist_num", 1.5)
	defer num.Hide()
	str := bvar.NewStatus("bt_hist_str", "x")
	defer str.Hide()

	for i := range 3 {
		num.Set(float64(i))
		bvar.SampleAt(now.Add(time.Duration(i) * time.Second))
	}
	s, ok := p.hist.get("bt_hist_num")
	require.True(t, ok)
	assert.Equal(t, []float64{0, 1, 2}, s.Seconds)
	assert.Empty(t, s.Minutes)
	_, ok = p.hist.get("bt_hist_str")
	assert.False(t, ok, "strings have no history")

	// 60 seconds in, the ring is full and the first minute is their average;
	// after 130 seconds, the ring holds the last 60 and there are 2 minutes.
	for i := 3; i < 130; i++ {
		num.Set(float64(i))
		bvar.SampleAt(now.Add(time.Duration(i) * time.Second))
	}
	s, _ = p.hist.get("bt_hist_num")
	require.Len(t, s.Seconds, 60)
	assert.Equal(t, 70.0, s.Seconds[0])
	assert.Equal(t, 129.0, s.Seconds[59])
	assert.Equal(t, []float64{29.5, 89.5}, s.Minutes)

	// A hidden variable is forgotten at the next pass.
	num.Hide()
	bvar.SampleAt(now.Add(200 * time.Second))
	_, ok = p.hist.get("bt_hist_num")
	assert.False(t, ok)
}

func TestHistoryIsSharedAndStopped(t *testing.T) {
	now := manualSampling(t)
	v := bvar.NewStatus[int64]("bt_hist_shared", 1)
	defer v.Hide()
	p := New(&fakeServer{}, Options{})
	bvar.SampleAt(now)
	_, ok := p.hist.get("bt_hist_shared")
	assert.True(t, ok)
	p.Close()
	q := New(&fakeServer{}, Options{})
	defer q.Close()
	_, ok = q.hist.get("bt_hist_shared")
	assert.False(t, ok, "a new history after the last Close")
}

// exposeMany exposes n variables the way a busy server has them: mostly
// LatencyRecorders (11 variables each, the per-method bundle), plus
// Adders; it returns a cleanup.
func exposeMany(b testing.TB, n int) func() {
	var recs []*bvar.LatencyRecorder
	var adders []*bvar.Adder[int64]
	exposed := 0
	for i := 0; exposed+11 <= n*9/10; i++ {
		r := bvar.NewLatencyRecorder("bt_bench_method_" + strconv.Itoa(i))
		for k := range 100 {
			r.RecordUs(int64(100 + k*7))
		}
		recs = append(recs, r)
		exposed += 11
	}
	for i := 0; exposed < n; i++ {
		a := bvar.NewAdder[int64]("bt_bench_adder_" + strconv.Itoa(i))
		a.Add(int64(i))
		adders = append(adders, a)
		exposed++
	}
	return func() {
		for _, r := range recs {
			r.Close()
		}
		for _, a := range adders {
			a.Hide()
		}
	}
}

// BenchmarkHistoryPass is the once-a-second cost of the /vars history
// with 5,000 exposed variables: one Describe each (the _latency_cdf ones
// skipped), parsing, and the ring updates.
func BenchmarkHistoryPass(b *testing.B) {
	bvar.SetManualSampling(true)
	defer bvar.SetManualSampling(false)
	defer exposeMany(b, 5000)()
	bvar.SampleAt(time.Now())
	bvar.SampleAt(time.Now().Add(time.Second))
	h := &history{vars: map[string]*varHistory{}}
	now := time.Now()
	h.sample(now)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		h.sample(now.Add(time.Duration(i) * time.Second))
	}
	b.StopTimer()
	b.ReportMetric(float64(len(h.vars)), "vars")
}

// BenchmarkVarsHTML renders the HTML /vars page: 900 variables, each
// with its charts full, and 5,000, past maxInlineCharts (values only).
func BenchmarkVarsHTML(b *testing.B) {
	for _, n := range []int{900, 5000} {
		b.Run(strconv.Itoa(n)+"vars", func(b *testing.B) {
			bvar.SetManualSampling(true)
			defer bvar.SetManualSampling(false)
			defer exposeMany(b, n)()
			p := New(&fakeServer{}, Options{})
			defer p.Close()
			now := time.Now()
			for i := range 3601 { // an hour: every ring full
				bvar.SampleAt(now.Add(time.Duration(i) * time.Second))
			}
			b.ReportAllocs()
			b.ResetTimer()
			var size int
			for i := 0; i < b.N; i++ {
				w := httptest.NewRecorder()
				r := httptest.NewRequest(http.MethodGet, "/vars/bt_bench_*", nil)
				r.Header.Set("User-Agent", browserUA)
				p.ServeHTTP(w, r)
				size = w.Body.Len()
			}
			b.ReportMetric(float64(size), "page-bytes")
		})
	}
}
