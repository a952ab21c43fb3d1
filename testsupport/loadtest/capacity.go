package loadtest

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/server"
	"github.com/gobrpc/gobrpc/testsupport/testpb"
)

// EchoMethod is the full name of the method a CapacityServer serves, the
// one to limit with MaxConcurrencyOf.
const EchoMethod = testpb.EchoService_Echo_FullMethodName

// CapacityService is an echo service with a limited capacity, the model
// of an overloaded server: Workers workers, each busy Hold per request,
// so it passes at most C = Workers/Hold requests per second. A request
// first waits for a free worker (a buffered channel used as a semaphore;
// blocked requests are served first come, first served): that wait is the
// queue an overload builds, and it adds to the request's latency. Then it
// holds the worker for Hold (on a timer: no CPU is burnt, so the model's
// capacity does not depend on the machine) and is answered.
//
// Nothing cancels a queued request: as most servers, it does the work
// even when the client has given up, which is why an unlimited server
// under overload ends up answering only requests nobody waits for. Close
// makes the waiting requests (and later ones) fail at once, to tear a
// backlog down quickly.
type CapacityService struct {
	workers   chan struct{}
	hold      time.Duration
	profile   atomic.Pointer[Profile] // what each request holds its worker for
	closed    chan struct{}
	closeOnce sync.Once
	requests  atomic.Int64
	inflight  atomic.Int64
}

// NewCapacityService returns a service with workers workers busy hold per
// request.
func NewCapacityService(workers int, hold time.Duration) *CapacityService {
	if workers < 1 {
		workers = 1
	}
	s := &CapacityService{workers: make(chan struct{}, workers), hold: hold, closed: make(chan struct{})}
	s.profile.Store(&Profile{Base: hold})
	return s
}

// SetProfile changes what later requests cost: each holds its worker for
// p.Base (a server that gets slower loses capacity), and a share
// p.SlowFraction of them then take until p.Slow in all without holding
// it, as a request waiting on something else would (so slow requests do
// not cost capacity). Capacity and Hold keep describing the hold the
// service was made with.
func (s *CapacityService) SetProfile(p Profile) { s.profile.Store(&p) }

// Workers is the number of workers, M: also the concurrency that keeps
// them all busy without a queue (C×L).
func (s *CapacityService) Workers() int { return cap(s.workers) }

// Hold is the time a worker spends on a request, L: the no-load latency
// on the server.
func (s *CapacityService) Hold() time.Duration { return s.hold }

// Capacity is C = Workers/Hold, requests per second. Timers fire a little
// late, so the capacity measured is a few percent lower.
func (s *CapacityService) Capacity() float64 {
	return float64(cap(s.workers)) / s.hold.Seconds()
}

// Requests returns how many requests the service received.
func (s *CapacityService) Requests() int64 { return s.requests.Load() }

// Inflight returns how many requests the service holds, waiting for a
// worker or being served.
func (s *CapacityService) Inflight() int64 { return s.inflight.Load() }

// Close makes the requests waiting for a worker, and every later one,
// fail at once with EINTERNAL; requests being served finish normally. It
// may be called more than once.
func (s *CapacityService) Close() { s.closeOnce.Do(func() { close(s.closed) }) }

// Echo implements testpb.EchoServiceServer.
func (s *CapacityService) Echo(cntl *controller.Controller, req *testpb.EchoRequest, resp *testpb.EchoResponse, done func()) {
	s.requests.Add(1)
	s.inflight.Add(1)
	select {
	case <-s.closed:
		s.fail(cntl, done)
		return
	default:
	}
	select {
	case s.workers <- struct{}{}: // waits for a worker (the server runs each handler on its own goroutine)
	case <-s.closed:
		s.fail(cntl, done)
		return
	}
	resp.Message = req.Message
	p := s.profile.Load()
	time.AfterFunc(p.Base, func() {
		<-s.workers // the worker is free before the answer is written
		if rest := p.Sample() - p.Base; rest > 0 {
			time.AfterFunc(rest, func() {
				s.inflight.Add(-1)
				done()
			})
			return
		}
		s.inflight.Add(-1)
		done()
	})
}

func (s *CapacityService) fail(cntl *controller.Controller, done func()) {
	cntl.SetFailed(controller.EINTERNAL, "loadtest: capacity service closed")
	s.inflight.Add(-1)
	done()
}

// CapacityServer is a server on a loopback port serving a CapacityService.
type CapacityServer struct {
	Server  *server.Server
	Service *CapacityService
	stopped atomic.Bool
}

// StartCapacityServer starts a server on a free 127.0.0.1 port serving a
// CapacityService of workers workers busy hold each, with EchoMethod's
// max concurrency set to limit: anything MaxConcurrency.Set takes (an
// integer, "unlimited", "auto", "bbr", ...); nil leaves it unlimited.
// Stop it when done.
func StartCapacityServer(workers int, hold time.Duration, limit any) (*CapacityServer, error) {
	svc := NewCapacityService(workers, hold)
	srv := server.New(nil)
	if err := testpb.RegisterEchoServiceServer(srv, svc); err != nil {
		return nil, err
	}
	if limit != nil {
		if err := srv.MaxConcurrencyOf(EchoMethod).Set(limit); err != nil {
			return nil, err
		}
	}
	if err := srv.Start("127.0.0.1:0"); err != nil {
		return nil, err
	}
	return &CapacityServer{Server: srv, Service: svc}, nil
}

// Addr is the server's address, "127.0.0.1:port".
func (c *CapacityServer) Addr() string { return c.Server.ListenAddress().String() }

// Stop fails the requests still waiting for a worker (see
// CapacityService.Close), then stops the server and waits for the
// requests being served. It may be called more than once.
func (c *CapacityServer) Stop() {
	if c.stopped.Swap(true) {
		return
	}
	c.Service.Close()
	c.Server.Stop()
	c.Server.Join()
}

// String describes the capacity, e.g. "8 workers × 10ms = 800/s".
func (s *CapacityService) String() string {
	return fmt.Sprintf("%d workers × %v = %.0f/s", s.Workers(), s.hold, s.Capacity())
}
