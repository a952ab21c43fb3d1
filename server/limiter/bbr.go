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
	bbrWindow   = 10 * time.Second
	bbrBuckets  = 100
	bbrBucket   = bbrWindow / bbrBuckets
	bbrBucketUs = int64(bbrBucket / time.Microsecond)
	// bbrRecent is the recent half of the window, scanned for a sustained
	// rise of the requests in flight.
	bbrRecent = bbrBuckets / 2
	// bbrQueueFactor: a rise of the requests in flight is saturation only
	// when the last bucket's average latency is at least this many times
	// the window's smallest.
	bbrQueueFactor = 1.5
	// bbrClockReadsPerBucket: at high rates the hot path reads the clock
	// only about this often per bucket (see gateMask).
	bbrClockReadsPerBucket = 64
	// bbrPassBits: see bbrLimiter.passed.
	bbrPassBits = 24
)

// bbrGains is the probe cycle applied to the rate-delay product once the
// limit is set, one phase per sample (b.group buckets): 10% above it, to
// learn whether the server can pass more; the product; 12.5% below it,
// so that the queue drains and the no-queue latency is measured again;
// the product.
var bbrGains = [...]float64{1.1, 1, 0.875, 1}

const bbrCruisePhase = 3 // the last phase: a new cycle starts with the next

// bbrStat is one bucket (or a sum of buckets): requests admitted and
// passed (completed), the latency of the passed ones in microseconds, and
// the requests rejected. admitted - passes is the net change of the
// requests in flight.
type bbrStat struct {
	admitted, passes, latencyUs, rejected int64
}

func (s bbrStat) inflight() int64 { return s.admitted - s.passes }

// plus returns s + sign×o.
func (s bbrStat) plus(o bbrStat, sign int64) bbrStat {
	return bbrStat{
		admitted:  s.admitted + sign*o.admitted,
		passes:    s.passes + sign*o.passes,
		latencyUs: s.latencyUs + sign*o.latencyUs,
		rejected:  s.rejected + sign*o.rejected,
	}
}

// overloaded reports whether the sample turned away at least 1/8 of what
// it admitted: the demand clearly exceeded the limit, so what passed
// measured the server, not the demand. A few rejected bursts do not count.
func (s bbrStat) overloaded() bool { return s.rejected > 0 && s.rejected*8 >= s.admitted }

// bbrLimiter is the BBR-like limiter proposed for TiKV PD (after
// go-kratos). It counts, in a window of 100 buckets of 100 ms, the
// requests admitted and passed, their latency and the net change of the
// requests in flight. When the requests in flight keep rising over the
// recent half of the window (their net changes sum to at least 1 and,
// scanning from the oldest bucket, rising buckets never fall behind
// falling ones), the server is saturated: the limit becomes the
// rate-delay product, the largest pass rate times the smallest latency in
// the window, rounded, at least 1. It is recomputed at most once per
// bucket, by the caller that wins a compare-and-swap.
//
// Two refinements make the saturation signal robust: a bucket rises or
// falls only by more than 4σ of its own noise (a wobble read as a fall
// would hide a real rise for half a window), and a rise counts only when
// the last bucket's latency is at least 1.5 × the window's smallest — more
// requests in flight at the same latency is more demand, not saturation.
//
// The original sets the limit once and keeps it forever. Here it rises
// (and falls) again:
//   - Drain: when the limit is first set it holds half the product until
//     the queue built before is gone and the smallest latency stops
//     falling: on a server overloaded from its first request the window
//     holds no queue-free latency yet, and each halving reveals a lower
//     one (BBR's drain).
//   - Probe: then the limit is the product, recomputed every bucket, times
//     the gain of a probe cycle (bbrGains): 10% above, to learn whether
//     the server passes more — if so the largest pass rate, and the limit
//     with it, rise; 12.5% below, so that the smallest latency is
//     re-measured without a queue (the pass rate alone cannot tell a
//     server at capacity from one with a queue).
//   - Only overloaded samples (see overloaded) update the pass rate: a
//     sample that admitted nearly everyone measured the demand, not the
//     capacity, and must not lower the limit.
//   - Lift: after a whole window without an overloaded sample or a
//     saturation signal, the limit is lifted: the method is unlimited
//     again until the next saturation.
//
// A sample (rate or latency) spans b.group buckets, at least four
// smallest latencies, so that how many requests pass in it does not depend
// on which ones happened to end inside it; each probe phase lasts one
// sample.
//
// The hot path is one atomic add and two loads on each side (request and
// response): the counters are cumulative, and the updater cuts them into
// buckets.
type bbrLimiter struct {
	// Read on every request.
	limit  atomic.Int64 // 0: unlimited
	gate   atomic.Int64 // clock-read mask, see gateMask
	bucket atomic.Int64 // the bucket being filled; advancing it elects the updater
	_      [40]byte
	// Written on every request: cumulative counters. passed packs the
	// passes (low bbrPassBits) and their latency in µs (the rest): one
	// atomic add per response. The fields wrap, but the difference of two
	// snapshots is exact while a bucket has under 2^bbrPassBits passes
	// and 2^(64-bbrPassBits) µs of latency.
	admitted atomic.Int64
	passed   atomic.Uint64
	_        [48]byte
	rejected atomic.Int64
	_        [56]byte

	mu         sync.Mutex // the once-per-bucket update
	ring       [bbrBuckets]bbrStat
	rolled     int64   // the bucket the counts since prev belong to
	prev       bbrStat // the counters when rolled began (passes: total)
	prevPassed uint64  // passed when rolled began
	base       int64   // the rate-delay product; 0 while unlimited
	rate       float64 // passes per second base is computed from
	boundAt    int64   // the last bucket that rejected or was saturated
	phase      int     // index in bbrGains
	phaseLeft  int     // buckets left in this phase
	group      int     // buckets per sample and per phase
	// Draining: the limit was just set; see update.
	draining      bool
	drainSteady   int     // buckets in a row with no queue and a steady minimum latency
	drainMinUs    float64 // the minimum latency at the last bucket
	drainInflight int64   // the requests in flight at the last bucket
	now           func() int64
}

// NewBBR returns the "bbr" limiter: unlimited until the requests in flight
// keep rising, then max pass rate × min latency, probed and lifted again
// as described on bbrLimiter.
func NewBBR() Limiter { return newBBR(monoNow) }

func newBBR(now func() int64) *bbrLimiter {
	b := &bbrLimiter{now: now, group: 1}
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
	us := max(0, latency.Microseconds())
	if n := b.passed.Add(uint64(us)<<bbrPassBits | 1); int64(n)&b.gate.Load() == 0 {
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
	passed := b.passed.Load()
	cur := bbrStat{admitted: b.admitted.Load(), rejected: b.rejected.Load()}
	dp := passed - b.prevPassed
	d := bbrStat{
		admitted:  cur.admitted - b.prev.admitted,
		passes:    int64(dp & (1<<bbrPassBits - 1)),
		latencyUs: int64(dp >> bbrPassBits),
		rejected:  cur.rejected - b.prev.rejected,
	}
	cur.passes = b.prev.passes + d.passes
	b.prev, b.prevPassed = cur, passed
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
		// A change within 4σ of its noise is flat: under a steady load
		// the requests in flight wobble from bucket to bucket by about
		// σ = √(admitted + passes + 2×in flight), the count in flight
		// being latency-sum / bucket length (Little's law). One wobble
		// taken for a fall would hide a real rise for half a window.
		if d*d > 16*(s.admitted+s.passes+2*s.latencyUs/bbrBucketUs) {
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
	// The samples of pass rate and latency span b.group buckets (at least
	// four minimum latencies), so that how many requests pass in a sample
	// does not depend on which ones happened to end inside it.
	r := int64(b.group)
	var group bbrStat // the r buckets ending at k
	minLatencyUs := math.Inf(1)
	var maxPasses, maxBoundPasses int64
	bound := false
	for k := t - bbrBuckets; k < t; k++ {
		group = group.plus(b.ring[bbrSlot(k)], 1)
		if k-r >= t-bbrBuckets {
			group = group.plus(b.ring[bbrSlot(k-r)], -1)
		}
		if k < t-bbrBuckets+r-1 {
			continue // not r buckets yet
		}
		if group.passes > 0 {
			minLatencyUs = min(minLatencyUs, max(1, float64(group.latencyUs)/float64(group.passes)))
		}
		maxPasses = max(maxPasses, group.passes)
		if group.overloaded() {
			bound = true
			maxBoundPasses = max(maxBoundPasses, group.passes)
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
	if !math.IsInf(minLatencyUs, 1) {
		b.group = int(min(max(1, math.Ceil(4*minLatencyUs/float64(bbrBucketUs))), bbrBuckets/4))
	}
	samplesPerSecond := float64(time.Second) / float64(bbrBucket) / float64(r)

	if b.base == 0 { // unlimited
		if !saturated || maxPasses == 0 {
			return
		}
		b.rate = float64(maxPasses) * samplesPerSecond
		b.base = rateDelayProduct(b.rate, minLatencyUs)
		b.draining, b.drainSteady, b.drainMinUs = true, 0, minLatencyUs
		b.drainInflight = b.prev.admitted - b.prev.passes
		b.limit.Store(max(1, b.base/2))
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
		b.rate = float64(maxBoundPasses) * samplesPerSecond
	}
	b.base = rateDelayProduct(b.rate, minLatencyUs)
	if b.draining {
		// Hold half the product until the queue is gone and the minimum
		// latency stops falling for a sample's length: when the window
		// held no queue-free latency (a server overloaded from its first
		// request), each halving reveals a lower one.
		limit := max(1, b.base/2)
		inflight := b.prev.admitted - b.prev.passes
		if inflight <= limit && b.drainInflight <= limit && minLatencyUs >= b.drainMinUs*7/8 {
			b.drainSteady++ // a whole bucket without a queue, and no lower latency
		} else {
			b.drainSteady = 0
		}
		b.drainMinUs, b.drainInflight = minLatencyUs, inflight
		if b.drainSteady <= b.group {
			b.limit.Store(limit)
			return
		}
		b.draining = false
		b.phase, b.phaseLeft = bbrCruisePhase, 1
	}
	if b.phaseLeft--; b.phaseLeft <= 0 {
		b.phase = (b.phase + 1) % len(bbrGains)
		b.phaseLeft = b.group
	}
	b.limit.Store(probeLimit(b.base, bbrGains[b.phase]))
}

// probeLimit applies a probe gain to the rate-delay product. A probe
// moves the limit by at least one request: with a small product (4 × 1.1
// and 4 × 0.875 both round to 4) rounding alone would never probe, and a
// product learned too low (from a drain) would never climb back.
func probeLimit(base int64, gain float64) int64 {
	l := int64(math.Round(float64(base) * gain))
	switch {
	case gain > 1 && l <= base:
		l = base + 1
	case gain < 1 && l >= base && base > 1:
		l = base - 1
	}
	return max(1, l)
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
