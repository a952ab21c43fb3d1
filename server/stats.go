package server

import (
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/gobrpc/gobrpc/bvar"
	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/internal/ctrl"
	"github.com/gobrpc/gobrpc/rpcz"
	"github.com/gobrpc/gobrpc/server/builtin"
	"github.com/gobrpc/gobrpc/server/limiter"
)

// Statistics brpc keeps for a server and its methods, exposed as bvars
// named as brpc names them: rpc_server_<port>_... for the server and
// rpc_server_<port>_<pkg_service_method>_... for each method.

// methodStats are one method's counters.
type methodStats struct {
	latency     *bvar.LatencyRecorder // _latency, _qps, _count, _max_latency, percentiles
	errors      *bvar.Adder[int64]    // _error
	concurrency atomic.Int64          // _concurrency: requests in the handler
	vars        []interface{ Hide() }
	prefix      string
}

func newMethodStats(serverPrefix, fullName string) *methodStats {
	prefix := serverPrefix + "_" + bvar.ToUnderscoredName(fullName)
	m := &methodStats{prefix: prefix, latency: bvar.NewLatencyRecorder(""), errors: bvar.NewAdder[int64]("")}
	if err := m.latency.Expose(prefix); err == nil {
		m.vars = append(m.vars, m.latency)
	}
	if m.errors.ExposeAs(prefix, "error") == nil {
		m.vars = append(m.vars, m.errors)
	}
	if v, err := bvar.NewPassiveStatus(prefix+"_concurrency", m.concurrency.Load); err == nil {
		m.vars = append(m.vars, v)
	}
	return m
}

// exposeLimit shows the limiter's live limit as _max_concurrency.
func (m *methodStats) exposeLimit(l limiter.Limiter) {
	if v, err := bvar.NewPassiveStatus(m.prefix+"_max_concurrency", l.MaxConcurrency); err == nil {
		m.vars = append(m.vars, v)
	}
}

func (m *methodStats) close() {
	for _, v := range m.vars {
		v.Hide()
	}
	m.latency.Close()
}

// serverStats are the server-wide counters.
type serverStats struct {
	prefix string
	errors *bvar.Adder[int64]
	vars   []interface{ Hide() }
}

func (s *Server) exposeServerStats() {
	port := 0
	if a, ok := s.addr.(*net.TCPAddr); ok {
		port = a.Port
	}
	prefix := "rpc_server_" + strconv.Itoa(port)
	st := &serverStats{prefix: prefix, errors: bvar.NewAdder[int64]("")}
	if st.errors.ExposeAs(prefix, "error") == nil {
		st.vars = append(st.vars, st.errors)
	}
	passive := map[string]func() int64{
		"concurrency":      s.inflight.Load,
		"connection_count": func() int64 { return int64(len(s.Connections())) },
		"service_count":    func() int64 { return int64(len(s.services)) },
		"uptime":           func() int64 { return int64(time.Since(s.startTime).Seconds()) },
		"start_time":       func() int64 { return s.startTime.Unix() },
	}
	for name, fn := range passive {
		if v, err := bvar.NewPassiveStatus(prefix+"_"+name, fn); err == nil {
			st.vars = append(st.vars, v)
		}
	}
	for _, svc := range s.services {
		for _, m := range svc.methods {
			m.stats = newMethodStats(prefix, m.fullName)
			if m.limiter != nil {
				m.stats.exposeLimit(m.limiter)
			}
		}
	}
	s.stats = st
}

func (s *Server) hideServerStats() {
	if s.stats == nil {
		return
	}
	for _, v := range s.stats.vars {
		v.Hide()
	}
	for _, svc := range s.services {
		for _, m := range svc.methods {
			if m.stats != nil {
				m.stats.close()
			}
		}
	}
}

// admit counts a request in and applies the server's and the method's
// concurrency limits, in brpc's order. It returns 0 when the request may
// run; otherwise the request is not counted and gets the error returned.
// Builtin pages never come here, so they are never limited.
func (s *Server) admit(m *method, timeoutMs int64) (controller.Errno, string) {
	if !s.beginRequest() {
		return controller.ELOGOFF, "Server is stopping"
	}
	if max := s.opts.MaxConcurrency; max > 0 && s.inflight.Load() > int64(max) {
		s.endRequest()
		s.stats.errors.Add(1)
		return controller.ELIMIT, "Reached server's max_concurrency=" + strconv.Itoa(max)
	}
	c := m.stats.concurrency.Add(1)
	if l := m.limiter; l != nil && !l.OnRequested(c, limiter.Request{TimeoutMs: timeoutMs}) {
		m.stats.concurrency.Add(-1)
		m.stats.errors.Add(1)
		s.stats.errors.Add(1)
		s.endRequest()
		return controller.ELIMIT, "Rejected by " + m.fullName + "'s ConcurrencyLimiter, concurrency=" + strconv.FormatInt(c, 10)
	}
	return 0, ""
}

// endCall records a finished request (and its rpcz span).
func (s *Server) endCall(m *method, received time.Time, cntl *controller.Controller) {
	m.stats.concurrency.Add(-1)
	failed := cntl.Failed()
	if m.limiter != nil {
		m.limiter.OnResponded(int32(cntl.ErrorCode()), time.Since(received))
	}
	if rpcz.On() {
		st := ctrl.Of(cntl)
		span := rpcz.Span{Server: true, Method: m.fullName, LogID: cntl.LogID(), Start: received,
			Latency: time.Since(received), ErrorCode: int32(cntl.ErrorCode()), ErrorText: cntl.ErrorText(),
			TraceID: st.Trace.TraceID, SpanID: st.Trace.SpanID, ParentSpanID: st.ParentSpanID}
		if r := cntl.RemoteSide(); r != nil {
			span.Remote = r.String()
		}
		rpcz.Record(span)
	}
	if failed {
		m.stats.errors.Add(1)
		s.stats.errors.Add(1)
	} else {
		m.stats.latency.Record(time.Since(received))
	}
	s.endRequest()
}

// ---- builtin.Server ----

// Version is what /version shows.
func (s *Server) Version() string { return s.opts.Version }

// StartTime is when Start was called.
func (s *Server) StartTime() time.Time { return s.startTime }

// Health is what /health shows ("" for "OK").
func (s *Server) Health() string {
	if s.opts.HealthReporter != nil {
		return s.opts.HealthReporter()
	}
	return ""
}

// Services lists the services and their methods' statistics.
func (s *Server) Services() []builtin.ServiceStatus {
	var out []builtin.ServiceStatus
	for _, svc := range s.services {
		ss := builtin.ServiceStatus{Descriptor: svc.desc}
		mds := svc.desc.Methods()
		for i := 0; i < mds.Len(); i++ {
			m := svc.methods[string(mds.Get(i).Name())]
			ms := builtin.MethodStatus{FullName: m.fullName, MaxConcurrency: "unlimited"}
			if m.limiter != nil {
				ms.MaxConcurrency = strconv.FormatInt(m.limiter.MaxConcurrency(), 10)
			}
			if st := m.stats; st != nil {
				ms.Count = st.latency.Count()
				ms.Errors = st.errors.Get()
				ms.LatencyUs = st.latency.Latency()
				ms.MaxLatencyUs = st.latency.MaxLatency()
				ms.QPS = st.latency.QPS()
				ms.Concurrency = st.concurrency.Load()
				ms.VarPrefix = st.prefix
			}
			ss.Methods = append(ss.Methods, ms)
		}
		out = append(out, ss)
	}
	return out
}

// Connections lists the open connections.
func (s *Server) Connections() []builtin.ConnectionStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]builtin.ConnectionStatus, 0, len(s.conns)+len(s.httpConns))
	for c := range s.conns {
		out = append(out, builtin.ConnectionStatus{Remote: c.RemoteAddr(), Local: c.LocalAddr(), Protocol: "baidu_std", Created: c.Created(), InFlight: int64(c.InFlight())})
	}
	for c, created := range s.httpConns {
		out = append(out, builtin.ConnectionStatus{Remote: c.RemoteAddr(), Local: c.LocalAddr(), Protocol: "http", Created: created})
	}
	return out
}
