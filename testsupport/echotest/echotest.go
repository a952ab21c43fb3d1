// Package echotest provides an echo service and helpers for gobrpc's own
// tests: a real server on a loopback port and the goleak options for
// gobrpc's tests.
package echotest

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/server"
	"github.com/gobrpc/gobrpc/testsupport/testpb"
)

// Service echoes the message and the attachment. A message of the form
// "sleep:<duration>" answers after that long from another goroutine;
// "fail:<code>" fails with that code; "hold" returns without calling done
// and hands done to Held, for the test to call.
type Service struct {
	// Canceled receives, for each "wait-cancel" request, whether the
	// handler saw its Context cancelled (within 5 s).
	Canceled chan bool
	// Held receives the done of each "hold" request (StartServer makes it
	// with room for 16).
	Held  chan func()
	Calls atomic.Int64
	// Delay makes requests answer that much later (from another
	// goroutine); with DelayEveryOther only the even-numbered requests
	// this service receives (the 0th, 2nd ...) wait, as brpc's
	// backup_request example server does.
	Delay           atomic.Int64 // nanoseconds
	DelayEveryOther atomic.Bool
	inflight        atomic.Int64
	MaxConcurrent   atomic.Int64 // the most calls seen in the handler at once
}

func (s *Service) enter() {
	n := s.inflight.Add(1)
	for {
		m := s.MaxConcurrent.Load()
		if n <= m || s.MaxConcurrent.CompareAndSwap(m, n) {
			return
		}
	}
}

// Echo implements testpb.EchoServiceServer.
func (s *Service) Echo(cntl *controller.Controller, req *testpb.EchoRequest, resp *testpb.EchoResponse, done func()) {
	n := s.Calls.Add(1) - 1
	s.enter()
	msg := req.GetMessage()
	if d := time.Duration(s.Delay.Load()); d > 0 && (!s.DelayEveryOther.Load() || n%2 == 0) {
		go func() {
			time.Sleep(d)
			resp.Message = req.Message
			cntl.ResponseAttachment().Write(cntl.RequestAttachment().Bytes())
			s.inflight.Add(-1)
			done()
		}()
		return
	}
	if msg == "panic" {
		s.inflight.Add(-1)
		panic("asked to panic")
	}
	if msg == "hold" {
		s.inflight.Add(-1)
		s.Held <- done
		return
	}
	if msg == "wait-cancel" {
		go func() {
			defer done()
			defer s.inflight.Add(-1)
			select {
			case <-cntl.Context().Done():
				s.Canceled <- cntl.IsCanceled()
			case <-time.After(5 * time.Second):
				s.Canceled <- false
			}
		}()
		return
	}
	if d, ok := strings.CutPrefix(msg, "sleep:"); ok {
		dur, _ := time.ParseDuration(d)
		go func() {
			time.Sleep(dur)
			resp.Message = proto.String(msg)
			s.inflight.Add(-1)
			done()
		}()
		return
	}
	defer done()
	defer s.inflight.Add(-1)
	if c, ok := strings.CutPrefix(msg, "fail:"); ok {
		code := controller.EINTERNAL
		for _, e := range []controller.Errno{controller.ELIMIT, controller.ELOGOFF, controller.EINTERNAL, controller.EREQUEST} {
			if e.Name() == c {
				code = e
			}
		}
		cntl.SetFailed(code, "asked to fail with %s", c)
		return
	}
	resp.Message = req.Message
	cntl.ResponseAttachment().Write(cntl.RequestAttachment().Bytes())
}

// StartServer starts a server with Service on a free loopback port and
// stops it when the test ends.
func StartServer(t testing.TB, opts *server.Options) (*server.Server, *Service) {
	t.Helper()
	srv := server.New(opts)
	svc := &Service{Canceled: make(chan bool, 16), Held: make(chan func(), 16)}
	if err := testpb.RegisterEchoServiceServer(srv, svc); err != nil {
		t.Fatal(err)
	}
	if err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv.Stop()
		srv.Join()
	})
	return srv, svc
}

// LeakOptions are the goleak options of gobrpc's tests: every goroutine a
// test started must be gone, none is ignored.
func LeakOptions() []goleak.Option { return nil }
