package loadbalancer

import (
	"sync"
	"sync/atomic"
)

func init() {
	Register("wr", func(params string) (LoadBalancer, error) {
		if err := noParams("wr", params); err != nil {
			return nil, err
		}
		return newWeightedRandom(), nil
	})
}

// weightedRandom is brpc's "wr": a random point in [0, total), located in
// the weights' prefix sums by binary search; up to n such draws skip
// excluded and unavailable servers, then a scan of all servers prefers a
// non-excluded one and falls back on an excluded one.
type weightedRandom struct {
	snap atomic.Pointer[weightedList]
	mu   sync.Mutex // serializes Update
}

func newWeightedRandom() *weightedRandom {
	b := &weightedRandom{}
	b.snap.Store(&weightedList{})
	return b
}

func (b *weightedRandom) Update(servers []*Server) {
	b.mu.Lock()
	defer b.mu.Unlock()
	list := newWeightedList("wr", servers, b.snap.Load())
	b.snap.Store(&list)
}

func (b *weightedRandom) Select(in SelectIn) (*Server, error) {
	snap := b.snap.Load()
	if len(snap.servers) == 0 {
		return nil, ErrNoServer
	}
	return snap.pickByWeight(in.Excluded)
}

func (b *weightedRandom) Feedback(CallInfo) {}
