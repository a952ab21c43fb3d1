package limiter

import "github.com/gobrpc/gobrpc/flags"

// windowFlags are the sampling flags of one limiter kind (auto_cl_* or
// timeout_cl_*).
type windowFlags struct {
	intervalMs   *flags.Flag[float64] // at most one sample per interval
	windowMs     *flags.Flag[int32]   // the window lasts at least this long...
	minCount     *flags.Flag[int32]   // ...and holds at least this many samples
	maxCount     *flags.Flag[int32]   // or closes early with this many
	enablePunish *flags.Flag[bool]    // failed requests count as samples
}

// sampleWindow accumulates sampled responses, as brpc's SampleWindow.
type sampleWindow struct {
	startUs              int64
	succCount, failCount int64
	succUs, failUs       int64
}

// windowState is what adding a sample did to the window.
type windowState int

const (
	windowOpen      windowState = iota // keep sampling
	windowDiscarded                    // too few samples in the window's time: start over
	windowFull                         // submit it, then reset
)

// add records a sampled response (brpc's AddSample after the election).
// The caller resets the window when it is discarded or submitted.
func (w *sampleWindow) add(f *windowFlags, code int32, latencyUs, nowUs int64) windowState {
	if w.startUs == 0 {
		w.startUs = nowUs
	}
	if code != 0 && f.enablePunish.Get() {
		w.failCount++
		w.failUs += latencyUs
	} else if code == 0 {
		w.succCount++
		w.succUs += latencyUs
	}
	n := w.succCount + w.failCount
	elapsed := nowUs - w.startUs
	windowUs := int64(f.windowMs.Get()) * 1000
	if n < int64(f.minCount.Get()) {
		if elapsed >= windowUs {
			return windowDiscarded
		}
		return windowOpen
	}
	if elapsed < windowUs && n < int64(f.maxCount.Get()) {
		return windowOpen
	}
	return windowFull
}

func (w *sampleWindow) reset(nowUs int64) { *w = sampleWindow{startUs: nowUs} }
