package limiter

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/flags"
)

// brpc's auto_cl_* flags. None is reloadable (brpc's are not either).
var (
	autoSamplingIntervalMs = flags.DefineFloat64("auto_cl_sampling_interval_ms", 0.1,
		"Interval for sampling request in auto concurrency limiter", nil)
	autoSampleWindowSizeMs = flags.DefineInt32("auto_cl_sample_window_size_ms", 1000,
		"Duration of the sampling window.", nil)
	autoMinSampleCount = flags.DefineInt32("auto_cl_min_sample_count", 100,
		"During the duration of the sampling window, if the number of requests collected is "+
			"less than this value, the sampling window will be discarded.", nil)
	autoMaxSampleCount = flags.DefineInt32("auto_cl_max_sample_count", 200,
		"During the duration of the sampling window, once the number of requests collected is "+
			"greater than this value, even if the duration of the window has not ended, the "+
			"max_concurrency will be updated and a new sampling window will be started.", nil)
	autoInitialMaxConcurrency = flags.DefineInt32("auto_cl_initial_max_concurrency", 40,
		"Initial max concurrency for auto concurrency limiter", nil)
	autoRemeasureIntervalMs = flags.DefineInt32("auto_cl_noload_latency_remeasure_interval_ms", 50000,
		"Interval for remeasurement of noload_latency. In the period of remeasurement of "+
			"noload_latency will reduce max_concurrency.", nil)
	autoAlphaFactorForEMA = flags.DefineFloat64("auto_cl_alpha_factor_for_ema", 0.1,
		"The smoothing coefficient used in the calculation of ema, the value range is 0-1. The "+
			"smaller the value, the smaller the effect of a single sample_window on max_concurrency.", nil)
	autoEnableErrorPunish = flags.DefineBool("auto_cl_enable_error_punish", true,
		"Whether to consider failed requests when calculating maximum concurrency", nil)
	autoFailPunishRatio = flags.DefineFloat64("auto_cl_fail_punish_ratio", 1.0,
		"Use the failed requests to punish normal requests. The larger the configuration item, "+
			"the more aggressive the penalty strategy.", nil)
	autoErrorRatePunishThreshold = flags.DefineFloat64("auto_cl_error_rate_punish_threshold", 0,
		"Threshold for error-rate-based punishment attenuation, in [0, 1); 0 disables it. "+
			"e.g. 0.1: error rates below 10% produce zero punishment; above it the punishment "+
			"scales linearly from 0 to full strength.", nil)
	autoMaxExploreRatio = flags.DefineFloat64("auto_cl_max_explore_ratio", 0.3,
		"The larger the value, the higher the tolerance of the server to the fluctuation of "+
			"latency at low load, and the greater the maximum growth rate of qps.", nil)
	autoMinExploreRatio = flags.DefineFloat64("auto_cl_min_explore_ratio", 0.06,
		"Auto concurrency limiter will perform fault tolerance based on this parameter when "+
			"judging the load situation of the server. It should be a positive value close to 0, "+
			"the larger it is, the higher the latency of the server at full load.", nil)
	autoChangeRateOfExploreRatio = flags.DefineFloat64("auto_cl_change_rate_of_explore_ratio", 0.02,
		"The speed of change of the explore ratio when the load situation of the server "+
			"changes, in (0, auto_cl_max_explore_ratio)", nil)
	autoReduceRatioWhileRemeasure = flags.DefineFloat64("auto_cl_reduce_ratio_while_remeasure", 0.9,
		"This value affects the reduction ratio to max_concurrency during remeasuring "+
			"noload_latency. The value range is (0-1)", nil)
	autoLatencyFluctuationCorrectionFactor = flags.DefineInt32("auto_cl_latency_fluctuation_correction_factor", 1,
		"Affect the judgement of the server's load situation. The larger the value, the higher "+
			"the tolerance for the fluctuation of the latency.", nil)
)

var autoWindowFlags = windowFlags{
	intervalMs:   autoSamplingIntervalMs,
	windowMs:     autoSampleWindowSizeMs,
	minCount:     autoMinSampleCount,
	maxCount:     autoMaxSampleCount,
	enablePunish: autoEnableErrorPunish,
}

// elimit is the code of a request the limiter itself rejected.
const elimit = int32(controller.ELIMIT)

// autoLimiter is brpc's AutoConcurrencyLimiter: it estimates the no-load
// latency and the peak qps from sampled responses and admits
// min_latency × max_qps × (1 + explore_ratio) requests at once.
//
// The hot path is an atomic load (OnRequested) and an atomic add plus a
// clock read (OnResponded); at high rates only every few responses read
// the clock (see gateMask). A response at least
// auto_cl_sampling_interval_ms after the last sample is sampled by
// whoever wins a compare-and-swap; only that caller takes the mutex.
type autoLimiter struct {
	// Read on every request.
	maxConcurrency atomic.Int64
	gate           atomic.Int64 // clock-read mask, see gateMask
	_              [48]byte
	// Written on every successful response.
	totalSucc atomic.Int64
	_         [56]byte
	// Written once per sampling interval.
	lastSamplingUs atomic.Int64
	_              [56]byte

	mu               sync.Mutex // the elected sampler
	sw               sampleWindow
	remeasureStartUs int64 // when to remeasure the no-load latency
	resetLatencyUs   int64 // != 0: forget min_latency at this time
	minLatencyUs     int64 // -1: unknown
	emaMaxQps        float64
	exploreRatio     float64

	floor int64             // the smallest limit (brpc: -bthread_concurrency)
	now   func() int64      // nanoseconds, monotonic
	randN func(int64) int64 // in [0, n)
}

// NewAuto returns brpc's "auto" limiter, configured by the auto_cl_*
// flags. Its limit starts at -auto_cl_initial_max_concurrency and never
// falls below GOMAXPROCS (brpc: -bthread_concurrency).
func NewAuto() Limiter { return newAuto(monoNow, rand.Int64N, int64(runtime.GOMAXPROCS(0))) }

func newAuto(now func() int64, randN func(int64) int64, floor int64) *autoLimiter {
	a := &autoLimiter{
		minLatencyUs: -1,
		emaMaxQps:    -1,
		exploreRatio: autoMaxExploreRatio.Get(),
		floor:        floor,
		now:          now,
		randN:        randN,
	}
	a.maxConcurrency.Store(int64(autoInitialMaxConcurrency.Get()))
	a.remeasureStartUs = a.nextResetTime(now() / 1000)
	return a
}

func (a *autoLimiter) OnRequested(concurrency int64, _ Request) bool {
	return concurrency <= a.maxConcurrency.Load()
}

func (a *autoLimiter) OnResponded(errorCode int32, latency time.Duration) {
	if errorCode == 0 {
		if n := a.totalSucc.Add(1); n&a.gate.Load() != 0 {
			return // not this one: see gateMask
		}
	} else if errorCode == elimit {
		return
	}
	nowUs := a.now() / 1000
	last := a.lastSamplingUs.Load()
	if last == 0 || float64(nowUs-last) >= autoSamplingIntervalMs.Get()*1000 {
		if a.lastSamplingUs.CompareAndSwap(last, nowUs) {
			a.addSample(errorCode, latency.Microseconds(), nowUs)
		}
	}
}

func (a *autoLimiter) MaxConcurrency() int64 { return a.maxConcurrency.Load() }

func (a *autoLimiter) nextResetTime(nowUs int64) int64 {
	half := int64(autoRemeasureIntervalMs.Get()) / 2
	var r int64
	if half > 0 {
		r = a.randN(half)
	}
	return nowUs + (half+r)*1000
}

func (a *autoLimiter) addSample(code int32, latencyUs, nowUs int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.resetLatencyUs != 0 {
		if a.resetLatencyUs > nowUs {
			return // waiting for the queue to drain before remeasuring
		}
		// Remeasure min_latency now that the concurrency has been low.
		a.minLatencyUs = -1
		a.resetLatencyUs = 0
		a.remeasureStartUs = a.nextResetTime(nowUs)
		a.resetWindow(nowUs)
	}
	switch a.sw.add(&autoWindowFlags, code, latencyUs, nowUs) {
	case windowOpen:
		return
	case windowDiscarded:
		a.resetWindow(nowUs)
		return
	}
	if a.sw.succCount > 0 {
		a.updateMaxConcurrency(nowUs)
	} else {
		a.adjustMaxConcurrency(a.maxConcurrency.Load() / 2) // every request failed
	}
	a.resetWindow(nowUs)
}

func (a *autoLimiter) resetWindow(nowUs int64) {
	a.totalSucc.Store(0)
	a.sw.reset(nowUs)
}

func (a *autoLimiter) updateMinLatency(latencyUs int64) {
	ema := autoAlphaFactorForEMA.Get()
	if a.minLatencyUs <= 0 {
		a.minLatencyUs = latencyUs
	} else if latencyUs < a.minLatencyUs {
		a.minLatencyUs = int64(float64(latencyUs)*ema + float64(a.minLatencyUs)*(1-ema))
	}
}

func (a *autoLimiter) updateQps(qps float64) {
	ema := autoAlphaFactorForEMA.Get() / 10
	if qps >= a.emaMaxQps {
		a.emaMaxQps = qps
	} else {
		a.emaMaxQps = qps*ema + a.emaMaxQps*(1-ema)
	}
}

func (a *autoLimiter) adjustMaxConcurrency(next int64) {
	a.maxConcurrency.Store(max(next, a.floor))
}

func (a *autoLimiter) updateMaxConcurrency(nowUs int64) {
	totalSucc := a.totalSucc.Load()
	failedPunish := float64(a.sw.failUs) * autoFailPunishRatio.Get()
	// Low error rates need not inflate the latency (brpc's
	// auto_cl_error_rate_punish_threshold).
	if th := autoErrorRatePunishThreshold.Get(); th > 0 && th < 1 && a.sw.failCount > 0 {
		errorRate := float64(a.sw.failCount) / float64(a.sw.succCount+a.sw.failCount)
		if errorRate <= th {
			failedPunish = 0
		} else {
			failedPunish *= (errorRate - th) / (1 - th)
		}
	}
	avgLatency := int64(math.Ceil((failedPunish + float64(a.sw.succUs)) / float64(a.sw.succCount)))
	qps := 1e6 * float64(totalSucc) / float64(max(1, nowUs-a.sw.startUs))
	a.updateMinLatency(avgLatency)
	a.updateQps(qps)
	// At high rates read the clock about 8 times per sampling interval.
	a.gate.Store(gateMask(qps*autoSamplingIntervalMs.Get()/1000, 8))

	var next int64
	if a.remeasureStartUs <= nowUs {
		// Remeasure the no-load latency: lower the limit, wait for the
		// queue to drain (2 × avg_latency), then forget min_latency.
		a.resetLatencyUs = nowUs + avgLatency*2
		next = int64(math.Ceil(a.emaMaxQps * float64(a.minLatencyUs) / 1e6 * autoReduceRatioWhileRemeasure.Get()))
	} else {
		step := autoChangeRateOfExploreRatio.Get()
		maxRatio, minRatio := autoMaxExploreRatio.Get(), autoMinExploreRatio.Get()
		correction := float64(autoLatencyFluctuationCorrectionFactor.Get())
		if float64(avgLatency) <= float64(a.minLatencyUs)*(1+minRatio*correction) ||
			qps <= a.emaMaxQps/(1+minRatio) {
			a.exploreRatio = min(maxRatio, a.exploreRatio+step)
		} else {
			a.exploreRatio = max(minRatio, a.exploreRatio-step)
		}
		next = int64(float64(a.minLatencyUs) * a.emaMaxQps / 1e6 * (1 + a.exploreRatio))
	}
	a.adjustMaxConcurrency(next)
}

func init() {
	Register("auto", func(param string) (Limiter, error) {
		if param != "" {
			return nil, fmt.Errorf("limiter: auto takes no parameter (its settings are the auto_cl_* flags), got %q", param)
		}
		return NewAuto(), nil
	})
}
