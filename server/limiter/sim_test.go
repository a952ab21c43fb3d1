package limiter

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"
)

// simServer is a discrete-event model of a server behind a limiter, driven
// by a fake clock: M workers each take about L per request (uniformly
// within ±10%), so the capacity is C = M/L requests per second and C×L = M
// requests fill it; admitted requests beyond M wait in a FIFO queue,
// which adds to their latency. Requests arrive open-loop (Poisson) at a
// configurable rate; a rejected request is dropped (its client retries
// elsewhere).
type simServer struct {
	now       int64 // ns, the limiters' fake clock
	workers   int
	latency   int64 // L, ns
	lim       Limiter
	timeoutMs int64 // sent with every request (-1: none)
	rng       *rand.Rand

	rate        float64 // arrivals per second
	nextArrival int64
	busy        int
	queue       []int64 // arrival times of admitted requests waiting for a worker
	running     simHeap // requests in service
	inflight    int64

	// Per observation interval.
	offered, admitted, completed, latencySum int64
	trace                                    []simPoint
}

// simPoint is what one observation interval saw.
type simPoint struct {
	t           time.Duration // since the start
	limit       int64         // the limiter's MaxConcurrency
	inflight    int64
	admitRatio  float64 // admitted / offered
	throughput  float64 // completions per second
	meanLatency time.Duration
}

type simReq struct{ finish, arrival int64 }

type simHeap []simReq

func (h simHeap) Len() int           { return len(h) }
func (h simHeap) Less(i, j int) bool { return h[i].finish < h[j].finish }
func (h simHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *simHeap) Push(x any)        { *h = append(*h, x.(simReq)) }
func (h *simHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

const simStart = int64(time.Second) // the fake clock's origin

func newSimServer(workers int, latency time.Duration, seed uint64) *simServer {
	return &simServer{
		now:       simStart,
		workers:   workers,
		latency:   int64(latency),
		timeoutMs: -1,
		rng:       rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
	}
}

func (s *simServer) clock() int64 { return s.now }

// capacity is C, requests per second.
func (s *simServer) capacity() float64 {
	return float64(s.workers) * float64(time.Second) / float64(s.latency)
}

// cl is C×L, the concurrency that keeps every worker busy without a queue.
func (s *simServer) cl() float64 { return float64(s.workers) }

func (s *simServer) serviceTime() int64 {
	return int64(float64(s.latency) * (0.9 + 0.2*s.rng.Float64()))
}

func (s *simServer) setRate(rate float64) {
	s.rate = rate
	s.nextArrival = s.now + s.interArrival()
}

func (s *simServer) interArrival() int64 {
	if s.rate <= 0 {
		return math.MaxInt64 / 2
	}
	return int64(s.rng.ExpFloat64() / s.rate * float64(time.Second))
}

func (s *simServer) start(arrival int64) {
	s.busy++
	heap.Push(&s.running, simReq{finish: s.now + s.serviceTime(), arrival: arrival})
}

// run advances the clock by d, observing every 100 ms.
func (s *simServer) run(d time.Duration) {
	const every = int64(100 * time.Millisecond)
	end := s.now + int64(d)
	for next := s.now + every; next <= end; next += every {
		s.advance(next)
		s.observe(every)
	}
}

func (s *simServer) advance(until int64) {
	for {
		done := int64(math.MaxInt64)
		if len(s.running) > 0 {
			done = s.running[0].finish
		}
		if min(done, s.nextArrival) > until {
			s.now = until
			return
		}
		if done <= s.nextArrival {
			r := heap.Pop(&s.running).(simReq)
			s.now = r.finish
			s.busy--
			s.inflight--
			s.completed++
			s.latencySum += r.finish - r.arrival
			s.lim.OnResponded(0, time.Duration(r.finish-r.arrival))
			if len(s.queue) > 0 {
				a := s.queue[0]
				s.queue = s.queue[1:]
				s.start(a)
			}
			continue
		}
		s.now = s.nextArrival
		s.nextArrival += s.interArrival()
		s.offered++
		if !s.lim.OnRequested(s.inflight+1, Request{TimeoutMs: s.timeoutMs}) {
			continue
		}
		s.admitted++
		s.inflight++
		if s.busy < s.workers {
			s.start(s.now)
		} else {
			s.queue = append(s.queue, s.now)
		}
	}
}

func (s *simServer) observe(every int64) {
	p := simPoint{
		t:        time.Duration(s.now - simStart),
		limit:    s.lim.MaxConcurrency(),
		inflight: s.inflight,
	}
	if s.offered > 0 {
		p.admitRatio = float64(s.admitted) / float64(s.offered)
	}
	p.throughput = float64(s.completed) * float64(time.Second) / float64(every)
	if s.completed > 0 {
		p.meanLatency = time.Duration(s.latencySum / s.completed)
	}
	s.trace = append(s.trace, p)
	s.offered, s.admitted, s.completed, s.latencySum = 0, 0, 0, 0
}

// between returns the observations in [from, to).
func (s *simServer) between(from, to time.Duration) []simPoint {
	var out []simPoint
	for _, p := range s.trace {
		if p.t > from && p.t <= to {
			out = append(out, p)
		}
	}
	return out
}

// summary prints one line per second, for -v.
func (s *simServer) summary() string {
	var b strings.Builder
	for i, p := range s.trace {
		if (i+1)%10 != 0 {
			continue
		}
		fmt.Fprintf(&b, "t=%5.1fs limit=%4d inflight=%4d admit=%5.1f%% tput=%6.0f/s lat=%v\n",
			p.t.Seconds(), p.limit, p.inflight, 100*p.admitRatio, p.throughput, p.meanLatency.Round(100*time.Microsecond))
	}
	return b.String()
}
