package loadbalancer

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// Vectors from brpc's own butil::MurmurHash3_x86_32 (seed 0), compiled
// from src/butil/third_party/murmurhash3/murmurhash3.cpp.
func TestMurmur3Vectors(t *testing.T) {
	cases := []struct {
		in   string
		want uint32
	}{
		{"", 0x00000000},
		{"a", 0x3c2569b2},
		{"ab", 0x9bbfd75f},
		{"abc", 0xb3dd93fa},
		{"abcd", 0x43ed676a},
		{"hello", 0x248bfa47},
		{"Hello, world!", 0xc0363e43},
		{"The quick brown fox jumps over the lazy dog", 0x2e4ff723},
		{"127.0.0.1:8000-0", 0xaf0055ea},
		{"127.0.0.1:8000-99", 0xd72a172f},
		{"10.0.0.1:8000-42", 0x2d216932},
	}
	for _, c := range cases {
		if got := murmur3x86_32([]byte(c.in), 0); got != c.want {
			t.Errorf("murmur3(%q) = %#08x, want %#08x", c.in, got, c.want)
		}
	}
	if got := murmur3x86_32([]byte("hello"), 0x9747b28c); got != 0x5d7f56e8 {
		t.Errorf("seeded murmur3(hello) = %#08x, want 0x5d7f56e8", got)
	}
}

func TestConsistentHashingRing(t *testing.T) {
	lb := newConsistentHashing(chashNumReplicas)
	servers := newServers(2)
	lb.Update(servers)
	r := lb.snap.Load()
	owner := func(p ringPoint) *Server { return r.servers[p.server] }
	if len(r.points) != 2*chashNumReplicas {
		t.Fatalf("ring has %d points, want %d", len(r.points), 2*chashNumReplicas)
	}
	// The point for "10.0.0.1:8000-42" is on the ring, owned by server 1.
	found := false
	for _, p := range r.points {
		found = found || (p.hash == 0x2d216932 && owner(p) == servers[1])
	}
	if !found {
		t.Error(`no point at murmur3("10.0.0.1:8000-42") for 10.0.0.1:8000`)
	}
	// A code equal to a point's hash goes to that point (lower_bound).
	p := r.points[len(r.points)/2]
	if s, _ := lb.Select(SelectIn{RequestCode: uint64(p.hash), HasRequestCode: true}); s != owner(p) {
		t.Errorf("code on a point went to %v, want %v", s.Addr, owner(p).Addr)
	}
	// A code above the last point wraps to the first.
	if last := r.points[len(r.points)-1]; last.hash < math.MaxUint32 {
		if s, _ := lb.Select(SelectIn{RequestCode: uint64(last.hash) + 1, HasRequestCode: true}); s != owner(r.points[0]) {
			t.Errorf("code past the last point went to %v, want the first point's %v", s.Addr, owner(r.points[0]).Addr)
		}
	}
}

// TestConsistentHashingIncremental: a ring changed by updates equals one
// built from scratch from the same list.
func TestConsistentHashingIncremental(t *testing.T) {
	servers := newServers(40)
	lb := newConsistentHashing(chashNumReplicas)
	lb.Update(servers[:20])
	lb.Update(servers[10:30])
	lb.Update(append(servers[35:], servers[5:25]...))
	fresh := newConsistentHashing(chashNumReplicas)
	fresh.Update(append(servers[35:], servers[5:25]...))
	got, want := lb.snap.Load().points, fresh.snap.Load().points
	list := lb.snap.Load().servers
	if len(got) != len(want) {
		t.Fatalf("%d points, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("point %d: %v, want %v", i, got[i], want[i])
		}
	}
	if !slices.IsSortedFunc(got, comparePoints(list)) {
		t.Error("ring not sorted")
	}
}

func TestConsistentHashingStable(t *testing.T) {
	const keys = 10000
	servers := newServers(10)
	lb := mustNew(t, "c_murmurhash")
	lb.Update(servers)
	rng := rand.New(rand.NewPCG(1, 2))
	codes := make([]uint64, keys)
	before := make([]*Server, keys)
	for i := range codes {
		codes[i] = uint64(rng.Uint32())
		s, err := lb.Select(SelectIn{RequestCode: codes[i], HasRequestCode: true})
		if err != nil {
			t.Fatal(err)
		}
		before[i] = s
		if again, _ := lb.Select(SelectIn{RequestCode: codes[i], HasRequestCode: true}); again != s {
			t.Fatalf("code %d went to %s then %s", codes[i], s.Addr, again.Addr)
		}
	}
	// Another balancer built from the same list agrees (same ring).
	other := mustNew(t, "c_murmurhash")
	other.Update([]*Server{servers[9], servers[3], servers[0], servers[1], servers[2], servers[4], servers[5], servers[6], servers[7], servers[8]})
	for i, c := range codes {
		if s, _ := other.Select(SelectIn{RequestCode: c, HasRequestCode: true}); s != before[i] {
			t.Fatalf("list order changed the mapping of code %d", c)
		}
	}

	removed := servers[3]
	lb.Update(append(servers[:3:3], servers[4:]...))
	moved := 0
	for i, c := range codes {
		s, _ := lb.Select(SelectIn{RequestCode: c, HasRequestCode: true})
		if s == removed {
			t.Fatal("a code went to the removed server")
		}
		if s != before[i] {
			moved++
			if before[i] != removed {
				t.Fatalf("code %d moved from %s to %s though its server stayed", c, before[i].Addr, s.Addr)
			}
		}
	}
	frac := float64(moved) / keys
	t.Logf("removing 1 of 10 servers moved %.2f%% of keys", 100*frac)
	if frac < 0.05 || frac > 0.2 {
		t.Errorf("moved fraction %.3f, want in [0.05, 0.2]", frac)
	}

	// An unavailable server's codes go to the next server clockwise, the
	// others stay.
	lb.Update(servers)
	setUp(servers[5], false)
	for i, c := range codes {
		s, _ := lb.Select(SelectIn{RequestCode: c, HasRequestCode: true})
		if before[i] != servers[5] && s != before[i] {
			t.Fatalf("code %d moved from %s to %s while its server is up", c, before[i].Addr, s.Addr)
		}
		if s == servers[5] {
			t.Fatal("a code went to the unavailable server")
		}
	}
}

func TestConsistentHashingRequestCode(t *testing.T) {
	lb := mustNew(t, "c_murmurhash")
	lb.Update(newServers(3))
	if _, err := lb.Select(SelectIn{}); !errors.Is(err, ErrNoRequestCode) {
		t.Errorf("no request code: %v, want ErrNoRequestCode", err)
	}
	if _, err := lb.Select(SelectIn{RequestCode: math.MaxUint32 + 1, HasRequestCode: true}); !errors.Is(err, ErrBadRequestCode) {
		t.Errorf("64-bit request code: %v, want ErrBadRequestCode", err)
	}
	if _, err := lb.Select(SelectIn{RequestCode: math.MaxUint32, HasRequestCode: true}); err != nil {
		t.Errorf("request code 2^32-1: %v", err)
	}
}
