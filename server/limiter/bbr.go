package limiter

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// The bbr limiter's constants.
const (
	// bbrWindow is what the limiter remembers: bbrBuckets buckets of
	// bbrBucket each (10 s of 100 ms buckets, as TiKV PD's).
	bbrWindow  = 10 * time.Second
	bbrBuckets = 100
	bbrBucket  = bbrWindow / bbrBuckets
	// bbrRecent is the recent half of the window, scanned for a sustained
	// rise of the requests in flight.
	bbrRecent = bbrBuckets / 2
	// bbrClockReadsPerBucket: at high rates the hot path reads the clock
	// only about this often per bucket (see gateMask).
	bbrClockReadsPerBucket = 64
	// bbrQueueFactor: the rise of the requests in flight means saturation
	// only when the last bucket's average latency is at least this many
	// times the window's smallest.
	bbrQueueFactor = 1.5
)

// bbrGains is the probe cycle applied to the rate-delay product once the
// limit is set, one phase per step (a step is a bucket, or as many
// buckets as the minimum latency spans): 1/8 above it to find out whether
// the server passes more, 1/8 below it to drain the queue this made and
// re-measure the no-queue latency, then six steps at the product.
var bbrGains = []float64{1.125, 1, 0.875, 1}

const bbrCruisePhase = 3 // the last phase: the cycle starts with the next one

// bbrStat is one bucket: requests admitted and passed (completed), the
// latency of the passed ones in microseconds, and the requests rejected.
// admitted - passes is the net change of the requests in flight.
type bbrStat struct {
	admitted, passes, latencyUs, rejected int64
}

func (s bbrStat) inflight() int64 { return s.admitted - s.passes }

// overloaded reports whether the bucket turned away at least 1/8 of what
// it admitted: the demand clearly exceeded the limit, so what passed
// measured the server, not the demand. A few rejected bursts do not count.
func (s bbrStat) overloaded() bool { return s.rejected > 0 && s.rejected*8 >= s.admitted }

// bbrLimiter is the BBR-like limiter proposed for TiKV PD (after
// go-kratos): it watches the requests in flight, and when they keep rising
// over the recent half of its window the server is saturated, so it limits
// the concurrency to the rate-delay product: the largest pass rate times
// the smallest latency seen in the window.
//
// The original sets that limit once and keeps it. Here the limit then
// keeps tracking the product, recomputed every bucket, and rises again:
//   - the probe cycle (bbrGains) admits 1/8 more for one step; if the
//     server passes more, the largest pass rate, and so the product, grow;
//     the following 1/8-lower step lets the queue drain so the smallest
//     latency is re-measured (the pass rate alone cannot tell a server at
//     its capacity from one with a queue);
//   - only buckets that rejected requests update the pass rate: a bucket
//     that admitted everyone measured the demand, not the capacity, and
//     must not lower the limit;
//   - after a whole window without a rejection or a saturation signal,
//     the limit is lifted: the method is unlimited again until the next
//     saturation.
//
// The hot path is two or three atomic adds and loads; counters are
// cumulative and are cut into buckets by the one caller per bucket that
// wins a compare-and-swap, which then recomputes the limit under a mutex.
type bbrLimiter struct {
	// Read on every request.
	limit  atomic.Int64 // 0: unlimited
	gate   atomic.Int64 // clock-read mask, see gateMask
	bucket atomic.Int64 // the bucket being filled; advancing it elects the updater
	_      [40]byte
	// Written on every request: cumulative counters.
	admitted, passes, latencyUs atomic.Int64
	_                           [40]byte
	rejected                    atomic.Int64
	_                           [56]byte

	mu        sync.Mutex // the once-per-bucket update
	ring      [bbrBuckets]bbrStat
	rolled    int64   // the bucket the counts since prev belong to
	prev      bbrStat // the counters when rolled began
	base      int64   // the rate-delay product; 0 while unlimited
	rate      float64 // passes per second base is computed from
	boundAt   int64   // the last bucket that rejected or was saturated
	phase     int     // index in bbrGains
	phaseLeft int     // buckets left in this phase
	now       func() int64
}

// NewBBR returns the "bbr" limiter: unlimited until the requests in flight
// keep rising, then max pass rate × min latency, probed and lifted again
// as described on bbrLimiter.
func NewBBR() Limiter { return newBBR(monoNow) }

func newBBR(now func() int64) *bbrLimiter {
	b := &bbrLimiter{now: now}
	b.rolled = now() / int64(bbrBucket)
	b.bucket.Store(b.rolled)
	return b
}

func (b *bbrLimiter) OnRequested(concurrency int64, _ Request) bool {
	if lim := b.limit.Load(); lim > 0 && concurrency > lim {
		b.rejected.Add(1)
		return false
	}
	if n := b.admitted.Add(1); n&b.gate.Load() == 0 {
		b.tick()
	}
	return true
}

func (b *bbrLimiter) OnResponded(_ int32, latency time.Duration) {
	b.latencyUs.Add(latency.Microseconds())
	if n := b.passes.Add(1); n&b.gate.Load() == 0 {
		b.tick()
	}
}

func (b *bbrLimiter) MaxConcurrency() int64 { return b.limit.Load() }

// tick closes the previous bucket when the clock has left it; one caller
// per bucket wins.
func (b *bbrLimiter) tick() {
	t := b.now() / int64(bbrBucket)
	cur := b.bucket.Load()
	if t <= cur || !b.bucket.CompareAndSwap(cur, t) {
		return
	}
	b.mu.Lock()
	b.roll(t)
	b.mu.Unlock()
}

func bbrSlot(k int64) int { return int((k%bbrBuckets + bbrBuckets) % bbrBuckets) }

// roll files the counts since the last roll under the bucket they were
// collected in, empties the buckets nobody touched, and recomputes the
// limit at the start of bucket t.
func (b *bbrLimiter) roll(t int64) {
	if t <= b.rolled {
		return // a later bucket was rolled first
	}
	cur := bbrStat{
		passes:    b.passes.Load(),
		latencyUs: b.latencyUs.Load(),
		admitted:  b.admitted.Load(),
		rejected:  b.rejected.Load(),
	}
	d := bbrStat{
		admitted:  cur.admitted - b.prev.admitted,
		passes:    cur.passes - b.prev.passes,
		latencyUs: cur.latencyUs - b.prev.latencyUs,
		rejected:  cur.rejected - b.prev.rejected,
	}
	b.prev = cur
	n := t - b.rolled
	if n > bbrBuckets {
		b.ring = [bbrBuckets]bbrStat{}
	} else {
		for k := b.rolled + 1; k < t; k++ {
			b.ring[bbrSlot(k)] = bbrStat{}
		}
		b.ring[bbrSlot(b.rolled)] = d
	}
	b.rolled = t
	b.gate.Store(gateMask(float64(d.admitted+d.passes)/float64(n), bbrClockReadsPerBucket))
	b.update(t)
}

// saturated reports whether the requests in flight kept rising over the
// recent half of the window, buckets t-bbrRecent..t-1: their net change
// sums to at least 1 and, scanning from the oldest, the buckets where it
// rose never fall behind those where it fell.
func (b *bbrLimiter) saturated(t int64) bool {
	var sum, rising, falling int64
	for k := t - bbrRecent; k < t; k++ {
		s := b.ring[bbrSlot(k)]
		d := s.inflight()
		sum += d
		// A change within twice the counting noise of the bucket's
		// traffic (2√(admitted+passes)) is flat: under a steady load the
		// requests in flight wobble up and down from bucket to bucket.
		if d*d > 4*(s.admitted+s.passes) {
			if d > 0 {
				rising++
			} else {
				falling++
			}
		}
		if rising < falling {
			return false
		}
	}
	return sum >= 1
}

// update recomputes the limit at the start of bucket t (mutex held).
func (b *bbrLimiter) update(t int64) {
	minLatencyUs := math.Inf(1)
	var maxPasses, maxBoundPasses int64
	bound := false
	for _, s := range b.ring {
		if s.passes > 0 {
			minLatencyUs = min(minLatencyUs, max(1, float64(s.latencyUs)/float64(s.passes)))
		}
		maxPasses = max(maxPasses, s.passes)
		if s.overloaded() {
			bound = true
			maxBoundPasses = max(maxBoundPasses, s.passes)
		}
	}
	// More requests in flight at the same latency is more demand, not
	// saturation (Little's law): a saturated server also queues.
	last := b.ring[bbrSlot(t-1)]
	queueing := last.passes > 0 && float64(last.latencyUs)/float64(last.passes) >= bbrQueueFactor*minLatencyUs
	saturated := queueing && b.saturated(t)
	if saturated || last.overloaded() {
		b.boundAt = t
	}
	bucketsPerSecond := float64(time.Second) / float64(bbrBucket)

	if b.base == 0 { // unlimited
		if !saturated || maxPasses == 0 {
			return
		}
		b.rate = float64(maxPasses) * bucketsPerSecond
		b.base = rateDelayProduct(b.rate, minLatencyUs)
		b.phase, b.phaseLeft = bbrCruisePhase, 1
		b.limit.Store(b.base)
		return
	}
	if !bound && t-b.boundAt >= bbrBuckets {
		b.base, b.rate = 0, 0 // a whole window without pressure: lift the limit
		b.limit.Store(0)
		return
	}
	if math.IsInf(minLatencyUs, 1) {
		return // nothing passed in the whole window: keep the limit
	}
	if maxBoundPasses > 0 {
		b.rate = float64(maxBoundPasses) * bucketsPerSecond
	}
	b.base = rateDelayProduct(b.rate, minLatencyUs)
	if b.phaseLeft--; b.phaseLeft <= 0 {
		b.phase = (b.phase + 1) % len(bbrGains)
		b.phaseLeft = 1 + int(minLatencyUs*1000/float64(bbrBucket))
	}
	b.limit.Store(max(1, int64(math.Round(float64(b.base)*bbrGains[b.phase]))))
}

// rateDelayProduct is rate (per second) × latency (µs), rounded, at
// least 1.
func rateDelayProduct(rate, latencyUs float64) int64 {
	return max(1, int64(math.Round(rate*latencyUs/1e6)))
}

func init() {
	Register("bbr", func(param string) (Limiter, error) {
		if param != "" {
			return nil, fmt.Errorf("limiter: bbr takes no parameter, got %q", param)
		}
		return NewBBR(), nil
	})
}
