package limiter

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gobrpc/gobrpc/flags"
)

// brpc's timeout_cl_* flags. None is reloadable (brpc's are not either).
var (
	timeoutSampleWindowSizeMs = flags.DefineInt32("timeout_cl_sample_window_size_ms", 1000,
		"Duration of the sampling window.", nil)
	timeoutMinSampleCount = flags.DefineInt32("timeout_cl_min_sample_count", 100,
		"During the duration of the sampling window, if the number of requests collected is "+
			"less than this value, the sampling window will be discarded.", nil)
	timeoutMaxSampleCount = flags.DefineInt32("timeout_cl_max_sample_count", 200,
		"During the duration of the sampling window, once the number of requests collected is "+
			"greater than this value, even if the duration of the window has not ended, the "+
			"average latency will be updated and a new sampling window will be started.", nil)
	timeoutSamplingIntervalMs = flags.DefineFloat64("timeout_cl_sampling_interval_ms", 0.1,
		"Interval for sampling request in timeout concurrency limiter", nil)
	timeoutInitialAvgLatencyUs = flags.DefineInt32("timeout_cl_initial_avg_latency_us", 500,
		"Initial average latency of the timeout concurrency limiter", nil)
	timeoutEnableErrorPunish = flags.DefineBool("timeout_cl_enable_error_punish", true,
		"Whether to consider failed requests when calculating the average latency", nil)
	timeoutFailPunishRatio = flags.DefineFloat64("timeout_cl_fail_punish_ratio", 1.0,
		"Use the failed requests to punish normal requests. The larger the configuration item, "+
			"the more aggressive the penalty strategy.", nil)
	timeoutDefaultTimeoutMs = flags.DefineInt32("timeout_cl_default_timeout_ms", 500,
		"Default timeout for rpc request", nil)
	timeoutMaxConcurrency = flags.DefineInt32("timeout_cl_max_concurrency", 100,
		"When average latency statistics not refresh, this flag can keep requests not exceed "+
			"this max concurrency", nil)
)

var timeoutWindowFlags = windowFlags{
	intervalMs:   timeoutSamplingIntervalMs,
	windowMs:     timeoutSampleWindowSizeMs,
	minCount:     timeoutMinSampleCount,
	maxCount:     timeoutMaxSampleCount,
	enablePunish: timeoutEnableErrorPunish,
}

// timeoutLimiter is brpc's TimeoutConcurrencyLimiter: it admits a request
// while the sampled average latency is below the request's timeout (and
// the concurrency within max_concurrency), so that requests which would
// time out anyway are rejected at once and retried elsewhere.
type timeoutLimiter struct {
	// Read on every request.
	avgLatencyUs   atomic.Int64
	gate           atomic.Int64 // clock-read mask, see gateMask
	timeoutMs      int64
	maxConcurrency int64
	_              [32]byte
	// Written on every response (only to amortize clock reads).
	responses atomic.Int64
	_         [56]byte
	// Set when a request is rejected; cleared with each new window.
	shedding atomic.Bool
	_        [63]byte
	// Written once per sampling interval.
	lastSamplingUs atomic.Int64
	_              [56]byte

	mu  sync.Mutex // the elected sampler
	sw  sampleWindow
	now func() int64
}

// NewTimeout returns brpc's "timeout" limiter (TimeoutConcurrencyConf):
// it admits a request when it is the only one in flight, or when the
// concurrency is at most maxConcurrency and the average latency is below
// the request's timeout. The timeout is the one the client sent (baidu_std
// meta field 8), else timeoutMs. A value <= 0 takes the flag
// (-timeout_cl_default_timeout_ms 500, -timeout_cl_max_concurrency 100).
func NewTimeout(timeoutMs, maxConcurrency int64) Limiter {
	return newTimeout(timeoutMs, maxConcurrency, monoNow)
}

func newTimeout(timeoutMs, maxConcurrency int64, now func() int64) *timeoutLimiter {
	if timeoutMs <= 0 {
		timeoutMs = int64(timeoutDefaultTimeoutMs.Get())
	}
	if maxConcurrency <= 0 {
		maxConcurrency = int64(timeoutMaxConcurrency.Get())
	}
	l := &timeoutLimiter{timeoutMs: timeoutMs, maxConcurrency: maxConcurrency, now: now}
	l.avgLatencyUs.Store(int64(timeoutInitialAvgLatencyUs.Get()))
	return l
}

func (l *timeoutLimiter) OnRequested(concurrency int64, req Request) bool {
	timeoutMs := l.timeoutMs
	if req.TimeoutMs > 0 {
		timeoutMs = req.TimeoutMs
	}
	// Admitting a lone request even when the average is over the timeout
	// keeps the average measurable, so the limiter can reopen.
	if concurrency == 1 ||
		(concurrency <= l.maxConcurrency && l.avgLatencyUs.Load() < timeoutMs*1000) {
		return true
	}
	if !l.shedding.Load() {
		l.shedding.Store(true)
	}
	return false
}

func (l *timeoutLimiter) OnResponded(errorCode int32, latency time.Duration) {
	if errorCode == elimit {
		return
	}
	if n := l.responses.Add(1); n&l.gate.Load() != 0 {
		return // not this one: see gateMask
	}
	nowUs := l.now() / 1000
	last := l.lastSamplingUs.Load()
	if last == 0 || float64(nowUs-last) >= timeoutSamplingIntervalMs.Get()*1000 {
		if l.lastSamplingUs.CompareAndSwap(last, nowUs) {
			l.addSample(errorCode, latency.Microseconds(), nowUs)
		}
	}
}

// MaxConcurrency is the configured cap: the latency test has no fixed
// limit of its own.
func (l *timeoutLimiter) MaxConcurrency() int64 { return l.maxConcurrency }

func (l *timeoutLimiter) addSample(code int32, latencyUs, nowUs int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch l.sw.add(&timeoutWindowFlags, code, latencyUs, nowUs) {
	case windowOpen:
		return
	case windowDiscarded:
		// brpc discards a window that ends with too few samples. But while
		// the limiter sheds, only lone requests run, and a method slower
		// than 10 ms then never collects -timeout_cl_min_sample_count
		// samples in a window: the average would never come down and the
		// limiter would stay shut. So a starved window is submitted.
		if !l.shedding.Load() {
			l.responses.Store(0)
			l.reset(nowUs)
			return
		}
	}
	if l.sw.succCount > 0 {
		failedPunish := float64(l.sw.failUs) * timeoutFailPunishRatio.Get()
		l.avgLatencyUs.Store(int64(math.Ceil((failedPunish + float64(l.sw.succUs)) / float64(l.sw.succCount))))
	} else {
		l.avgLatencyUs.Store(l.avgLatencyUs.Load() * 2) // every request failed
	}
	// At high rates read the clock about 8 times per sampling interval.
	if elapsed := nowUs - l.sw.startUs; elapsed > 0 {
		rate := 1e6 * float64(l.responses.Swap(0)) / float64(elapsed)
		l.gate.Store(gateMask(rate*timeoutSamplingIntervalMs.Get()/1000, 8))
	}
	l.reset(nowUs)
}

func (l *timeoutLimiter) reset(nowUs int64) {
	l.sw.reset(nowUs)
	l.shedding.Store(false)
}

// parseTimeoutParam reads "300" (timeout_ms) or
// "timeout_ms=300,max_concurrency=50".
func parseTimeoutParam(param string) (timeoutMs, maxConcurrency int64, err error) {
	param = strings.TrimSpace(param)
	if param == "" {
		return 0, 0, nil
	}
	if n, err := strconv.ParseInt(param, 10, 64); err == nil && n > 0 {
		return n, 0, nil
	}
	for _, kv := range strings.Split(param, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if !ok || err != nil || n <= 0 {
			return 0, 0, fmt.Errorf("limiter: bad timeout parameter %q (want \"300\" or \"timeout_ms=300,max_concurrency=50\")", param)
		}
		switch strings.TrimSpace(k) {
		case "timeout_ms":
			timeoutMs = n
		case "max_concurrency":
			maxConcurrency = n
		default:
			return 0, 0, fmt.Errorf("limiter: unknown timeout parameter %q (want timeout_ms or max_concurrency)", k)
		}
	}
	return timeoutMs, maxConcurrency, nil
}

func init() {
	Register("timeout", func(param string) (Limiter, error) {
		timeoutMs, maxConcurrency, err := parseTimeoutParam(param)
		if err != nil {
			return nil, err
		}
		return NewTimeout(timeoutMs, maxConcurrency), nil
	})
}
