package bvar

import (
	"encoding/binary"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
)

// The percentiles of a LatencyRecorder come from a log-linear histogram
// (HDR-like) of microsecond values, counted per P like an Adder and cut
// into one-second deltas by the sampler.
//
// Why a histogram and not brpc's reservoir samples: brpc keeps up to 254
// random samples per power of two per thread and merges them, so its
// error depends on the traffic and on luck. Fixed buckets give a bound
// that holds for any distribution: values 0..127 µs are counted exactly
// and above that each power of two is cut into 64 buckets, so a bucket is
// at most 1/64 (1.6%) of its value wide. The value at a rank is
// interpolated within its bucket, so the rank error is a fraction of the
// share of samples in one bucket, which is below 1% for any distribution
// that is not concentrated within 1.6% of one value (a test checks
// log-normal, uniform and bimodal samples).
//
// Memory: every P has an array of 27 pointers to 64-counter chunks (one
// chunk per power of two, 512 bytes), allocated the first time that P
// records a value in that octave. Latencies of one method span a few
// octaves, so a P holds a few KB, and a P that never records for the
// method holds only its 216-byte pointer array; a dense array would cost
// 13.8 KB per P, 1.3 MB per recorder on a 96-P machine. The window is one
// running histogram (chunks allocated as above) plus, per second, the
// non-zero bucket deltas varint-encoded (about 3 bytes a bucket).

const (
	histSubBits    = 6
	histSubBuckets = 1 << histSubBits // buckets per power of two
	// histMaxUs is the largest value told apart (about 71 minutes); larger
	// ones are counted in the last bucket, which serves as the overflow.
	histMaxUs     = 1<<32 - 1
	histChunks    = 32 - histSubBits + 1 // 0..127 take two chunks, then one per power of two
	histBuckets   = histChunks * histSubBuckets
	histChunkMask = histSubBuckets - 1
)

// histChunk counts the values of one power of two (the first two chunks:
// 0..63 and 64..127, one value per bucket).
type histChunk [histSubBuckets]uint64

// histShard is one P's histogram. The pointers are written once per chunk
// (a CAS when the P first needs it) and only read afterwards, so sharing
// a cache line with a neighbour's pointers costs nothing; the chunks the
// counts live in are separate 512-byte allocations, which the allocator
// aligns to 512 bytes, so no two Ps ever write one cache line.
type histShard struct {
	chunks [histChunks]atomic.Pointer[histChunk]
}

// histBucket returns the bucket of a value in µs.
func histBucket(us uint64) int {
	if us < 2*histSubBuckets {
		return int(us)
	}
	us = min(us, histMaxUs)
	shift := bits.Len64(us) - histSubBits - 1
	return shift<<histSubBits + int(us>>shift)
}

// histBucketRange returns the smallest value of bucket i and how many
// values it holds.
func histBucketRange(i int) (lo, width uint64) {
	if i < 2*histSubBuckets {
		return uint64(i), 1
	}
	shift := i>>histSubBits - 1
	return uint64(i&histChunkMask+histSubBuckets) << shift, 1 << shift
}

// percentileHist is a sharded histogram with a sliding window of whole
// seconds, sampled by the global sampler (it is a sampleSource).
type percentileHist struct {
	shards   []histShard
	overflow histShard // Ps beyond len(shards): atomic adds
	size     int       // window, seconds

	mu       sync.Mutex
	prev     [histChunks]*histChunk // cumulative counts at the latest sample
	win      [histChunks]*histChunk // counts of the deltas held: the window
	winTotal uint64
	deltas   [][]byte // ring of size per-second deltas: uvarint (bucket gap, count) pairs
	times    []int64  // ring of size+1 sample times, unix ns
	seq      int      // samples taken
}

func newPercentileHist(size int) *percentileHist {
	return &percentileHist{
		shards: make([]histShard, numShards()),
		size:   size,
		deltas: make([][]byte, size),
		times:  make([]int64, size+1),
	}
}

// record counts one value (negative ones as 0). Like Adder.Add it writes
// only the current P's counter, with a plain load and store.
func (h *percentileHist) record(us int64) {
	i := histBucket(uint64(max(us, 0)))
	ci, si := i>>histSubBits, i&histChunkMask
	for {
		p := procPin()
		if p >= len(h.shards) {
			procUnpin()
			break
		}
		slot := &h.shards[p].chunks[ci]
		if c := slot.Load(); c != nil {
			storeOwned(&c[si], loadOwned(&c[si])+1)
			procUnpin()
			return
		}
		procUnpin()
		// This P's first value in this octave. Allocate unpinned (an
		// allocation may assist the GC and block); if the goroutine moves
		// meanwhile, the chunk still belongs to P p and the loop retries
		// on the current P. A lost CAS only wastes one chunk.
		slot.CompareAndSwap(nil, new(histChunk))
	}
	slot := &h.overflow.chunks[ci]
	c := slot.Load()
	if c == nil {
		slot.CompareAndSwap(nil, new(histChunk))
		c = slot.Load()
	}
	atomic.AddUint64(&c[si], 1)
}

// takeSample sums the shards, turns the growth since the previous sample
// into this second's delta, adds it to the window and drops the delta
// that leaves the window. The first sample only sets the baseline, so
// the window reads empty until two samples exist, as a Window does.
func (h *percentileHist) takeSample(nowNs int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	first := h.seq == 0
	var buf []byte
	slot := 0
	if !first {
		slot = (h.seq - 1) % h.size
		if h.seq > h.size { // the slot holds the delta now leaving the window
			h.forEachDelta(h.deltas[slot], func(i int, n uint64) {
				h.win[i>>histSubBits][i&histChunkMask] -= n
				h.winTotal -= n
			})
		}
		buf = h.deltas[slot][:0]
	}
	last := 0
	for ci := range histChunks {
		var cur histChunk
		seen := false
		add := func(c *histChunk) {
			if c == nil {
				return
			}
			seen = true
			for j := range c {
				cur[j] += atomic.LoadUint64(&c[j])
			}
		}
		for s := range h.shards {
			add(h.shards[s].chunks[ci].Load())
		}
		add(h.overflow.chunks[ci].Load())
		if !seen {
			continue
		}
		prev := h.prev[ci]
		if prev == nil {
			prev = new(histChunk)
			h.prev[ci] = prev
		}
		for j, v := range cur {
			d := v - prev[j]
			if d == 0 {
				continue
			}
			prev[j] = v
			if first {
				continue
			}
			if h.win[ci] == nil {
				h.win[ci] = new(histChunk)
			}
			h.win[ci][j] += d
			h.winTotal += d
			i := ci<<histSubBits + j
			buf = binary.AppendUvarint(buf, uint64(i-last))
			buf = binary.AppendUvarint(buf, d)
			last = i
		}
	}
	if !first {
		h.deltas[slot] = buf
	}
	h.times[h.seq%len(h.times)] = nowNs
	h.seq++
}

func (h *percentileHist) forEachDelta(b []byte, fn func(i int, n uint64)) {
	i := 0
	for len(b) > 0 {
		gap, k := binary.Uvarint(b)
		n, m := binary.Uvarint(b[k:])
		b = b[k+m:]
		i += int(gap)
		fn(i, n)
	}
}

// window returns how many values the window holds and the time it spans
// (0 with fewer than two samples).
func (h *percentileHist) window() (count uint64, spanNs int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.seq < 2 {
		return 0, 0
	}
	back := min(h.seq-1, h.size)
	latest := h.times[(h.seq-1)%len(h.times)]
	oldest := h.times[(h.seq-1-back)%len(h.times)]
	return h.winTotal, latest - oldest
}

// quantiles sets out[k] to the window's value at rank ceil(ps[k]*N) (the
// smallest value with at least that share of values at or below it), or
// 0 when the window is empty. ps must be ascending. Within a bucket the
// value is interpolated, assuming the bucket's values spread evenly: the
// k-th of c values in [lo, hi] is taken as lo + (k-0.5)*(hi-lo+1)/c.
//
// minUs and maxUs, the window's exact extremes when the caller knows them
// (-1 when unknown), narrow the first and last buckets: the
// smallest value lies in the first non-empty bucket and the largest in
// the last, so [lo, hi] shrinks to [minUs, hi] and [lo, maxUs] there. That
// makes a constant latency read exactly (1500 µs, not the 1496 in the
// middle of its 16-µs bucket), tightens narrow distributions, and keeps
// p99.99 at or below the max shown next to it. Extremes outside the
// bucket (read from a window sampled a moment apart) are ignored.
func (h *percentileHist) quantiles(ps []float64, out []int64, minUs, maxUs int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	total := h.winTotal
	for k := range out {
		out[k] = 0
	}
	if total == 0 {
		return
	}
	k := 0
	var below uint64 // values in the buckets before
	rank := quantileRank(ps[0], total)
	for ci := 0; ci < histChunks && k < len(ps); ci++ {
		c := h.win[ci]
		if c == nil {
			continue
		}
		for j := 0; j < histSubBuckets && k < len(ps); j++ {
			n := c[j]
			for k < len(ps) && rank <= below+n {
				out[k] = int64(bucketValue(ci<<histSubBits+j, rank-below, n,
					below == 0, below+n == total, minUs, maxUs))
				k++
				if k < len(ps) {
					rank = quantileRank(ps[k], total)
				}
			}
			below += n
		}
	}
}

// bucketValue estimates the k-th smallest of the n values in bucket i.
// The values are taken as spread evenly over the bucket: the k-th at
// lo + (k-0.5)/n of its width. When the bucket holds the window's
// smallest (first) or largest (last) value and that value is known, it
// becomes an end of the bucket that is itself a value: the 1st value is
// minUs, the n-th is maxUs, and the others are spread between.
func bucketValue(i int, k, n uint64, first, last bool, minUs, maxUs int64) uint64 {
	lo, w := histBucketRange(i)
	hi := lo + w - 1
	loExact := first && minUs >= 0 && uint64(minUs) >= lo && uint64(minUs) <= hi
	if loExact {
		lo = uint64(minUs)
	}
	hiExact := last && maxUs >= 0 && uint64(maxUs) >= lo && uint64(maxUs) <= hi
	if hiExact {
		hi = uint64(maxUs)
	}
	var t float64 // where the k-th value sits, 0 (lo) .. 1 (hi)
	switch {
	case !loExact && !hiExact:
		off := uint64((float64(k) - 0.5) * float64(hi-lo+1) / float64(n))
		return lo + min(off, hi-lo)
	case loExact && hiExact:
		if n == 1 {
			return lo // min == max
		}
		t = float64(k-1) / float64(n-1)
	case loExact:
		t = float64(k-1) / float64(n)
	default:
		t = float64(k) / float64(n)
	}
	return lo + uint64(t*float64(hi-lo)+0.5)
}

// quantileRank is ceil(p*total) within [1, total].
func quantileRank(p float64, total uint64) uint64 {
	if !(p > 0) { // also NaN
		return 1
	}
	if p >= 1 {
		return total
	}
	// The epsilon keeps 0.9*1e6 (900000.0000000001 in floating point)
	// at rank 900000.
	r := uint64(math.Ceil(p*float64(total) - 1e-9))
	return min(max(r, 1), total)
}

// recent copies the most recent values into a histogram: those recorded
// since the latest sample, then whole seconds of the window, newest first:
// at least minSeconds of them, and more until at least minCount values
// are taken or the window is used up. Taking only as much of the past as
// needed lets a quantile follow a change within a few seconds at high
// rates and still rest on enough values at low ones.
func (h *percentileHist) recent(minCount uint64, minSeconds int) *histSnapshot {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := &histSnapshot{}
	// Since the latest sample: the shards' growth over prev (everything,
	// before the first sample).
	for ci := range histChunks {
		var cur histChunk
		for s := range h.shards {
			if c := h.shards[s].chunks[ci].Load(); c != nil {
				for j := range c {
					cur[j] += atomic.LoadUint64(&c[j])
				}
			}
		}
		if c := h.overflow.chunks[ci].Load(); c != nil {
			for j := range c {
				cur[j] += atomic.LoadUint64(&c[j])
			}
		}
		for j, v := range cur {
			if prev := h.prev[ci]; prev != nil {
				v -= prev[j]
			}
			if v > 0 {
				out.add(ci<<histSubBits+j, v)
			}
		}
	}
	// Then whole seconds, newest first.
	held := min(max(h.seq-1, 0), h.size)
	for back := 0; back < held && (back < minSeconds || out.n < minCount); back++ {
		slot := (h.seq - 2 - back) % h.size
		h.forEachDelta(h.deltas[slot], out.add)
	}
	return out
}

// histSnapshot is a copy of some of a histogram's values (see recent).
type histSnapshot struct {
	sum [histChunks]*histChunk
	n   uint64
}

func (s *histSnapshot) add(i int, k uint64) {
	ci := i >> histSubBits
	if s.sum[ci] == nil {
		s.sum[ci] = new(histChunk)
	}
	s.sum[ci][i&histChunkMask] += k
	s.n += k
}

// atRank returns the rank-th smallest value (1-based, clamped to [1, n]),
// interpolated within its bucket; 0 when empty.
func (s *histSnapshot) atRank(rank uint64) int64 {
	if s.n == 0 {
		return 0
	}
	rank = min(max(rank, 1), s.n)
	var below uint64
	for ci := range histChunks {
		c := s.sum[ci]
		if c == nil {
			continue
		}
		for j, k := range c {
			if rank <= below+k {
				return int64(bucketValue(ci<<histSubBits+j, rank-below, k, false, false, -1, -1))
			}
			below += k
		}
	}
	return 0 // not reached: the counts sum to n
}
