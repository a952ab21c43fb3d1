package bvar

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"
)

// defaultLatencyWindow is brpc's -bvar_dump_interval (10 s), the window a
// LatencyRecorder uses when none is given.
const defaultLatencyWindow = 10

// The percentiles exposed as <prefix>_latency_80, _90 and _99. brpc reads
// them from the reloadable flags -bvar_latency_p1/p2/p3; they are
// constants here until the flags package defines those flags.
const (
	latencyP1 = 80
	latencyP2 = 90
	latencyP3 = 99
)

// cdfPercents are the points of the latency CDF chart, brpc's latency_cdf:
// every 10% to 90%, every 1% to 99%, then 99.9% and 99.99%.
var cdfPercents = [...]float64{10, 20, 30, 40, 50, 60, 70, 80, 90,
	91, 92, 93, 94, 95, 96, 97, 98, 99, 99.9, 99.99}

// CDFPoint is one point of a latency CDF: LatencyUs is the latency that
// Percent percent of the window's values do not exceed.
type CDFPoint struct {
	Percent   float64
	LatencyUs int64
}

// LatencyRecorder records latencies and exposes brpc's bundle of
// variables about them: brpc's bvar::LatencyRecorder. Under a prefix p
// (see Expose) it exposes
//
//	p_latency             average latency in the window, µs
//	p_max_latency         largest latency in the window, µs
//	p_qps                 values recorded per second over the window
//	p_count               values recorded since creation
//	p_latency_80          80th percentile in the window, µs (also _90, _99)
//	p_latency_999         99.9th percentile
//	p_latency_9999        99.99th percentile
//	p_latency_cdf         the CDF chart's data (see CDF)
//	p_latency_percentiles "[p80,p90,p99,p999]", as brpc's vector prints
//
// The window defaults to 10 s (brpc's -bvar_dump_interval). Record costs
// four per-P writes (average, max, min, histogram) and takes no lock. A
// LatencyRecorder must be made with NewLatencyRecorder or
// NewLatencyRecorderWindow and closed with Close when no longer needed.
type LatencyRecorder struct {
	size int // window, seconds
	sum  *IntRecorder
	max  *Maxer[int64]
	min  *Miner[int64] // not exposed: bounds the percentiles' lowest bucket
	hist *percentileHist

	avgWin, maxWin, minWin *Window[int64]
	vars                   []latencyVar // everything Expose exposes, in brpc's order

	mu     sync.Mutex // serializes Expose, Hide and Close
	closed bool
}

// latencyVar is one exposed member of a LatencyRecorder.
type latencyVar struct {
	name string
	v    interface {
		ExposeAs(prefix, name string) error
		Hide()
	}
}

// NewLatencyRecorder returns a recorder with a 10-second window, exposed
// under prefix ("" for not exposed; a refused prefix is logged and the
// recorder works unexposed, as with the other constructors; call Expose
// to get the error instead).
func NewLatencyRecorder(prefix string) *LatencyRecorder {
	r := newLatencyRecorder(defaultLatencyWindow)
	if prefix != "" {
		if err := r.Expose(prefix); err != nil {
			slog.Error(err.Error())
		}
	}
	return r
}

// NewLatencyRecorderWindow returns a recorder whose window is
// windowSeconds long (<= 0 means the default 10, as in brpc; at most
// MaxWindowSize), exposed under prefix ("" for not exposed). It fails on
// a window that is too large or a prefix that cannot be exposed.
func NewLatencyRecorderWindow(prefix string, windowSeconds int) (*LatencyRecorder, error) {
	if windowSeconds <= 0 {
		windowSeconds = defaultLatencyWindow
	}
	if windowSeconds > MaxWindowSize {
		return nil, fmt.Errorf("bvar: latency window %d s is larger than %d", windowSeconds, MaxWindowSize)
	}
	r := newLatencyRecorder(windowSeconds)
	if prefix != "" {
		if err := r.Expose(prefix); err != nil {
			r.Close()
			return nil, err
		}
	}
	return r, nil
}

func newLatencyRecorder(size int) *LatencyRecorder {
	r := &LatencyRecorder{
		size: size,
		sum:  NewIntRecorder(""),
		max:  NewMaxer[int64](""),
		min:  NewMiner[int64](""),
		hist: newPercentileHist(size),
	}
	// Neither can fail: the reducers exist and size is in range.
	r.avgWin, _ = NewWindow("", Reducer[int64](r.sum), size)
	r.maxWin, _ = NewWindow("", Reducer[int64](r.max), size)
	r.minWin, _ = NewWindow("", Reducer[int64](r.min), size)
	addSource(r.hist)

	passive := func(fn func() int64) *PassiveStatus[int64] {
		p, _ := NewPassiveStatus("", fn)
		return p
	}
	pct := func(p float64) func() int64 {
		return func() int64 { return r.LatencyPercentile(p) }
	}
	percentiles, _ := NewPassiveStatus("", func() string {
		v := r.LatencyPercentiles()
		return "[" + strconv.FormatInt(v[0], 10) + "," + strconv.FormatInt(v[1], 10) + "," +
			strconv.FormatInt(v[2], 10) + "," + strconv.FormatInt(v[3], 10) + "]"
	})
	r.vars = []latencyVar{
		{"latency", r.avgWin},
		{"max_latency", passive(r.MaxLatency)},
		{"count", passive(r.Count)},
		{"qps", passive(r.qpsRounded)},
		{"latency_" + strconv.Itoa(latencyP1), passive(pct(latencyP1 / 100.0))},
		{"latency_" + strconv.Itoa(latencyP2), passive(pct(latencyP2 / 100.0))},
		{"latency_" + strconv.Itoa(latencyP3), passive(pct(latencyP3 / 100.0))},
		{"latency_999", passive(pct(0.999))},
		{"latency_9999", passive(pct(0.9999))},
		{"latency_cdf", &cdfVar{r: r}},
		{"latency_percentiles", percentiles},
	}
	return r
}

// Record records one latency, in whole microseconds (rounded down).
func (r *LatencyRecorder) Record(d time.Duration) { r.RecordUs(d.Microseconds()) }

// RecordUs records one latency in microseconds. A negative one counts as
// 0 everywhere (brpc drops it from the percentiles only, which makes the
// count and the percentiles disagree).
func (r *LatencyRecorder) RecordUs(us int64) {
	us = max(us, 0)
	r.sum.Record(us)
	r.max.Record(us)
	r.min.Record(us)
	r.hist.record(us)
}

// WindowSize is the window's length in seconds.
func (r *LatencyRecorder) WindowSize() int { return r.size }

// Latency returns the average latency in the window, µs (0 when empty).
func (r *LatencyRecorder) Latency() int64 { return r.avgWin.Get() }

// MaxLatency returns the largest latency in the window, µs (0 when empty:
// brpc shows 0, not the Maxer's initial minimum).
func (r *LatencyRecorder) MaxLatency() int64 { return max(r.maxWin.Get(), 0) }

// Count returns how many latencies were recorded since creation.
func (r *LatencyRecorder) Count() int64 {
	_, n := r.sum.SumCount()
	return n
}

// QPS returns the latencies recorded per second over the window: the
// window's count divided by the time it spans. It is a float64 so slow
// methods do not read 0; the exposed <prefix>_qps is an integer, rounded
// at random as brpc's is (0.3 shows 1 three times in ten), so that an
// average of many readings is unbiased.
func (r *LatencyRecorder) QPS() float64 {
	n, span := r.hist.window()
	if span <= 0 {
		return 0
	}
	return float64(n) * 1e9 / float64(span)
}

func (r *LatencyRecorder) qpsRounded() int64 {
	q := r.QPS()
	i := int64(q)
	if rand.Float64() < q-float64(i) {
		i++
	}
	return i
}

// LatencyPercentile returns the latency in µs that a share p (0..1, e.g.
// 0.99) of the window's values do not exceed, to within 1.6% of its value
// (see percentile.go) and never above MaxLatency. It is 0 while the
// window is empty (including the first second).
func (r *LatencyRecorder) LatencyPercentile(p float64) int64 {
	var out [1]int64
	r.quantiles([]float64{p}, out[:])
	return out[0]
}

// LatencySnapshot is a copy of a Histogram's recent values (µs, in
// buckets 1.6% wide; see Histogram.RecentLatencies).
type LatencySnapshot struct{ h *histSnapshot }

// Count is how many values the snapshot holds.
func (s *LatencySnapshot) Count() int64 { return int64(s.h.n) }

// Percentile is the value that a share p of the values do not exceed,
// 0 when empty.
func (s *LatencySnapshot) Percentile(p float64) int64 {
	if s.h.n == 0 {
		return 0
	}
	return s.h.atRank(quantileRank(p, s.h.n))
}

// AtRank is the rank-th smallest value (1-based, clamped to [1, Count]),
// 0 when empty.
func (s *LatencySnapshot) AtRank(rank int64) int64 { return s.h.atRank(uint64(max(rank, 1))) }

// LatencyPercentiles returns the 80th, 90th, 99th and 99.9th percentiles,
// as brpc's latency_percentiles does.
func (r *LatencyRecorder) LatencyPercentiles() [4]int64 {
	var out [4]int64
	r.quantiles([]float64{latencyP1 / 100.0, latencyP2 / 100.0, latencyP3 / 100.0, 0.999}, out[:])
	return out
}

// CDF returns the window's latency CDF at the points brpc's latency_cdf
// chart plots: 10%, 20% ... 90%, 91% ... 99%, 99.9% and 99.99%.
func (r *LatencyRecorder) CDF() []CDFPoint {
	var ps [len(cdfPercents)]float64
	var vs [len(cdfPercents)]int64
	for i, pc := range cdfPercents {
		ps[i] = pc / 100
	}
	r.quantiles(ps[:], vs[:])
	out := make([]CDFPoint, len(cdfPercents))
	for i := range out {
		out[i] = CDFPoint{Percent: cdfPercents[i], LatencyUs: vs[i]}
	}
	return out
}

// quantiles reads the histogram with the window's exact extremes, which
// sharpen its first and last buckets (see percentileHist.quantiles).
func (r *LatencyRecorder) quantiles(ps []float64, out []int64) {
	r.hist.quantiles(ps, out, r.minWin.Get(), r.maxWin.Get())
}

// latencyPrefix removes a trailing "latency" or "Latency" from a prefix,
// as brpc's LatencyRecorder::expose does, so that "foo_latency" exposes
// foo_latency, foo_max_latency ... rather than foo_latency_latency. The
// separator left before it disappears when the names are joined.
func latencyPrefix(prefix string) (string, error) {
	p := prefix
	if s, ok := strings.CutSuffix(p, "latency"); ok {
		p = s
	} else if s, ok := strings.CutSuffix(p, "Latency"); ok {
		p = s
	}
	if p == "" {
		return "", fmt.Errorf("bvar: invalid LatencyRecorder prefix %q", prefix)
	}
	return p, nil
}

// Expose exposes every variable under prefix (see the type's doc), first
// hiding the ones already exposed. It is all or nothing: if a name is
// taken, nothing stays exposed and the error says which.
func (r *LatencyRecorder) Expose(prefix string) error {
	p, err := latencyPrefix(prefix)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return errors.New("bvar: LatencyRecorder is closed")
	}
	r.hideLocked()
	for _, v := range r.vars {
		if err := v.v.ExposeAs(p, v.name); err != nil {
			r.hideLocked()
			return err
		}
	}
	return nil
}

// Name returns the name of the exposed average, <prefix>_latency ("" when
// not exposed).
func (r *LatencyRecorder) Name() string { return r.avgWin.Name() }

// Hide hides every variable; the recorder keeps working.
func (r *LatencyRecorder) Hide() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hideLocked()
}

func (r *LatencyRecorder) hideLocked() {
	for _, v := range r.vars {
		v.v.Hide()
	}
}

// Close hides every variable and stops sampling for the recorder, so the
// sampler goroutine can exit. Record still works afterwards (it is not
// worth a check on the hot path) but the windows no longer move.
func (r *LatencyRecorder) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	r.closed = true
	r.hideLocked()
	r.avgWin.Close()
	r.maxWin.Close()
	r.minWin.Close()
	removeSource(r.hist)
}

// cdfVar is <prefix>_latency_cdf. brpc shows it only on the HTML /vars
// page, as a chart; its plain describe is "click to view" and the chart
// data comes from describe_series. Here Describe returns that chart data
// itself, in brpc's flot format, so a /vars page can plot it as brpc's
// does and a reader of a dump still sees the numbers:
//
//	{"label":"cdf","data":[[10,v10],[20,v20],...,[99,v99],[100,v99.9],[101,v99.99]]}
//
// As in brpc, 99.9% and 99.99% sit at x = 100 and 101 (the chart labels
// those ticks). It is JSON, not a string, so it is not quoted, and
// DumpPrometheus skips it as a non-number.
type cdfVar struct {
	exposed
	r *LatencyRecorder
}

func (c *cdfVar) ExposeAs(prefix, name string) error { return c.expose(c, prefix, name) }

func (c *cdfVar) Describe() string {
	var b strings.Builder
	b.WriteString(`{"label":"cdf","data":[`)
	for i, p := range c.r.CDF() {
		if i > 0 {
			b.WriteByte(',')
		}
		x := int(p.Percent)
		switch p.Percent {
		case 99.9:
			x = 100
		case 99.99:
			x = 101
		}
		b.WriteByte('[')
		b.WriteString(strconv.Itoa(x))
		b.WriteByte(',')
		b.WriteString(strconv.FormatInt(p.LatencyUs, 10))
		b.WriteByte(']')
	}
	b.WriteString("]}")
	return b.String()
}
