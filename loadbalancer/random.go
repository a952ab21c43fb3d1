package loadbalancer

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
)

func init() {
	Register("random", func(params string) (LoadBalancer, error) {
		if err := noParams("random", params); err != nil {
			return nil, err
		}
		return newRandom(), nil
	})
}

// randomized is brpc's "random": a uniformly random start, then steps of a
// stride coprime with n, so every server is tried once at most. The
// stride is drawn among several, so the share of an unavailable server
// spreads over several others instead of all going to its neighbour.
type randomized struct {
	snap atomic.Pointer[randomSnapshot]
	mu   sync.Mutex // serializes Update
}

type randomSnapshot struct {
	servers []*Server
	strides []int
}

func newRandom() *randomized {
	b := &randomized{}
	b.snap.Store(&randomSnapshot{})
	return b
}

func (b *randomized) Update(servers []*Server) {
	list := dedupe(servers)
	snap := &randomSnapshot{servers: list, strides: coprimeStrides(len(list))}
	b.mu.Lock()
	b.snap.Store(snap)
	b.mu.Unlock()
}

func (b *randomized) Select(in SelectIn) (*Server, error) {
	snap := b.snap.Load()
	n := len(snap.servers)
	if n == 0 {
		return nil, ErrNoServer
	}
	start := rand.IntN(n)
	// The common case needs no stride: try the random start first.
	if s := snap.servers[start]; !excluded(in.Excluded, s) && s.IsAvailable() {
		return s, nil
	}
	if s, _ := scan(snap.servers, start, randomStride(snap.strides), in.Excluded); s != nil {
		return s, nil
	}
	return nil, ErrNoAvailableServer
}

func (b *randomized) Feedback(CallInfo) {}
