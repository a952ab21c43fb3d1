// Package loadtest drives closed-loop load through a channel.Channel
// against local echo servers whose latency follows a profile that can
// change at run time, and measures every second exactly: calls, errors,
// backups sent (and refused), requests the servers received, and latency
// percentiles computed from every latency of that second.
//
// It serves the backup-request demo (example/rate_limited_backup) and
// benchmark (tools/bench/cmd/backupbench): a latency spike or a stall is
// a phase whose Profile makes every request slow.
//
//	res, err := loadtest.Run(ctx, loadtest.Config{
//		Servers: 3, Callers: 16, Options: &opts,
//		Phases: []loadtest.Phase{
//			{Name: "normal", Seconds: 20, Profile: loadtest.Profile{Base: time.Millisecond, SlowFraction: 0.05, Slow: 50 * time.Millisecond}},
//			{Name: "stall", Seconds: 10, Profile: loadtest.Profile{Base: 50 * time.Millisecond}},
//		}})
//	for _, s := range res.Seconds { fmt.Println(s.Index, s.Phase, s.Calls, s.BackupRatio(), s.P99) }
//
// Seconds are the bvar sampler's (measured in a bvar.SampleHook), so each
// one holds exactly one period of anything the sampler drives, such as
// the strict backup budget of backup.RateLimitedPolicy.
package loadtest

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/server"
	"github.com/gobrpc/gobrpc/testsupport/testpb"
)

// Profile is the latency of the servers' requests: each request takes
// Slow with probability SlowFraction, Base otherwise. The zero Profile
// answers at once.
type Profile struct {
	Base         time.Duration
	SlowFraction float64 // in [0, 1]
	Slow         time.Duration
}

// Sample draws one request's latency.
func (p Profile) Sample() time.Duration {
	if p.SlowFraction > 0 && rand.Float64() < p.SlowFraction {
		return p.Slow
	}
	return p.Base
}

// String describes the profile, e.g. "1ms, 5% at 50ms".
func (p Profile) String() string {
	if p.SlowFraction <= 0 || p.Slow == p.Base {
		return p.Base.String()
	}
	if p.SlowFraction >= 1 {
		return p.Slow.String()
	}
	return fmt.Sprintf("%v, %g%% at %v", p.Base, p.SlowFraction*100, p.Slow)
}

// Cluster is a set of echo servers on 127.0.0.1 sharing one Profile.
// Handlers never sleep: a request's latency elapses on a timer, which
// then answers it, as an asynchronous brpc handler would.
type Cluster struct {
	servers  []*server.Server
	svcs     []*echoService
	profile  atomic.Pointer[Profile]
	stopped  atomic.Bool
	listURL  string
	addrList []string
}

// StartCluster starts n servers on free loopback ports, answering with
// profile p. Stop it when done.
func StartCluster(n int, p Profile) (*Cluster, error) {
	if n < 1 {
		return nil, fmt.Errorf("loadtest: %d servers, want at least 1", n)
	}
	c := &Cluster{}
	c.SetProfile(p)
	for range n {
		srv := server.New(nil)
		svc := &echoService{cluster: c}
		if err := testpb.RegisterEchoServiceServer(srv, svc); err != nil {
			c.Stop()
			return nil, err
		}
		if err := srv.Start("127.0.0.1:0"); err != nil {
			c.Stop()
			return nil, err
		}
		c.servers = append(c.servers, srv)
		c.svcs = append(c.svcs, svc)
		c.addrList = append(c.addrList, srv.ListenAddress().String())
	}
	c.listURL = "list://" + strings.Join(c.addrList, ",")
	return c, nil
}

// SetProfile changes the latency of requests arriving from now on
// (requests already waiting keep theirs).
func (c *Cluster) SetProfile(p Profile) { c.profile.Store(&p) }

// Profile returns the profile in force.
func (c *Cluster) Profile() Profile { return *c.profile.Load() }

// Addrs returns the servers' addresses, "127.0.0.1:port".
func (c *Cluster) Addrs() []string { return append([]string(nil), c.addrList...) }

// ListURL returns the naming-service URL of the servers, "list://a,b,c".
func (c *Cluster) ListURL() string { return c.listURL }

// Requests returns how many requests the servers received in all.
func (c *Cluster) Requests() int64 {
	var n int64
	for _, s := range c.svcs {
		n += s.requests.Load()
	}
	return n
}

// RequestsPerServer returns how many requests each server received.
func (c *Cluster) RequestsPerServer() []int64 {
	out := make([]int64, len(c.svcs))
	for i, s := range c.svcs {
		out[i] = s.requests.Load()
	}
	return out
}

// Inflight returns how many requests the servers hold (received, not
// answered yet).
func (c *Cluster) Inflight() int64 {
	var n int64
	for _, s := range c.svcs {
		n += s.inflight.Load()
	}
	return n
}

// WaitIdle waits until the servers hold no request, at most timeout, and
// reports whether they got there. Callers that stopped may still have
// losing backups (or originals) waiting on the servers: waiting for them
// before closing the channel spares the servers writing to closed
// connections.
func (c *Cluster) WaitIdle(timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for c.Inflight() > 0 {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

// Stop stops every server and waits until each answered the requests it
// holds. It may be called more than once.
func (c *Cluster) Stop() {
	if c.stopped.Swap(true) {
		return
	}
	for _, s := range c.servers {
		s.Stop()
	}
	for _, s := range c.servers {
		s.Join()
	}
}

// echoService answers with the request's message after a latency drawn
// from the cluster's profile.
type echoService struct {
	cluster  *Cluster
	requests atomic.Int64
	inflight atomic.Int64
}

func (s *echoService) Echo(cntl *controller.Controller, req *testpb.EchoRequest, resp *testpb.EchoResponse, done func()) {
	s.requests.Add(1)
	s.inflight.Add(1)
	resp.Message = req.Message
	d := s.cluster.profile.Load().Sample()
	if d <= 0 {
		done()
		s.inflight.Add(-1)
		return
	}
	time.AfterFunc(d, func() { // off the handler goroutine
		done()
		s.inflight.Add(-1)
	})
}
