package loadbalancer

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
)

func init() {
	Register("rr", func(params string) (LoadBalancer, error) {
		if err := noParams("rr", params); err != nil {
			return nil, err
		}
		return newRoundRobin(), nil
	})
}

// roundRobin is brpc's "rr".
//
// brpc keeps an offset and a random prime stride per thread. Go has no
// thread-locals, and pinning to a P needs runtime internals, so all
// goroutines share one atomic counter instead: the rotation is then exact
// across the whole process (every server gets 1/n of the picks, to the
// pick), at the price of one contended atomic add per Select, a few tens
// of nanoseconds even under heavy parallelism. The counter starts at a
// random value so that many clients do not all begin with server 0.
type roundRobin struct {
	snap atomic.Pointer[[]*Server]
	mu   sync.Mutex // serializes Update
	_    cacheLinePad
	next atomic.Uint64
	_    cacheLinePad
}

func newRoundRobin() *roundRobin {
	b := &roundRobin{}
	b.next.Store(rand.Uint64())
	empty := []*Server{}
	b.snap.Store(&empty)
	return b
}

func (b *roundRobin) Update(servers []*Server) {
	list := dedupe(servers)
	b.mu.Lock()
	b.snap.Store(&list)
	b.mu.Unlock()
}

func (b *roundRobin) Select(in SelectIn) (*Server, error) {
	list := *b.snap.Load()
	n := len(list)
	if n == 0 {
		return nil, ErrNoServer
	}
	start := int((b.next.Add(1) - 1) % uint64(n))
	s, skipped := scan(list, start, 1, in.Excluded)
	if s == nil {
		return nil, ErrNoAvailableServer
	}
	if skipped > 0 {
		// Move the rotation past the skipped servers, so the server after
		// an unavailable one does not get its share on top of its own.
		b.next.Add(uint64(skipped))
	}
	return s, nil
}

func (b *roundRobin) Feedback(CallInfo) {}
