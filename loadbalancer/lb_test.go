package loadbalancer

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var allNames = []string{"c_murmurhash", "la", "random", "rr", "wr", "wrr"}

// newServers makes servers 10.0.0.i:8000 tagged with tags (all "1" when
// nil), each available until setUp says otherwise.
func newServers(n int, tags ...string) []*Server {
	out := make([]*Server, n)
	for i := range out {
		up := new(atomic.Bool)
		up.Store(true)
		tag := "1"
		if tags != nil {
			tag = tags[i]
		}
		out[i] = &Server{Addr: fmt.Sprintf("10.0.0.%d:8000", i), Tag: tag, Available: up.Load, Value: up}
	}
	return out
}

func setUp(s *Server, up bool) { s.Value.(*atomic.Bool).Store(up) }

// exset is an Excluded of a few servers (the channel's is a small array).
type exset []*Server

func (e exset) Contains(s *Server) bool { return slices.Contains(e, s) }

func mustNew(t testing.TB, name string) LoadBalancer {
	t.Helper()
	lb, err := New(name)
	if err != nil {
		t.Fatal(err)
	}
	return lb
}

// pickIn is a SelectIn every balancer accepts; code varies the request
// code for consistent hashing.
func pickIn(code uint64, ex Excluded) SelectIn {
	return SelectIn{Excluded: ex, RequestCode: code & math.MaxUint32, HasRequestCode: true}
}

// shares selects n times and returns each server's share of the picks.
func shares(t *testing.T, lb LoadBalancer, servers []*Server, n int) []float64 {
	t.Helper()
	count := map[*Server]int{}
	for i := range n {
		s, err := lb.Select(pickIn(uint64(i)*2654435761, nil))
		if err != nil {
			t.Fatalf("Select: %v", err)
		}
		count[s]++
	}
	out := make([]float64, len(servers))
	for i, s := range servers {
		out[i] = float64(count[s]) / float64(n)
	}
	return out
}

func TestRegistry(t *testing.T) {
	names := Names()
	for _, n := range allNames {
		if !slices.Contains(names, n) {
			t.Errorf("%q is not registered (have %v)", n, names)
		}
	}
	for _, spec := range []string{"nope", "rr:min_working_instances=2", "la:x", "c_murmurhash:replicas=0", "c_murmurhash:foo=1"} {
		if _, err := New(spec); err == nil {
			t.Errorf("New(%q) succeeded", spec)
		}
	}
	if _, err := New("c_murmurhash:replicas=10"); err != nil {
		t.Error(err)
	}
}

func TestDistribution(t *testing.T) {
	const picks = 60000
	third := 1.0 / 3
	cases := []struct {
		lb   string
		tags []string
		down []int // unavailable servers
		want []float64
		// exact: the count is exactly want×picks (deterministic balancers).
		exact bool
	}{
		{lb: "rr", want: []float64{third, third, third}, exact: true},
		{lb: "rr", down: []int{1}, want: []float64{0.5, 0, 0.5}, exact: true},
		{lb: "random", want: []float64{third, third, third}},
		{lb: "random", down: []int{1}, want: []float64{0.5, 0, 0.5}},
		{lb: "la", want: []float64{third, third, third}}, // no feedback yet: equal weights
		{lb: "wrr", tags: []string{"1", "2", "3"}, want: []float64{1. / 6, 2. / 6, 3. / 6}, exact: true},
		{lb: "wrr", tags: []string{"1", "2", "3"}, down: []int{2}, want: []float64{third, 2 * third, 0}},
		{lb: "wrr", tags: []string{"3", "1", "2"}, down: []int{0}, want: []float64{0, third, 2 * third}},
		{lb: "wr", tags: []string{"1", "2", "3"}, want: []float64{1. / 6, 2. / 6, 3. / 6}},
		{lb: "wr", tags: []string{"1", "2", "3"}, down: []int{2}, want: []float64{third, 2 * third, 0}},
		// Invalid weights drop the server (default_weight_of_wlb = 0).
		{lb: "wrr", tags: []string{"x", "2", "0"}, want: []float64{0, 1, 0}, exact: true},
		{lb: "wr", tags: []string{"-1", "", "5"}, want: []float64{0, 0, 1}, exact: true},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s/tags=%v/down=%v", c.lb, c.tags, c.down), func(t *testing.T) {
			servers := newServers(3, c.tags...)
			for _, i := range c.down {
				setUp(servers[i], false)
			}
			lb := mustNew(t, c.lb)
			lb.Update(servers)
			got := shares(t, lb, servers, picks)
			for i := range got {
				if c.exact && math.Round(got[i]*picks) != math.Round(c.want[i]*picks) {
					t.Errorf("server %d: %d picks, want exactly %d", i, int(math.Round(got[i]*picks)), int(math.Round(c.want[i]*picks)))
				}
				if math.Abs(got[i]-c.want[i]) > 0.02 {
					t.Errorf("server %d: share %.4f, want %.4f ± 0.02", i, got[i], c.want[i])
				}
			}
			t.Logf("shares %.4f", got)
		})
	}
}

// TestWRRInterleaves checks that a heavy server's picks are spread out,
// not served in one burst per cycle.
func TestWRRInterleaves(t *testing.T) {
	servers := newServers(2, "1", "99")
	lb := mustNew(t, "wrr")
	lb.Update(servers)
	var last, maxGap int
	for i := range 1000 {
		s, _ := lb.Select(SelectIn{})
		if s == servers[0] {
			if gap := i - last; i > 0 && gap > maxGap && last > 0 {
				maxGap = gap
			}
			last = i
		}
	}
	if maxGap > 150 {
		t.Errorf("the light server waited %d picks, want about 100", maxGap)
	}
}

func TestExclusionAndAvailability(t *testing.T) {
	for _, name := range allNames {
		t.Run(name, func(t *testing.T) {
			lb := mustNew(t, name)
			if _, err := lb.Select(pickIn(1, nil)); !errors.Is(err, ErrNoServer) {
				t.Fatalf("empty list: %v, want ErrNoServer", err)
			}
			servers := newServers(3)
			a, b, c := servers[0], servers[1], servers[2]
			lb.Update(servers)

			for i := range 3000 {
				s, err := lb.Select(pickIn(uint64(i)*2654435761, exset{a}))
				if err != nil || s == a {
					t.Fatalf("pick %d with A excluded: %v, %v", i, s, err)
				}
			}
			// Last chance: an excluded server beats an error.
			setUp(b, false)
			setUp(c, false)
			for i := range 100 {
				if s, err := lb.Select(pickIn(uint64(i)*2654435761, exset{a})); err != nil || s != a {
					t.Fatalf("only A available, A excluded: %v, %v; want A", s, err)
				}
			}
			for i := range 100 {
				if s, err := lb.Select(pickIn(uint64(i)*2654435761, exset{a, b, c})); err != nil || s != a {
					t.Fatalf("all excluded, A available: %v, %v; want A", s, err)
				}
			}
			// Unavailable servers are never picked.
			setUp(b, true)
			for i := range 3000 {
				if s, err := lb.Select(pickIn(uint64(i)*2654435761, nil)); err != nil || s == c {
					t.Fatalf("C unavailable: %v, %v", s, err)
				}
			}
			setUp(a, false)
			setUp(b, false)
			if s, err := lb.Select(pickIn(7, exset{a})); !errors.Is(err, ErrNoAvailableServer) {
				t.Fatalf("all unavailable: %v, %v; want ErrNoAvailableServer", s, err)
			}
			lb.Update(nil)
			if _, err := lb.Select(pickIn(1, nil)); !errors.Is(err, ErrNoServer) {
				t.Fatalf("emptied list: %v, want ErrNoServer", err)
			}
		})
	}
}

func TestWeightedAllInvalid(t *testing.T) {
	for _, name := range []string{"wrr", "wr"} {
		lb := mustNew(t, name)
		lb.Update(newServers(2, "a", "0"))
		if _, err := lb.Select(SelectIn{}); !errors.Is(err, ErrNoServer) {
			t.Errorf("%s with no valid weight: %v, want ErrNoServer", name, err)
		}
	}
}

func TestDuplicatesCountOnce(t *testing.T) {
	servers := newServers(2)
	for _, name := range allNames {
		lb := mustNew(t, name)
		lb.Update([]*Server{servers[0], servers[0], servers[0], servers[1], nil})
		n := 0
		for i := range 6000 {
			if s, _ := lb.Select(pickIn(uint64(i)*2654435761, nil)); s == servers[0] {
				n++
			}
		}
		if share := float64(n) / 6000; math.Abs(share-0.5) > 0.1 && name != "c_murmurhash" {
			t.Errorf("%s: duplicated server got %.2f of picks, want 0.5", name, share)
		}
	}
}

// TestConcurrentSelectDuringUpdate runs selections and feedback against
// list swaps; the race detector does the checking.
func TestConcurrentSelectDuringUpdate(t *testing.T) {
	lists := [][]*Server{newServers(3), newServers(50), nil, newServers(1)}
	lists = append(lists, append(slices.Clone(lists[1][:20]), lists[0]...))
	for _, name := range allNames {
		t.Run(name, func(t *testing.T) {
			lb := mustNew(t, name)
			lb.Update(lists[0])
			var stop atomic.Bool
			var wg sync.WaitGroup
			for g := range 4 {
				wg.Go(func() {
					for i := 0; !stop.Load(); i++ {
						in := pickIn(uint64(i*31+g)*2654435761, exset{lists[1][0]})
						in.BeginTime = time.Now()
						s, err := lb.Select(in)
						if err != nil {
							if !errors.Is(err, ErrNoServer) {
								t.Errorf("Select: %v", err)
								return
							}
							continue
						}
						lb.Feedback(CallInfo{
							Server: s, Latency: time.Duration(100+i%100) * time.Microsecond,
							ErrorCode: int32(i % 7 / 6), TimeoutMs: 100, BeginTime: in.BeginTime,
						})
					}
				})
			}
			for i := range 400 {
				lb.Update(lists[i%len(lists)])
			}
			stop.Store(true)
			wg.Wait()
			if la, ok := lb.(*localityAware); ok {
				checkTree(t, la.snap.Load())
			}
		})
	}
}

// TestInvalidWeightLoggedOnce: a dropped server is logged when it first
// shows up, not on every list update.
func TestInvalidWeightLoggedOnce(t *testing.T) {
	var buf bytes.Buffer
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	for _, name := range []string{"wrr", "wr"} {
		buf.Reset()
		servers := newServers(3, "1", "heavy", "2")
		lb := mustNew(t, name)
		for range 5 {
			lb.Update(servers)
		}
		if n := strings.Count(buf.String(), "\n"); n != 1 || !strings.Contains(buf.String(), "heavy") {
			t.Errorf("%s: %d log lines for one bad tag: %q", name, n, buf.String())
		}
	}
}

func TestSelectDoesNotAllocate(t *testing.T) {
	ex := Excluded(exset{})
	for _, name := range allNames {
		lb := mustNew(t, name)
		lb.Update(newServers(100))
		var code uint64
		allocs := testing.AllocsPerRun(1000, func() {
			code += 2654435761
			if _, err := lb.Select(pickIn(code, ex)); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("%s: %.1f allocations per Select, want 0", name, allocs)
		}
	}
	// la's whole cycle, once every server has its window.
	lb := mustNew(t, "la")
	servers := newServers(10)
	lb.Update(servers)
	for _, s := range servers {
		lb.Feedback(CallInfo{Server: s, Latency: time.Millisecond})
	}
	allocs := testing.AllocsPerRun(1000, func() {
		begin := time.Now()
		s, err := lb.Select(SelectIn{Excluded: ex, BeginTime: begin})
		if err != nil {
			t.Fatal(err)
		}
		lb.Feedback(CallInfo{Server: s, Latency: time.Millisecond, TimeoutMs: 100, BeginTime: begin})
	})
	if allocs != 0 {
		t.Errorf("la: %.1f allocations per Select+Feedback, want 0", allocs)
	}
}
