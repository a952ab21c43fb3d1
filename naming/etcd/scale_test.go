package etcdnaming

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gobrpc/gobrpc/channel"
	"github.com/gobrpc/gobrpc/loadbalancer"
	"github.com/gobrpc/gobrpc/naming"
)

var scaleKeys = flag.Int("scale", 0, "run TestScale with so many keys under one prefix (e.g. 10000)")

// balancers is a naming.Watcher feeding rr and la, as a channel does, and
// timing each rebuild.
type balancers struct {
	names   []string
	lbs     []loadbalancer.LoadBalancer
	servers map[naming.Node]*loadbalancer.Server // only Update touches it

	mu       sync.Mutex
	rebuild  map[string][]time.Duration // per balancer, per update
	deliver  []time.Duration            // the whole Update
	seen     map[string]time.Time       // when an address first became selectable
	waitAddr string
	arrived  chan struct{}
}

func newBalancers(t *testing.T, names ...string) *balancers {
	b := &balancers{names: names, rebuild: map[string][]time.Duration{}, seen: map[string]time.Time{}}
	for _, n := range names {
		lb, err := loadbalancer.New(n)
		require.NoError(t, err)
		b.lbs = append(b.lbs, lb)
	}
	return b
}

func (b *balancers) Update(nodes []naming.Node) {
	start := time.Now()
	// Unchanged servers keep their *Server, as in a channel.
	servers := make([]*loadbalancer.Server, len(nodes))
	next := make(map[naming.Node]*loadbalancer.Server, len(nodes))
	for i, n := range nodes {
		s := b.servers[n]
		if s == nil {
			s = &loadbalancer.Server{Addr: n.Addr, Tag: n.Tag}
		}
		servers[i], next[n] = s, s
	}
	b.servers = next
	took := make([]time.Duration, len(b.lbs))
	for i, lb := range b.lbs {
		t0 := time.Now()
		lb.Update(servers)
		took[i] = time.Since(t0)
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, n := range b.names {
		b.rebuild[n] = append(b.rebuild[n], took[i])
	}
	b.deliver = append(b.deliver, now.Sub(start))
	if b.waitAddr != "" && slices.ContainsFunc(nodes, func(n naming.Node) bool { return n.Addr == b.waitAddr }) {
		b.seen[b.waitAddr] = now
		close(b.arrived)
		b.waitAddr = ""
	}
}

func (b *balancers) expect(addr string) chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.waitAddr, b.arrived = addr, make(chan struct{})
	return b.arrived
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

func pct(d []time.Duration, q float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// TestScale measures -scale keys under one prefix: the naming service's
// and a channel's Init time and memory, the time from a Put to rr and la
// balancers serving the new server, each rebuild's cost, and the longest
// Select while rebuilds run. Run it with
//
//	go test -run TestScale -scale 10000 -v
func TestScale(t *testing.T) {
	n := *scaleKeys
	if n == 0 {
		t.Skip("run with -scale 10000")
	}
	e := startEtcd(t)
	cli := e.clientv3()
	ctx := context.Background()
	const prefix = "/scale"
	t0 := time.Now()
	for i := 0; i < n; i += 100 {
		var ops []clientv3.Op
		for j := i; j < min(n, i+100); j++ {
			ops = append(ops, clientv3.OpPut(fmt.Sprintf("%s/10.%d.%d.%d:8000", prefix, j>>16&255, j>>8&255, j&255), "10"))
		}
		_, err := cli.Txn(ctx).Then(ops...).Commit()
		require.NoError(t, err)
	}
	t.Logf("wrote %d keys in %v", n, time.Since(t0).Round(time.Millisecond))

	// The naming service feeding rr and la.
	heap0 := heapInUse()
	b := newBalancers(t, "rr", "la")
	t0 = time.Now()
	ns, err := naming.Start(e.url(prefix), b)
	require.NoError(t, err)
	initTook := time.Since(t0)
	heap1 := heapInUse()
	t.Logf("naming service + rr + la: Init %v (list %d keys, sort, build both balancers), heap +%.1f MB",
		initTook.Round(100*time.Microsecond), n, float64(heap1-heap0)/(1<<20))

	// Selections keep running while lists change: one goroutine, taking
	// turns on rr and la and yielding after each (two busy loops would take
	// both cores from etcd and the watch).
	var stop atomic.Bool
	var selects, slow atomic.Int64 // slow: selections over 1 ms
	var worst atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; !stop.Load(); i++ {
			s0 := time.Now()
			_, err := b.lbs[i%2].Select(loadbalancer.SelectIn{BeginTime: s0})
			d := int64(time.Since(s0))
			if err == nil {
				selects.Add(1)
			}
			if d > int64(time.Millisecond) {
				slow.Add(1)
			}
			if d > worst.Load() {
				worst.Store(d)
			}
			runtime.Gosched()
		}
	})

	var lag, putRTT []time.Duration
	for i := range 50 {
		addr := fmt.Sprintf("10.200.0.%d:8000", i+1)
		arrived := b.expect(addr)
		put := time.Now()
		_, err := cli.Put(ctx, prefix+"/"+addr, "10")
		require.NoError(t, err)
		putRTT = append(putRTT, time.Since(put))
		select {
		case <-arrived:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s not in the balancers 5 s after its Put", addr)
		}
		b.mu.Lock()
		lag = append(lag, b.seen[addr].Sub(put))
		b.mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	ns.Close()

	b.mu.Lock()
	rr, la, deliver := b.rebuild["rr"][1:], b.rebuild["la"][1:], b.deliver[1:] // [0] is Init
	b.mu.Unlock()
	t.Logf("Put -> both balancers serve the new server (50 changes): p50 %v, p90 %v, max %v (the Put's own round trip, etcd's commit: p50 %v)",
		pct(lag, 0.5).Round(10*time.Microsecond), pct(lag, 0.9).Round(10*time.Microsecond), pct(lag, 1).Round(10*time.Microsecond),
		pct(putRTT, 0.5).Round(10*time.Microsecond))
	t.Logf("rebuild per change, %d servers: rr p50 %v max %v; la p50 %v max %v; whole Update (server map, both rebuilds) p50 %v max %v",
		n, pct(rr, 0.5).Round(10*time.Microsecond), pct(rr, 1).Round(10*time.Microsecond),
		pct(la, 0.5).Round(10*time.Microsecond), pct(la, 1).Round(10*time.Microsecond),
		pct(deliver, 0.5).Round(10*time.Microsecond), pct(deliver, 1).Round(10*time.Microsecond))
	t.Logf("selections during the changes: %d, %d over 1 ms, the slowest %v (Select takes no lock: it reads the balancer's snapshot)",
		selects.Load(), slow.Load(), time.Duration(worst.Load()).Round(time.Microsecond))
	require.Less(t, pct(lag, 0.9), 100*time.Millisecond, "a change must reach the balancers within 100 ms")
	require.Less(t, pct(rr, 0.5), 5*time.Millisecond)
	require.Less(t, pct(la, 0.5), 5*time.Millisecond)

	// A channel on the same prefix: endpoints and per-server variables too.
	heap2 := heapInUse()
	t0 = time.Now()
	var ch channel.Channel
	require.NoError(t, ch.Init(e.url(prefix), "rr", nil))
	chInit := time.Since(t0)
	heap3 := heapInUse()
	t.Logf("channel.Init on %d servers (rr): %v, heap +%.1f MB", n+50, chInit.Round(100*time.Microsecond), float64(heap3-heap2)/(1<<20))
	ch.Close()
}
