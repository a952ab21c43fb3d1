package loadbalancer

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// ErrBadRequestCode is returned by consistent hashing when the request
// code does not fit in 32 bits, as brpc requires (EINVAL).
var ErrBadRequestCode = errors.New("loadbalancer: the request code must fit in 32 bits")

// chashNumReplicas is brpc's -chash_num_replicas: virtual nodes per server.
const chashNumReplicas = 100

func init() {
	Register("c_murmurhash", func(params string) (LoadBalancer, error) {
		replicas, err := parseReplicas(params)
		if err != nil {
			return nil, err
		}
		return newConsistentHashing(replicas), nil
	})
}

// parseReplicas reads brpc's only chash parameter, "replicas=N".
func parseReplicas(params string) (int, error) {
	if params == "" {
		return chashNumReplicas, nil
	}
	v, ok := strings.CutPrefix(params, "replicas=")
	if !ok {
		return 0, fmt.Errorf("loadbalancer: c_murmurhash: unknown parameter %q (want replicas=N)", params)
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("loadbalancer: c_murmurhash: replicas must be a positive integer, got %q", v)
	}
	return n, nil
}

// consistentHashing is brpc's "c_murmurhash": each server puts replicas
// points on a 32-bit ring, at MurmurHash3_x86_32("ip:port-i") for i in
// [0, replicas), so a client of either framework maps a request code to
// the same server. A request goes to the first point at or after its code
// (wrapping); removing a server only moves the codes its points owned.
type consistentHashing struct {
	replicas int
	snap     atomic.Pointer[ring]
	mu       sync.Mutex // serializes Update
}

type ring struct {
	points  []ringPoint // sorted by (hash, address)
	servers []*Server   // ringPoint.server indexes it
	index   map[*Server]uint32
}

// ringPoint refers to its server by index: 8 bytes and no pointer, so a
// 1M-point ring is half the size and the GC never scans it.
type ringPoint struct {
	hash   uint32
	server uint32
}

// comparePoints orders points by hash, ties (rare) by address as brpc
// does, so every client builds the same ring.
func comparePoints(servers []*Server) func(a, b ringPoint) int {
	return func(a, b ringPoint) int {
		if c := cmp.Compare(a.hash, b.hash); c != 0 {
			return c
		}
		return strings.Compare(servers[a.server].Addr, servers[b.server].Addr)
	}
}

func newConsistentHashing(replicas int) *consistentHashing {
	b := &consistentHashing{replicas: replicas}
	b.snap.Store(&ring{})
	return b
}

// Update changes the ring incrementally, as brpc does: points of servers
// that stay are kept (already sorted), only new servers are hashed and
// sorted, and the two runs are merged. A 10,000-server list is 1M points:
// hashing and sorting them all takes a quarter of a second; the merge
// takes a few milliseconds.
func (b *consistentHashing) Update(servers []*Server) {
	list := dedupe(servers)
	b.mu.Lock()
	defer b.mu.Unlock()
	old := b.snap.Load()
	index := make(map[*Server]uint32, len(list))
	var added []ringPoint
	var key []byte
	for i, s := range list {
		index[s] = uint32(i)
		if _, ok := old.index[s]; ok {
			continue
		}
		for r := range b.replicas {
			key = strconv.AppendInt(append(append(key[:0], s.Addr...), '-'), int64(r), 10)
			added = append(added, ringPoint{hash: murmur3x86_32(key, 0), server: uint32(i)})
		}
	}
	compare := comparePoints(list)
	slices.SortFunc(added, compare)
	// Renumber the kept points; a removed server maps to -1.
	renumber := make([]int64, len(old.servers))
	for j, s := range old.servers {
		renumber[j] = -1
		if i, ok := index[s]; ok {
			renumber[j] = int64(i)
		}
	}
	points := make([]ringPoint, 0, len(list)*b.replicas)
	k := 0
	for _, p := range old.points {
		i := renumber[p.server]
		if i < 0 {
			continue
		}
		p.server = uint32(i)
		for ; k < len(added) && compare(added[k], p) < 0; k++ {
			points = append(points, added[k])
		}
		points = append(points, p)
	}
	points = append(points, added[k:]...)
	b.snap.Store(&ring{points: points, servers: list, index: index})
}

func (b *consistentHashing) Select(in SelectIn) (*Server, error) {
	if !in.HasRequestCode {
		return nil, ErrNoRequestCode
	}
	if in.RequestCode > math.MaxUint32 {
		return nil, ErrBadRequestCode
	}
	r := b.snap.Load()
	points := r.points
	n := len(points)
	if n == 0 {
		return nil, ErrNoServer
	}
	code := uint32(in.RequestCode)
	// lower_bound: the first point whose hash is >= code.
	lo, hi := 0, n
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if points[mid].hash < code {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == n {
		lo = 0
	}
	// Walk clockwise. Unlike brpc, which only takes the very last point
	// when all others failed, the first available excluded server met is
	// kept as the last chance, so an excluded server beats an error.
	var fallback *Server
	for k, i := 0, lo; k < n; k++ {
		s := r.servers[points[i].server]
		if !excluded(in.Excluded, s) {
			if s.IsAvailable() {
				return s, nil
			}
		} else if fallback == nil && s.IsAvailable() {
			fallback = s
		}
		if i++; i == n {
			i = 0
		}
	}
	if fallback != nil {
		return fallback, nil
	}
	return nil, ErrNoAvailableServer
}

func (b *consistentHashing) Feedback(CallInfo) {}
