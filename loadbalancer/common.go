package loadbalancer

import (
	"fmt"
	"math/rand/v2"
)

// cacheLinePad keeps a hot, often-written counter off the cache line of
// the snapshot pointer that every Select reads.
type cacheLinePad [64]byte

// excluded reports whether in excludes s; a nil set excludes nothing.
func excluded(ex Excluded, s *Server) bool { return ex != nil && ex.Contains(s) }

// dedupe copies servers, dropping nils and repeats (identity is the
// pointer), so a balancer owns its list and never counts a server twice,
// as brpc's server_map does.
func dedupe(servers []*Server) []*Server {
	out := make([]*Server, 0, len(servers))
	seen := make(map[*Server]struct{}, len(servers))
	for _, s := range servers {
		if s == nil {
			continue
		}
		if _, ok := seen[s]; ok {
			continue
		}
		seen[s] = struct{}{}
		out = append(out, s)
	}
	return out
}

// scan visits every server of list once, from start, stepping by stride
// (coprime with len(list)), and returns the first available server that
// is not excluded, with the number of steps taken to reach it. Failing
// that it returns the first available excluded server (brpc's "last
// chance": an excluded server beats an error), or nil.
func scan(list []*Server, start, stride int, ex Excluded) (*Server, int) {
	n := len(list)
	var fallback *Server
	fallbackStep := 0
	i := start
	for k := 0; k < n; k++ {
		s := list[i]
		if !excluded(ex, s) {
			if s.IsAvailable() {
				return s, k
			}
		} else if fallback == nil && s.IsAvailable() {
			fallback, fallbackStep = s, k
		}
		if i += stride; i >= n {
			i -= n
		}
	}
	return fallback, fallbackStep
}

// primes are candidate strides; brpc's bthread::prime_offset draws from a
// similar table.
var primes = [...]int{
	7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73,
	79, 83, 89, 97, 101, 103, 107, 109, 113, 127, 131, 137, 139, 149,
}

// maxStrides is how many coprime strides a snapshot keeps to choose from.
const maxStrides = 8

// coprimeStrides returns up to maxStrides distinct strides in [1, n) that
// are coprime with n (a stride of 0 when n is 1), so stepping by any of
// them visits every index once.
func coprimeStrides(n int) []int {
	if n <= 1 {
		return []int{0}
	}
	out := make([]int, 0, maxStrides)
	for _, p := range primes {
		st := p % n
		if st == 0 || gcd(uint64(st), uint64(n)) != 1 {
			continue
		}
		dup := false
		for _, o := range out {
			dup = dup || o == st
		}
		if !dup {
			out = append(out, st)
			if len(out) == maxStrides {
				break
			}
		}
	}
	if len(out) == 0 {
		out = append(out, 1)
	}
	return out
}

// randomStride picks one of strides at random.
func randomStride(strides []int) int {
	if len(strides) == 1 {
		return strides[0]
	}
	return strides[rand.IntN(len(strides))]
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// noParams is the Builder check for balancers that take no parameters, so
// a misspelt or unsupported "rr:min_working_instances=2" fails Init
// instead of being silently ignored.
func noParams(name, params string) error {
	if params != "" {
		return fmt.Errorf("loadbalancer: %s takes no parameters, got %q", name, params)
	}
	return nil
}
