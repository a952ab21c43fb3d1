package bvar

import (
	"fmt"
	"sync"
)

// Histogram is the percentile half of a LatencyRecorder alone: values in
// µs counted per P into the log-linear buckets of percentile.go, cut into
// one-second deltas by the sampler, with nothing exposed. Record is one
// per-P write where a LatencyRecorder's is four (average, max, min,
// histogram); use it when only quantiles of recent values are read, as a
// backup policy reads its channel's latencies. Close it when done.
type Histogram struct {
	hist      *percentileHist
	closeOnce sync.Once
}

// NewHistogram returns a histogram whose window is windowSeconds long
// (<= 0 means 10; at most MaxWindowSize).
func NewHistogram(windowSeconds int) (*Histogram, error) {
	if windowSeconds <= 0 {
		windowSeconds = defaultLatencyWindow
	}
	if windowSeconds > MaxWindowSize {
		return nil, fmt.Errorf("bvar: histogram window %d s is larger than %d", windowSeconds, MaxWindowSize)
	}
	h := &Histogram{hist: newPercentileHist(windowSeconds)}
	addSource(h.hist)
	return h, nil
}

// RecordUs records one value in µs (a negative one counts as 0).
func (h *Histogram) RecordUs(us int64) { h.hist.record(us) }

// RecentLatencies returns a copy of the most recent values: those
// recorded since the last one-second sample, then whole seconds of the
// window, newest first: at least minSeconds of them, and more until at
// least minCount values are taken or the window is used up. It sees
// values at once (no wait for the first seconds), and it follows a change
// within minSeconds at high rates.
func (h *Histogram) RecentLatencies(minCount int64, minSeconds int) *LatencySnapshot {
	return &LatencySnapshot{h.hist.recent(uint64(max(minCount, 1)), minSeconds)}
}

// Close stops sampling the histogram. It may be called more than once.
func (h *Histogram) Close() { h.closeOnce.Do(func() { removeSource(h.hist) }) }
