package loadbalancer

import (
	"math"
	"math/bits"
	"math/rand/v2"
	"sync"
	"sync/atomic"
)

func init() {
	Register("wrr", func(params string) (LoadBalancer, error) {
		if err := noParams("wrr", params); err != nil {
			return nil, err
		}
		return newWeightedRoundRobin(), nil
	})
}

// weightedRoundRobin is brpc's "wrr"; the weight is the tag.
//
// Each server owns a range of its weight's length in [0, total). Pick
// number c lands on point c*stride mod total, with stride coprime with
// total: over any total consecutive picks every point is hit exactly once,
// so each server gets exactly weight/total of the picks, and the points
// are spread (stride ≈ total/φ), so a heavy server's picks interleave with
// the others' instead of coming in one burst. As for rr, c is one shared
// atomic counter rather than brpc's per-thread position, and a pick is a
// binary search: no lock, no allocation.
//
// An excluded or unavailable server's pick is redrawn at random by weight
// among the others (see weightedList.pickByWeight), so its share goes to them
// in proportion to their weights.
type weightedRoundRobin struct {
	snap atomic.Pointer[wrrSnapshot]
	mu   sync.Mutex // serializes Update
	_    cacheLinePad
	next atomic.Uint64
	_    cacheLinePad
}

type wrrSnapshot struct {
	weightedList
	stride uint64
}

func newWeightedRoundRobin() *weightedRoundRobin {
	b := &weightedRoundRobin{}
	b.next.Store(rand.Uint64())
	b.snap.Store(&wrrSnapshot{})
	return b
}

func (b *weightedRoundRobin) Update(servers []*Server) {
	b.mu.Lock()
	defer b.mu.Unlock()
	list := newWeightedList("wrr", servers, &b.snap.Load().weightedList)
	b.snap.Store(&wrrSnapshot{weightedList: list, stride: goldenStride(list.total)})
}

func (b *weightedRoundRobin) Select(in SelectIn) (*Server, error) {
	snap := b.snap.Load()
	if len(snap.servers) == 0 {
		return nil, ErrNoServer
	}
	c := (b.next.Add(1) - 1) % snap.total
	var point uint64
	if snap.total <= math.MaxUint32 {
		point = c * snap.stride % snap.total
	} else {
		hi, lo := bits.Mul64(c, snap.stride)
		point = bits.Rem64(hi, lo, snap.total)
	}
	if s := snap.servers[snap.find(point)]; usable(s, in.Excluded) {
		return s, nil
	}
	return snap.pickByWeight(in.Excluded)
}

func (b *weightedRoundRobin) Feedback(CallInfo) {}

// goldenStride returns the stride coprime with total closest to
// total/φ, whose multiples mod total are evenly spread (Fibonacci
// hashing).
func goldenStride(total uint64) uint64 {
	if total <= 2 {
		return 1
	}
	g := uint64(float64(total) / math.Phi)
	for d := uint64(0); ; d++ {
		if s := g + d; s > 0 && s < total && gcd(s, total) == 1 {
			return s
		}
		if d <= g {
			if s := g - d; s > 0 && gcd(s, total) == 1 {
				return s
			}
		}
	}
}
