package loadbalancer

import (
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

func init() {
	Register("la", func(params string) (LoadBalancer, error) {
		if err := noParams("la", params); err != nil {
			return nil, err
		}
		return newLocalityAware(time.Now), nil
	})
}

// brpc's constants and flags for la (src/brpc/policy/locality_aware_load_balancer.cpp).
const (
	laWindowSize = 128 // completions remembered per server (RECV_QUEUE_SIZE)
	// laWeightScale is brpc's WEIGHT_SCALE (1008680231): weights are
	// scaled_qps / avg_latency_us with qps scaled by it, and an unknown
	// server starts at it.
	laWeightScale = math.MaxInt64 / 72000000 / (128 - 1)
	laMinWeight   = 1000 // -min_weight: a slow server still gets a trickle, so its recovery is seen
	// laMaxWeight caps a weight so that the sum over 2^17 servers fits
	// in an int64; only qps / avg_latency_us above ~35,000 reaches it.
	laMaxWeight           = 1 << 45
	laPunishInflightRatio = 1.5 // -punish_inflight_ratio
	laPunishErrorRatio    = 1.2 // -punish_error_ratio
	laMaxDraws            = 64  // random draws before a plain scan (see Select)
)

// localityAware is brpc's "la" (locality-aware). Per server, over a
// window of its last n ≤ 128 completions:
//
//	avg_latency = latency sum of the newest n-1 samples / (n-1)   (µs; the only sample's when n = 1)
//	qps         = (n-1) / (now - end time of the oldest sample)   (once the window is full or spans ≥ 1 s, else 1; never below 1)
//	base_weight = qps × laWeightScale / avg_latency
//	weight      = base_weight × punish / inflight_delay           when inflight_delay ≥ punish,
//	              with punish = 1.5 × avg_latency and inflight_delay = now - mean begin time of the in-flight attempts
//	weight      = clamp(weight, laMinWeight, laMaxWeight)
//
// A failed attempt adds no sample (it would raise qps) but adds to the
// newest sample's latency: latency×1.2 blended with the timeout by the
// retries done and left (none left: the whole timeout); an error as a
// server's first-ever sample counts at least the timeout.
//
// As in brpc this is not proportional sharing: the server with the best
// qps/latency keeps gaining traffic until its latency rises to the
// others'; servers starved of traffic need their window to span a second
// before their qps shows. One that stops answering loses its share while
// its calls are in flight, long before they time out. An attempt is in
// flight from SelectIn.BeginTime until the Feedback carrying the same
// CallInfo.BeginTime; attempts selected without a BeginTime are not
// counted, and a counted one never fed back keeps its server punished.
//
// Selection is a weighted random draw on a complete binary tree in heap
// order (brpc's weight_tree), each node holding its own weight and the sum
// of its left subtree, so a draw is O(log n) and a weight change updates
// O(log n) sums with atomic adds: no lock anywhere on the Select path.
//
// Weights live in per-server laNodes that survive list updates; a
// snapshot holds the tree (what each weight counts for in this tree) and
// is rebuilt in O(n) by Update. A weight change stores the node's weight
// and then makes the current tree agree with it (publish), so a change
// racing with a rebuild lands in whichever tree ends up current.
type localityAware struct {
	snap  atomic.Pointer[laSnapshot]
	mu    sync.Mutex // serializes Update
	clock func() time.Time
	epoch time.Time // times are kept as µs since epoch
}

type laSnapshot struct {
	slots []laSlot // heap order: the children of i are 2i+1 and 2i+2
	index map[*Server]int32
	total atomic.Int64 // sum of every slot's self
}

type laSlot struct {
	left atomic.Int64 // sum of self over the left subtree
	self atomic.Int64 // this server's weight as counted in this tree
	node *laNode
}

// laNode is one server's state, kept across list updates.
type laNode struct {
	server *Server

	weight        atomic.Int64 // the weight the tree should hold
	base          atomic.Int64 // base_weight, before in-flight punishment
	avgLatency    atomic.Int64 // µs; 0 until the first feedback
	inflightSum   atomic.Int64 // sum of the begin times of in-flight attempts (µs)
	inflightCount atomic.Int64

	mu  sync.Mutex  // guards win; taken by Feedback only
	win *laWindowed // allocated on the first feedback, so a 10k-server rebuild stays cheap
}

type laSample struct {
	latencySum int64 // cumulative over the window's entries up to this one (µs)
	end        int64 // µs
}

// laWindowed is a ring of the last laWindowSize samples: top is the
// oldest, bottom the newest (brpc's BoundedQueue).
type laWindowed struct {
	q          [laWindowSize]laSample
	head, size int
}

func (w *laWindowed) top() *laSample    { return &w.q[w.head] }
func (w *laWindowed) bottom() *laSample { return &w.q[(w.head+w.size-1)%laWindowSize] }

// push appends s, evicting the oldest sample when full (elim_push).
func (w *laWindowed) push(s laSample) {
	if w.size == laWindowSize {
		w.head = (w.head + 1) % laWindowSize
		w.size--
	}
	w.q[(w.head+w.size)%laWindowSize] = s
	w.size++
}

func newLocalityAware(clock func() time.Time) *localityAware {
	b := &localityAware{clock: clock, epoch: clock()}
	b.snap.Store(&laSnapshot{index: map[*Server]int32{}})
	return b
}

func (b *localityAware) micros(t time.Time) int64 { return t.Sub(b.epoch).Microseconds() }
func (b *localityAware) now() int64               { return b.micros(b.clock()) }

// Update rebuilds the tree in O(n): known servers keep their node (and
// weight), new ones start at the average weight (laWeightScale for the
// first list), as brpc does.
func (b *localityAware) Update(servers []*Server) {
	list := dedupe(servers)
	b.mu.Lock()
	defer b.mu.Unlock()
	old := b.snap.Load()
	initial := int64(laWeightScale)
	if len(old.slots) > 0 {
		initial = clampWeight(old.total.Load() / int64(len(old.slots)))
	}
	n := len(list)
	t := &laSnapshot{slots: make([]laSlot, n), index: make(map[*Server]int32, n)}
	for i, s := range list {
		var nd *laNode
		if j, ok := old.index[s]; ok {
			nd = old.slots[j].node
		} else {
			nd = &laNode{server: s}
			nd.weight.Store(initial)
			nd.base.Store(initial)
		}
		t.slots[i].node = nd
		t.slots[i].self.Store(nd.weight.Load())
		t.index[s] = int32(i)
	}
	// Subtree sums bottom-up: sub[i] = self[i] + sub[2i+1] + sub[2i+2].
	sub := make([]int64, n)
	for i := n - 1; i >= 0; i-- {
		var l, r int64
		if c := 2*i + 1; c < n {
			l = sub[c]
		}
		if c := 2*i + 2; c < n {
			r = sub[c]
		}
		t.slots[i].left.Store(l)
		sub[i] = t.slots[i].self.Load() + l + r
	}
	if n > 0 {
		t.total.Store(sub[0])
	}
	b.snap.Store(t)
	// A weight stored after we read it above, by a writer that then saw
	// the old snapshot, is caught here; one stored later is published to
	// t by its writer, which now sees t (publish).
	for i := range t.slots {
		if w := t.slots[i].node.weight.Load(); w != t.slots[i].self.Load() {
			t.set(i, w)
		}
	}
}

// set makes slot i count w, fixing the sums above it. Concurrent sets of
// one slot are safe: each adds the difference to what it swapped out.
func (t *laSnapshot) set(i int, w int64) {
	d := w - t.slots[i].self.Swap(w)
	if d == 0 {
		return
	}
	t.total.Add(d)
	for i > 0 {
		p := (i - 1) / 2
		if i == 2*p+1 {
			t.slots[p].left.Add(d)
		}
		i = p
	}
}

// find descends to the slot whose range holds dice, returning the offset
// of dice in it. Sums may be mid-update, so it can miss (false); the
// caller draws again.
func (t *laSnapshot) find(dice int64) (int, int64, bool) {
	n := len(t.slots)
	i := 0
	for i < n {
		s := &t.slots[i]
		left := s.left.Load()
		if dice < left {
			i = 2*i + 1
			continue
		}
		dice -= left
		self := s.self.Load()
		if dice < self {
			return i, dice, true
		}
		dice -= self
		i = 2*i + 2
	}
	return 0, 0, false
}

// publish makes the current tree hold nd's weight; t and i are where the
// caller found nd.
func (b *localityAware) publish(t *laSnapshot, i int, nd *laNode) {
	for {
		t.set(i, nd.weight.Load())
		cur := b.snap.Load()
		if cur == t {
			return
		}
		j, ok := cur.index[nd.server]
		if !ok || cur.slots[j].node != nd {
			return // removed meanwhile
		}
		t, i = cur, int(j)
	}
}

func clampWeight(w int64) int64 {
	return min(max(w, laMinWeight), laMaxWeight)
}

// refresh recomputes the weight from the base weight and the in-flight
// delay at now (brpc's ResetWeight) and stores it. now <= 0 skips the
// punishment. Callers race benignly: a stale value is replaced at the
// server's next selection or feedback.
func (nd *laNode) refresh(now int64) int64 {
	w := nd.base.Load()
	if cnt := nd.inflightCount.Load(); cnt > 0 && now > 0 {
		avg := nd.avgLatency.Load()
		delay := now - nd.inflightSum.Load()/cnt
		punish := int64(float64(avg) * laPunishInflightRatio)
		if avg > 0 && delay > 0 && delay >= punish {
			w = int64(float64(w) * float64(punish) / float64(delay))
		}
	}
	w = clampWeight(w)
	nd.weight.Store(w)
	return w
}

// Select draws by weight. Unavailable servers met on the way get their
// base weight lowered to the average (brpc's MarkFailed), so a dead
// server stops attracting draws. After laMaxDraws (or 2n) misses, a scan
// from a random server takes the first usable one, and else an excluded
// one (the last chance), so exclusion is never broken while another
// server is available.
func (b *localityAware) Select(in SelectIn) (*Server, error) {
	t := b.snap.Load()
	n := len(t.slots)
	if n == 0 {
		return nil, ErrNoServer
	}
	var now int64 // µs, read lazily: only in-flight punishment needs it
	if !in.BeginTime.IsZero() {
		now = b.micros(in.BeginTime)
	}
	for range min(max(2*n, 8), laMaxDraws) {
		total := t.total.Load()
		if total <= 0 {
			break
		}
		i, offset, ok := t.find(rand.Int64N(total))
		if !ok {
			continue
		}
		nd := t.slots[i].node
		if !nd.server.IsAvailable() {
			b.markFailed(t, i, nd, total/int64(n))
			continue
		}
		if excluded(in.Excluded, nd.server) {
			continue
		}
		// brpc's AddInflight: refresh the weight at this attempt's start.
		// If old in-flight attempts shrank it below the drawn point, this
		// draw missed the server.
		if now == 0 && nd.inflightCount.Load() > 0 {
			now = b.now()
		}
		w := nd.refresh(now)
		if w != t.slots[i].self.Load() {
			b.publish(t, i, nd)
		}
		if offset >= w {
			continue
		}
		b.begin(nd, in)
		return nd.server, nil
	}
	var fallback *laNode
	for k, i := 0, rand.IntN(n); k < n; k++ {
		nd := t.slots[i].node
		if !excluded(in.Excluded, nd.server) {
			if nd.server.IsAvailable() {
				b.begin(nd, in)
				return nd.server, nil
			}
		} else if fallback == nil && nd.server.IsAvailable() {
			fallback = nd
		}
		if i++; i == n {
			i = 0
		}
	}
	if fallback != nil {
		b.begin(fallback, in)
		return fallback.server, nil
	}
	return nil, ErrNoAvailableServer
}

// begin counts the attempt as in flight. The sum is added before the
// count, so a concurrent reader errs towards a younger mean (less
// punishment), never towards an absurd one.
func (b *localityAware) begin(nd *laNode, in SelectIn) {
	if in.BeginTime.IsZero() {
		return
	}
	nd.inflightSum.Add(b.micros(in.BeginTime))
	nd.inflightCount.Add(1)
}

// markFailed lowers an unavailable server's base weight to avgWeight if
// above it (brpc's MarkFailed).
func (b *localityAware) markFailed(t *laSnapshot, i int, nd *laNode, avgWeight int64) {
	for {
		base := nd.base.Load()
		if base <= avgWeight {
			return
		}
		if nd.base.CompareAndSwap(base, avgWeight) {
			break
		}
	}
	nd.refresh(0)
	b.publish(t, i, nd)
}

// Feedback ends the attempt's in-flight time and adds its latency to the
// server's window (brpc's Weight::Update).
func (b *localityAware) Feedback(info CallInfo) {
	t := b.snap.Load()
	j, ok := t.index[info.Server]
	if !ok {
		return // removed from the list meanwhile
	}
	nd := t.slots[j].node
	end := b.now()
	latency := info.Latency.Microseconds()
	var beginUs int64
	if !info.BeginTime.IsZero() {
		beginUs = b.micros(info.BeginTime)
		if info.Latency <= 0 {
			latency = end - beginUs
		}
	}
	nd.mu.Lock()
	if !info.BeginTime.IsZero() {
		// The count first, so a concurrent reader sees a mean begin time
		// that is too late (no punishment), not one from the distant past.
		if nd.inflightCount.Add(-1) < 0 {
			// Not counted by Select (its SelectIn.BeginTime was zero).
			nd.inflightCount.Add(1)
		} else {
			nd.inflightSum.Add(-beginUs)
		}
	}
	changed := latency > 0 && nd.addSample(info, latency, end)
	nd.mu.Unlock()
	if changed {
		b.publish(t, int(j), nd)
	}
}

// addSample records one completion and recomputes the weights; it
// reports whether they changed. nd.mu is held.
func (nd *laNode) addSample(info CallInfo, latency, end int64) bool {
	w := nd.win
	if w == nil {
		w = new(laWindowed)
		nd.win = w
	}
	timeoutUs := info.TimeoutMs * 1000
	if info.ErrorCode == 0 {
		sum := latency
		if w.size > 0 {
			sum += w.bottom().latencySum
		}
		w.push(laSample{latencySum: sum, end: end})
	} else {
		// Errors add no sample (they would raise the qps) but add to the
		// newest one, raising the average latency.
		errLatency := errorLatency(info, latency, timeoutUs)
		if w.size > 0 {
			last := w.bottom()
			last.latencySum += errLatency
			last.end = end
		} else {
			// We know nothing of the normal latency yet: count it as
			// timed out.
			w.push(laSample{latencySum: max(errLatency, timeoutUs), end: end})
		}
	}
	top := w.top()
	n := int64(w.size)
	scaledQPS := int64(laWeightScale) // 1 qps until measured
	var avg int64
	switch {
	case end > top.end:
		// qps only once the window is full or spans a second, so that
		// a few samples close together do not claim a huge qps.
		if n == laWindowSize || end >= top.end+1_000_000 {
			scaledQPS = max((n-1)*1_000_000*laWeightScale/(end-top.end), laWeightScale)
		}
		avg = (w.bottom().latencySum - top.latencySum) / (n - 1)
	case n == 1:
		avg = w.bottom().latencySum
	default:
		// Several samples ending at the same µs (or a clock step):
		// no rate to compute, keep the weight.
		return false
	}
	if avg <= 0 {
		return false
	}
	nd.avgLatency.Store(avg)
	nd.base.Store(clampWeight(scaledQPS / avg))
	old := nd.weight.Load()
	return nd.refresh(end) != old
}

// errorLatency is the latency a failed attempt counts for: latency×1.2
// blended with the timeout by retries done (ndone) and left (nleft), so
// an error that later retries are unlikely to fix counts more:
//
//	max_retry=0: the timeout; retried 0 of 2: latency×1.2;
//	retried 1 of 2: the mean of both; retried 2 of 2: the timeout.
func errorLatency(info CallInfo, latency, timeoutUs int64) int64 {
	punished := int64(float64(latency) * laPunishErrorRatio)
	if timeoutUs <= 0 {
		return punished // no timeout to blend with
	}
	ndone, nleft := int64(max(info.Retried, 0)), int64(max(info.Retries, 0))
	if ndone+nleft == 0 {
		ndone = 1
	}
	return (nleft*punished + ndone*timeoutUs) / (ndone + nleft)
}
