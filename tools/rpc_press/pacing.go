package main

import (
	"math"
	"time"
)

const (
	// maxAutoThreads is the most threads -thread_num=0 picks.
	maxAutoThreads = 50
	// qpsPerAutoThread is the rate -thread_num=0 gives each thread.
	qpsPerAutoThread = 10000
	// maxQPSPerThread is the fastest one thread paces: one call a µs.
	maxQPSPerThread = 1e6
	// minResyncLag is the least lag that makes a thread resynchronize.
	minResyncLag = 10 * time.Millisecond
	// resyncIntervals is the lag, in call intervals, that makes a thread
	// resynchronize when that is more than minResyncLag.
	resyncIntervals = 10
)

// autoThreadNum is brpc's rule for -thread_num=0: one thread per 10000
// qps, between 1 and 50, and 50 when the rate is unlimited (qps <= 0).
func autoThreadNum(qps int) int {
	if qps <= 0 {
		return maxAutoThreads
	}
	return min(max(qps/qpsPerAutoThread, 1), maxAutoThreads)
}

// callInterval is the time between two calls of one thread when threads
// share qps calls a second: 1e9/(qps/threads) ns, and at least 1 µs (at
// most 1e6 calls a second per thread). It is 0 when qps <= 0 (unlimited).
func callInterval(qps, threads int) float64 {
	if qps <= 0 || threads <= 0 {
		return 0
	}
	perThread := min(float64(qps)/float64(threads), maxQPSPerThread)
	return 1e9 / perThread
}

// pacer spaces one thread's calls interval ns apart. The k-th call since
// the last resynchronization is due at base + k*interval, so rounding
// never accumulates and a thread that fell a little behind (a slow
// scheduler, a GC pause) catches up by sending at once. One that fell more
// than max(10 ms, 10 intervals) behind resynchronizes instead: it sends
// now and paces the next calls from now, rather than bursting to make up
// for all it missed. Times are ns on any monotonic clock.
type pacer struct {
	interval float64 // ns between calls
	maxLag   int64   // ns behind schedule that triggers a resync
	base     int64   // when call 0 was due
	k        int64   // calls sent since base
}

func newPacer(interval float64, now int64) *pacer {
	return &pacer{
		interval: interval,
		maxLag:   max(int64(minResyncLag), int64(math.Min(resyncIntervals*interval, math.MaxInt64/2))),
		base:     now,
	}
}

// due is when the next call is due.
func (p *pacer) due() int64 { return p.base + int64(float64(p.k)*p.interval) }

// wait returns how long to wait before the next call, 0 when it is due;
// it resynchronizes when the thread is too far behind.
func (p *pacer) wait(now int64) time.Duration {
	d := p.due() - now
	if d > 0 {
		return time.Duration(d)
	}
	if -d > p.maxLag {
		p.base, p.k = now, 0
	}
	return 0
}

// sent records that the due call went out.
func (p *pacer) sent() { p.k++ }

// autoMaxInflight is the default bound on one thread's calls in flight:
// twice the calls it makes in one timeout (1 s when the timeout is
// unlimited), between 64 and 10000. Calls end at their deadline, so it is
// reached only when they outlive it; then the thread waits for a slot
// instead of piling up calls without bound.
func autoMaxInflight(qps, threads int, timeoutMs int32) int {
	if qps <= 0 {
		return 1 // each thread waits for its call anyway
	}
	t := 1.0
	if timeoutMs > 0 {
		t = float64(timeoutMs) / 1000
	}
	perThread := 1e9 / callInterval(qps, threads)
	return int(min(max(math.Ceil(2*perThread*t), 64), 10000))
}
