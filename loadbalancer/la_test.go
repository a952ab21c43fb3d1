package loadbalancer

import (
	"container/heap"
	"slices"
	"testing"
	"time"
)

// laSim drives an la balancer in simulated time with a closed loop, as
// brpc's LALB example does with synchronous client threads: each client
// selects a server, waits for the call's latency, feeds it back and calls
// again. A simulated server's latency grows with its in-flight calls, as
// a real server's does, which is what lets la settle on a split.
type laSim struct {
	lb       *localityAware
	servers  []*Server
	inflight []int
	// loadFactor: a server's latency is base × (1 + inflight/loadFactor);
	// 0 keeps it at base.
	loadFactor int
	base       time.Time
	now        time.Duration
	pending    completions
	behave     func(s int, now time.Duration) (time.Duration, int32)
}

type completion struct {
	at, begin time.Duration
	server    int
	code      int32
}

type completions []completion

func (h completions) Len() int           { return len(h) }
func (h completions) Less(i, j int) bool { return h[i].at < h[j].at }
func (h completions) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *completions) Push(x any)        { *h = append(*h, x.(completion)) }
func (h *completions) Pop() any {
	old := *h
	c := old[len(old)-1]
	*h = old[:len(old)-1]
	return c
}

// newLASim starts clients calls on n servers; behave gives a server's
// base latency and error code for a call starting at now.
func newLASim(t *testing.T, n, clients int, behave func(s int, now time.Duration) (time.Duration, int32)) *laSim {
	sim := &laSim{base: time.Now(), servers: newServers(n), inflight: make([]int, n), behave: behave, loadFactor: 10}
	sim.lb = newLocalityAware(func() time.Time { return sim.base.Add(sim.now) })
	sim.lb.Update(sim.servers)
	for range clients {
		sim.call(t)
	}
	return sim
}

func (sim *laSim) call(t *testing.T) int {
	t.Helper()
	s, err := sim.lb.Select(SelectIn{BeginTime: sim.base.Add(sim.now)})
	if err != nil {
		t.Fatalf("Select at %v: %v", sim.now, err)
	}
	i := slices.Index(sim.servers, s)
	lat, code := sim.behave(i, sim.now)
	sim.inflight[i]++
	if sim.loadFactor > 0 {
		lat += lat * time.Duration(sim.inflight[i]) / time.Duration(sim.loadFactor)
	}
	heap.Push(&sim.pending, completion{at: sim.now + lat, begin: sim.now, server: i, code: code})
	return i
}

// run simulates until `until` and returns each server's picks made at or
// after countFrom. every == 0 is the closed loop; every > 0 switches to
// an open loop: one new call every `every`, whatever the completions.
func (sim *laSim) run(t *testing.T, until, countFrom, every time.Duration) []int {
	t.Helper()
	picks := make([]int, len(sim.servers))
	next := sim.now
	for {
		arrival := every > 0 && (len(sim.pending) == 0 || next <= sim.pending[0].at)
		if arrival {
			if next >= until {
				break
			}
			sim.now = next
			next += every
		} else {
			if len(sim.pending) == 0 || sim.pending[0].at >= until {
				break
			}
			c := heap.Pop(&sim.pending).(completion)
			sim.now = c.at
			sim.inflight[c.server]--
			sim.lb.Feedback(CallInfo{
				Server: sim.servers[c.server], Latency: c.at - c.begin, ErrorCode: c.code,
				TimeoutMs: 100, BeginTime: sim.base.Add(c.begin),
			})
			if every > 0 {
				continue
			}
		}
		if i := sim.call(t); sim.now >= countFrom {
			picks[i]++
		}
	}
	sim.now = until
	return picks
}

func sharesOf(picks []int) []float64 {
	total := 0
	for _, p := range picks {
		total += p
	}
	out := make([]float64, len(picks))
	for i, p := range picks {
		out[i] = float64(p) / float64(total)
	}
	return out
}

func TestLASlowServerGetsLittle(t *testing.T) {
	sim := newLASim(t, 3, 30, func(s int, _ time.Duration) (time.Duration, int32) {
		if s == 2 {
			return 10 * time.Millisecond, 0
		}
		return time.Millisecond, 0
	})
	sh := sharesOf(sim.run(t, time.Second, 200*time.Millisecond, 0))
	t.Logf("latency 1ms, 1ms, 10ms: shares %.4f", sh)
	if sh[2] >= 0.10 {
		t.Errorf("the 10× slower server got %.3f of the picks, want < 0.10", sh[2])
	}
	checkTree(t, sim.lb.snap.Load())
}

func TestLAErrorsReduceShare(t *testing.T) {
	// Server 2 is as fast as the others but fails every call.
	sim := newLASim(t, 3, 30, func(s int, _ time.Duration) (time.Duration, int32) {
		if s == 2 {
			return time.Millisecond, 1008
		}
		return time.Millisecond, 0
	})
	sh := sharesOf(sim.run(t, time.Second, 200*time.Millisecond, 0))
	t.Logf("server 2 always fails: shares %.4f", sh)
	if sh[2] >= 0.10 {
		t.Errorf("the failing server got %.3f of the picks, want < 0.10", sh[2])
	}
}

// TestLAInflightPunishment: a server that stops answering loses its share
// while its calls are in flight, long before they time out (100 ms). The
// servers start with equal, full windows and the load is open-loop (a
// server fanning out its own traffic): in a closed loop every client would
// end up waiting on the hung server. Latencies do not grow with load here:
// an open loop would saturate the simulated servers.
func TestLAInflightPunishment(t *testing.T) {
	const every = 50 * time.Microsecond
	hung := -1
	sim := newLASim(t, 3, 0, func(s int, now time.Duration) (time.Duration, int32) {
		if s == hung {
			return 100 * time.Millisecond, 1008 // ERPCTIMEDOUT
		}
		return time.Millisecond, 0
	})
	sim.loadFactor = 0
	for range laWindowSize {
		sim.now += every
		for _, s := range sim.servers {
			sim.lb.Feedback(CallInfo{Server: s, Latency: time.Millisecond})
		}
	}
	start := sim.now
	before := sharesOf(sim.run(t, start+100*time.Millisecond, start, every))
	hung = 1
	start = sim.now
	after := sharesOf(sim.run(t, start+100*time.Millisecond, start+20*time.Millisecond, every))
	t.Logf("server 1 hangs: its share falls from %.4f to %.4f 20-100 ms later (shares %.4f)", before[1], after[1], after)
	if before[1] < 0.15 || after[1] >= 0.05 {
		t.Errorf("hung server's share %.3f before, %.3f after; want about 1/3, then < 0.05", before[1], after[1])
	}
}

func TestLAWeightFormula(t *testing.T) {
	nd := &laNode{}
	// One success of 2 ms: qps unknown (1), avg = 2000 µs.
	if !nd.addSample(CallInfo{}, 2000, 10_000) {
		t.Fatal("first sample did not change the weight")
	}
	if got, want := nd.base.Load(), int64(laWeightScale/2000); got != want || nd.avgLatency.Load() != 2000 {
		t.Errorf("after one sample: base %d avg %d, want %d and 2000", got, nd.avgLatency.Load(), want)
	}
	// A full window of 1 ms calls ending 1 ms apart: 1000 qps, 1 ms.
	nd = &laNode{}
	for i := range laWindowSize {
		nd.addSample(CallInfo{}, 1000, int64(i+1)*1000)
	}
	if got := nd.base.Load(); got != laWeightScale || nd.avgLatency.Load() != 1000 {
		t.Errorf("1000 qps at 1 ms: base %d avg %d, want %d and 1000", got, nd.avgLatency.Load(), int64(laWeightScale))
	}
	// An error adds to the newest sample: avg rises, no sample is added.
	size := nd.win.size
	nd.addSample(CallInfo{ErrorCode: 1, TimeoutMs: 100}, 1000, laWindowSize*1000+500)
	if nd.win.size != size || nd.avgLatency.Load() <= 1000 {
		t.Errorf("after an error: window %d (want %d), avg %d (want > 1000)", nd.win.size, size, nd.avgLatency.Load())
	}
	// A first-ever error counts at least the timeout.
	nd = &laNode{}
	nd.addSample(CallInfo{ErrorCode: 1, TimeoutMs: 100, Retries: 3}, 1000, 5000)
	if got := nd.avgLatency.Load(); got != 100_000 {
		t.Errorf("first-ever error: avg %d, want the timeout 100000", got)
	}
	// In-flight punishment: mean age 10 ms against 1.5 × 1 ms.
	nd = &laNode{}
	nd.base.Store(1_000_000)
	nd.avgLatency.Store(1000)
	nd.inflightSum.Store(2 * 90_000)
	nd.inflightCount.Store(2)
	if got := nd.refresh(100_000); got != 1_000_000*1500/10_000 {
		t.Errorf("punished weight %d, want %d", got, 1_000_000*1500/10_000)
	}
	nd.base.Store(1)
	if got := nd.refresh(0); got != laMinWeight {
		t.Errorf("weight %d below the floor, want %d", got, laMinWeight)
	}
}

func TestErrorLatency(t *testing.T) {
	cases := []struct {
		retried, left int
		timeoutMs     int64
		want          int64
	}{
		{0, 0, 100, 100_000},              // max_retry=0: the timeout
		{0, 1, 100, 1200},                 // retried 0 of 1: latency × 1.2
		{1, 0, 100, 100_000},              // retried 1 of 1: the timeout
		{1, 1, 100, (1200 + 100_000) / 2}, // retried 1 of 2: the mean
		{0, 2, -1, 1200},                  // no timeout: latency × 1.2
	}
	for _, c := range cases {
		if got := errorLatency(CallInfo{Retried: c.retried, Retries: c.left}, 1000, c.timeoutMs*1000); got != c.want {
			t.Errorf("retried %d left %d timeout %dms: %d, want %d", c.retried, c.left, c.timeoutMs, got, c.want)
		}
	}
}

func TestLAUpdateKeepsWeights(t *testing.T) {
	sim := newLASim(t, 3, 30, func(s int, _ time.Duration) (time.Duration, int32) {
		return time.Duration(s+1) * time.Millisecond, 0
	})
	sim.run(t, 300*time.Millisecond, 0, 0)
	old := sim.lb.snap.Load()
	weights := map[*Server]int64{}
	var sum int64
	for i := range old.slots {
		w := old.slots[i].node.weight.Load()
		weights[old.slots[i].node.server] = w
		sum += w
	}
	added := newServers(1)[0]
	sim.lb.Update(append([]*Server{added}, sim.servers[1:]...))
	t2 := sim.lb.snap.Load()
	checkTree(t, t2)
	for _, s := range sim.servers[1:] {
		if got := t2.slots[t2.index[s]].self.Load(); got != weights[s] {
			t.Errorf("%s: weight %d after the update, want %d", s.Addr, got, weights[s])
		}
	}
	if got := t2.slots[t2.index[added]].self.Load(); got != sum/3 {
		t.Errorf("new server starts at %d, want the average %d", got, sum/3)
	}
	// Feedback for a removed server is ignored.
	sim.lb.Feedback(CallInfo{Server: sim.servers[0], Latency: time.Millisecond})
}

// checkTree verifies a quiescent tree: every left sum is its left
// subtree's total, the total is the sum of all, and each slot holds its
// node's weight.
func checkTree(t *testing.T, tr *laSnapshot) {
	t.Helper()
	n := len(tr.slots)
	var subtree func(i int) int64
	subtree = func(i int) int64 {
		if i >= n {
			return 0
		}
		return tr.slots[i].self.Load() + subtree(2*i+1) + subtree(2*i+2)
	}
	for i := range tr.slots {
		if got, want := tr.slots[i].left.Load(), subtree(2*i+1); got != want {
			t.Errorf("slot %d: left %d, want %d", i, got, want)
		}
		if got, want := tr.slots[i].self.Load(), tr.slots[i].node.weight.Load(); got != want {
			t.Errorf("slot %d: self %d, node weight %d", i, got, want)
		}
	}
	if got, want := tr.total.Load(), subtree(0); got != want {
		t.Errorf("total %d, want %d", got, want)
	}
}

// TestLAUntrackedFeedback: Feedback carrying a BeginTime for an attempt
// selected without one (the channel's contract half kept) must not drive
// the in-flight count negative.
func TestLAUntrackedFeedback(t *testing.T) {
	lb := mustNew(t, "la").(*localityAware)
	servers := newServers(1)
	lb.Update(servers)
	for range 3 {
		s, _ := lb.Select(SelectIn{})
		lb.Feedback(CallInfo{Server: s, Latency: time.Millisecond, BeginTime: time.Now()})
	}
	nd := lb.snap.Load().slots[0].node
	if c, sum := nd.inflightCount.Load(), nd.inflightSum.Load(); c != 0 || sum != 0 {
		t.Errorf("in flight: count %d sum %d, want 0 and 0", c, sum)
	}
	begin := time.Now()
	s, _ := lb.Select(SelectIn{BeginTime: begin})
	if c := nd.inflightCount.Load(); c != 1 {
		t.Errorf("in flight after a tracked Select: %d, want 1", c)
	}
	lb.Feedback(CallInfo{Server: s, Latency: time.Millisecond, BeginTime: begin})
	if c, sum := nd.inflightCount.Load(), nd.inflightSum.Load(); c != 0 || sum != 0 {
		t.Errorf("in flight after its Feedback: count %d sum %d, want 0 and 0", c, sum)
	}
}
