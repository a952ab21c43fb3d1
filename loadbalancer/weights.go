package loadbalancer

import (
	"log/slog"
	"math/rand/v2"
	"strconv"
)

// defaultWeightOfWLB is brpc's -default_weight_of_wlb: the weight wrr and
// wr give a server whose tag is not a positive integer. brpc's default, 0,
// drops such a server (with one log line).
const defaultWeightOfWLB = 0

// weightedList is the immutable part shared by wrr and wr: the servers
// with a valid weight and the inclusive prefix sums of their weights.
type weightedList struct {
	servers []*Server
	prefix  []uint64 // prefix[i] = weight[0] + ... + weight[i]
	total   uint64
	strides []int // coprime with len(servers), for the last-resort scan

	// dropped remembers servers rejected for their tag, so each is logged
	// once and not on every list update.
	dropped map[*Server]struct{}
}

// newWeightedList parses tags as weights (brpc's StringToUint, > 0).
func newWeightedList(name string, servers []*Server, prev *weightedList) weightedList {
	if prev == nil {
		prev = &weightedList{}
	}
	list := dedupe(servers)
	w := weightedList{
		servers: list[:0],
		prefix:  make([]uint64, 0, len(list)),
		dropped: map[*Server]struct{}{},
	}
	for _, s := range list {
		weight, err := strconv.ParseUint(s.Tag, 10, 32)
		if err != nil || weight == 0 {
			if defaultWeightOfWLB > 0 {
				weight = defaultWeightOfWLB
				if _, seen := prev.dropped[s]; !seen {
					slog.Warn("loadbalancer: invalid weight, using the default", "lb", name, "server", s.Addr, "tag", s.Tag, "weight", weight)
				}
			} else {
				if _, seen := prev.dropped[s]; !seen {
					slog.Error("loadbalancer: invalid weight, server dropped", "lb", name, "server", s.Addr, "tag", s.Tag)
				}
			}
			w.dropped[s] = struct{}{}
			if weight == 0 {
				continue
			}
		}
		w.total += weight
		w.servers = append(w.servers, s)
		w.prefix = append(w.prefix, w.total)
	}
	w.strides = coprimeStrides(len(w.servers))
	return w
}

// find returns the server owning point t in [0, total): the first whose
// inclusive prefix sum is above t (brpc's upper_bound).
func (w *weightedList) find(t uint64) int {
	lo, hi := 0, len(w.prefix)-1
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if w.prefix[mid] > t {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// usable is the test every pick must pass before the last-chance scan.
func usable(s *Server, ex Excluded) bool { return !excluded(ex, s) && s.IsAvailable() }

// weight returns server i's weight.
func (w *weightedList) weight(i int) uint64 {
	if i == 0 {
		return w.prefix[0]
	}
	return w.prefix[i] - w.prefix[i-1]
}

// pickByWeight is brpc's wr, and wrr's fallback when its pick is unusable.
// Up to n weighted random draws skip excluded and unavailable servers;
// being rejection sampling, they hand the skipped share to the others
// exactly in proportion to their weights. After n misses (most of the
// weight is unusable), brpc probes linearly, which would split the rest
// evenly; we draw by weight among the usable servers instead (O(n), rare),
// so shares stay exact. Last comes an excluded but available server.
func (w *weightedList) pickByWeight(ex Excluded) (*Server, error) {
	n := len(w.servers)
	for range n {
		if s := w.servers[w.find(rand.Uint64N(w.total))]; usable(s, ex) {
			return s, nil
		}
	}
	var sum uint64
	for i, s := range w.servers {
		if usable(s, ex) {
			sum += w.weight(i)
		}
	}
	if sum > 0 {
		t := rand.Uint64N(sum)
		for i, s := range w.servers {
			if usable(s, ex) {
				if wi := w.weight(i); t >= wi {
					t -= wi
				} else {
					return s, nil
				}
			}
		}
	}
	// Only excluded servers are available, or availability just changed.
	if s, _ := scan(w.servers, rand.IntN(n), randomStride(w.strides), ex); s != nil {
		return s, nil
	}
	return nil, ErrNoAvailableServer
}
