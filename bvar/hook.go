package bvar

import (
	"sync/atomic"
	"time"
)

// SampleHook runs a function once a second in the sampler's pass, right
// after the variables are sampled: brpc's user-level Sampler. Use it for
// state that must move in step with the windows (a per-second budget); the
// function must be quick, since it delays every other sample.
type SampleHook struct {
	fn     func(now time.Time)
	closed atomic.Bool
}

// NewSampleHook starts calling fn once a second (at every SampleAt in
// manual mode). Close it when done.
func NewSampleHook(fn func(now time.Time)) *SampleHook {
	h := &SampleHook{fn: fn}
	addHook(h)
	return h
}

func (h *SampleHook) takeSample(nowNs int64) {
	if !h.closed.Load() {
		h.fn(time.Unix(0, nowNs))
	}
}

// Close stops the calls; one already running finishes.
func (h *SampleHook) Close() {
	if !h.closed.Swap(true) {
		removeSource(h)
	}
}
