// Package server is gobrpc's server: it serves protobuf services over
// baidu_std and HTTP (JSON or protobuf bodies) on one port, with brpc's
// dispatch rules, error replies, builtin pages (/vars, /status, /flags ...)
// and graceful stop.
//
//	srv := server.New(nil)
//	if err := echopb.RegisterEchoServiceServer(srv, &echoImpl{}); err != nil { ... }
//	if err := srv.Start("127.0.0.1:8000"); err != nil { ... }
//	srv.RunUntilAskedToQuit()
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/gobrpc/gobrpc/auth"
	"github.com/gobrpc/gobrpc/bvar"
	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/flags"
	"github.com/gobrpc/gobrpc/internal/transport"
	"github.com/gobrpc/gobrpc/rpcz"
	"github.com/gobrpc/gobrpc/server/builtin"
	"github.com/gobrpc/gobrpc/server/limiter"
)

// Options configure a Server. The zero value (or nil) means brpc's
// defaults.
type Options struct {
	// MaxBodySize bounds a request body; a larger frame closes that
	// connection. 0 means the max_body_size flag (64 MiB).
	MaxBodySize int
	// IdleTimeoutSec closes connections idle this long; <= 0 never does
	// (brpc's idle_timeout_sec, default -1).
	IdleTimeoutSec int
	// MaxConcurrency bounds the requests in handlers at once, server-wide;
	// more are rejected with ELIMIT (HTTP 503). Builtin pages are not
	// counted. 0 means unlimited. Per method, see MaxConcurrencyOf.
	MaxConcurrency int
	// InternalPort, when > 0, serves the builtin pages only on this port
	// (on the main port's host); the main port then answers 403 for them
	// and /flags cannot be set there. 0 means none (brpc's -1).
	InternalPort int
	// DisableBuiltinServices turns the builtin pages off (brpc's
	// has_builtin_services=false).
	DisableBuiltinServices bool
	// Version is what /version shows.
	Version string
	// HealthReporter, when set, answers /health instead of "OK".
	HealthReporter func() string
	// Auth verifies clients, as brpc's ServerOptions.auth: the credential
	// of the first baidu_std request of each connection (ERPCAUTH and the
	// connection closed when it fails), and the Authorization header of
	// every HTTP call (401; builtin pages on the internal port excepted,
	// as in brpc). Handlers read the result in cntl.AuthContext().
	Auth auth.Authenticator
	// Interceptors wrap every method's handler, the first outermost; see
	// Interceptor.
	Interceptors []Interceptor
}

// Interceptor runs around a method's handler, as grpc-go's unary
// interceptors do and with the semantics of brpc's Interceptor: it sees
// the call's Controller (method, remote side, user fields, auth context),
// request and response, and either passes the call on with next (possibly
// with a done of its own, which runs when the handler answers) or rejects
// it with cntl.SetFailed(code, ...) and done() without calling next. It
// must call done, or have next call it, exactly once.
type Interceptor func(cntl *controller.Controller, req, resp proto.Message, done func(), next Handler)

// intercept wraps h in the interceptors, the first outermost.
func intercept(ics []Interceptor, h Handler) Handler {
	for i := len(ics) - 1; i >= 0; i-- {
		ic, next := ics[i], h
		h = func(cntl *controller.Controller, req, resp proto.Message, done func()) {
			ic(cntl, req, resp, done, next)
		}
	}
	return h
}

// Server states.
const (
	stateNew int32 = iota
	stateRunning
	stateStopping
	stateStopped
)

// Server serves registered services. Register services, then Start; Stop
// and Join to shut down.
type Server struct {
	opts Options

	mu        sync.Mutex
	services  map[string]*service // by full name, e.g. "example.EchoService"
	byShort   map[string]*service // by short name, e.g. "EchoService"
	conns     map[*transport.ServerConn]struct{}
	httpConns map[net.Conn]time.Time
	sniffing  map[*net.TCPConn]struct{} // new connections whose protocol is not known yet

	state      atomic.Int32
	mainLn     *listener
	internalLn *listener
	addr       net.Addr
	startTime  time.Time
	loops      sync.WaitGroup // accept loops and the HTTP server
	handshakes sync.WaitGroup // connections being classified
	http       *http.Server
	httpLn     *chanListener
	h2         *http.Server // HTTP/2 (h2c): gRPC
	h2Ln       *chanListener
	pages      *builtin.Pages
	stats      *serverStats

	inflight  atomic.Int64
	workers   workerPool    // runs the handlers of baidu_std requests
	onStop    []func()      // run by Stop before it stops accepting
	stopIdle  chan struct{} // closed by Join: ends closeIdleConnections
	stopHooks sync.Once
	drainMu   sync.Mutex
	drainCond *sync.Cond
}

type service struct {
	desc    protoreflect.ServiceDescriptor
	methods map[string]*method
}

type method struct {
	fullName    string // "example.EchoService.Echo"
	desc        protoreflect.MethodDescriptor
	stats       *methodStats    // set at Start, when the port is known
	limiter     limiter.Limiter // nil: unlimited
	handler     Handler
	requestType protoreflect.MessageType
	respType    protoreflect.MessageType
}

func init() {
	builtin.RpczHandler = rpcz.Handler()
}

// New returns a server; opts may be nil.
func New(opts *Options) *Server {
	s := &Server{
		services:  map[string]*service{},
		byShort:   map[string]*service{},
		conns:     map[*transport.ServerConn]struct{}{},
		httpConns: map[net.Conn]time.Time{},
		sniffing:  map[*net.TCPConn]struct{}{},
	}
	if opts != nil {
		s.opts = *opts
	}
	s.drainCond = sync.NewCond(&s.drainMu)
	return s
}

// RegisterService adds a service. Generated Register...Server functions
// call it; it must happen before Start.
func (s *Server) RegisterService(desc *ServiceDesc) error {
	if desc == nil || desc.Descriptor == nil {
		return errors.New("server: RegisterService needs a service descriptor")
	}
	if s.state.Load() != stateNew {
		return errors.New("server: services must be registered before Start")
	}
	sd := desc.Descriptor
	svc := &service{desc: sd, methods: map[string]*method{}}
	handlers := map[string]Handler{}
	for _, m := range desc.Methods {
		if m.Handler == nil {
			return fmt.Errorf("server: method %s.%s has a nil handler", sd.FullName(), m.Name)
		}
		handlers[m.Name] = m.Handler
	}
	mds := sd.Methods()
	for i := 0; i < mds.Len(); i++ {
		md := mds.Get(i)
		if md.IsStreamingClient() || md.IsStreamingServer() {
			return fmt.Errorf("server: streaming method %s is not supported", md.FullName())
		}
		h, ok := handlers[string(md.Name())]
		if !ok {
			return fmt.Errorf("server: no handler for method %s", md.FullName())
		}
		reqType, err := protoregistry.GlobalTypes.FindMessageByName(md.Input().FullName())
		if err != nil {
			return fmt.Errorf("server: request type of %s: %w", md.FullName(), err)
		}
		respType, err := protoregistry.GlobalTypes.FindMessageByName(md.Output().FullName())
		if err != nil {
			return fmt.Errorf("server: response type of %s: %w", md.FullName(), err)
		}
		svc.methods[string(md.Name())] = &method{
			fullName: string(md.FullName()), desc: md, handler: intercept(s.opts.Interceptors, h),
			requestType: reqType, respType: respType,
		}
		delete(handlers, string(md.Name()))
	}
	for name := range handlers {
		return fmt.Errorf("server: service %s has no method %s", sd.FullName(), name)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	full := string(sd.FullName())
	if _, dup := s.services[full]; dup {
		return fmt.Errorf("server: service %s is already registered", full)
	}
	s.services[full] = svc
	short := string(sd.Name())
	if _, dup := s.byShort[short]; dup {
		s.byShort[short] = nil // ambiguous short name: only full names work
	} else {
		s.byShort[short] = svc
	}
	return nil
}

// MaxConcurrency is a method's concurrency setting (brpc's
// AdaptiveMaxConcurrency); see Server.MaxConcurrencyOf.
type MaxConcurrency struct {
	s      *Server
	method string
}

// MaxConcurrencyOf returns the concurrency setting of a method, named
// "pkg.Service.Method". Set it before Start.
func (s *Server) MaxConcurrencyOf(fullMethodName string) *MaxConcurrency {
	return &MaxConcurrency{s: s, method: fullMethodName}
}

// Set limits the method: an integer N (at most N requests in its handler;
// 0 is unlimited), "unlimited", "auto", "bbr", "timeout", or the name of a
// limiter registered with limiter.Register. It must be called before
// Start.
func (mc *MaxConcurrency) Set(v any) error {
	var spec string
	switch x := v.(type) {
	case int:
		spec = strconv.Itoa(x)
	case int64:
		spec = strconv.FormatInt(x, 10)
	case string:
		spec = x
	default:
		return fmt.Errorf("server: max concurrency of %s must be an integer or a name, got %T", mc.method, v)
	}
	s := mc.s
	if s.state.Load() != stateNew {
		return errors.New("server: max concurrency must be set before Start")
	}
	i := strings.LastIndexByte(mc.method, '.')
	if i <= 0 {
		return fmt.Errorf("server: %q is not a full method name (pkg.Service.Method)", mc.method)
	}
	s.mu.Lock()
	svc := s.services[mc.method[:i]]
	var m *method
	if svc != nil {
		m = svc.methods[mc.method[i+1:]]
	}
	s.mu.Unlock()
	if m == nil {
		return fmt.Errorf("server: no method %s (register its service first)", mc.method)
	}
	l, err := limiter.New(spec)
	if err != nil {
		return fmt.Errorf("server: max concurrency of %s: %w", mc.method, err)
	}
	m.limiter = l
	return nil
}

// Start listens on addr ("ip:port", ":port", "host:port"; port 0 picks a
// free one, see ListenAddress) and starts serving.
func (s *Server) Start(addr string) error {
	if !s.state.CompareAndSwap(stateNew, stateRunning) {
		return errors.New("server: Start called twice")
	}
	if err := s.start(addr); err != nil {
		s.state.Store(stateStopped)
		return err
	}
	return nil
}

func (s *Server) start(addr string) error {
	if !strings.Contains(addr, ":") {
		addr = ":" + addr // brpc's Start(port)
	}
	if s.opts.MaxBodySize <= 0 {
		s.opts.MaxBodySize = int(flags.MaxBodySize.Get())
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("server: listen on %s: %w", addr, err)
	}
	s.mainLn = &listener{ln: ln}
	if s.opts.InternalPort > 0 {
		host, _, _ := net.SplitHostPort(ln.Addr().String())
		iln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(s.opts.InternalPort)))
		if err != nil {
			ln.Close()
			return fmt.Errorf("server: listen on internal port %d: %w", s.opts.InternalPort, err)
		}
		s.internalLn = &listener{ln: iln, internal: true}
	}
	s.addr = ln.Addr()
	s.startTime = time.Now()
	bvar.ExposeProcessVariables() // once per process, brpc's process_* family
	s.exposeServerStats()
	if !s.opts.DisableBuiltinServices {
		// With an internal port the main port refuses builtin pages
		// altogether (ServeHTTP), so the pages may always set flags.
		s.pages = builtin.New(s, builtin.Options{AllowSetFlags: true})
	}
	s.newHTTPServer()
	s.stopIdle = make(chan struct{})
	if s.opts.IdleTimeoutSec > 0 {
		s.loops.Add(1)
		go s.closeIdleConnections(time.Duration(s.opts.IdleTimeoutSec) * time.Second)
	}
	for _, l := range []*listener{s.mainLn, s.internalLn} {
		if l != nil {
			s.loops.Add(1)
			go s.acceptLoop(l)
		}
	}
	return nil
}

// ListenAddress is the address the server listens on.
func (s *Server) ListenAddress() net.Addr { return s.addr }

// InternalAddress is the internal port's address, nil without one.
func (s *Server) InternalAddress() net.Addr {
	if s.internalLn == nil {
		return nil
	}
	return s.internalLn.ln.Addr()
}

// Stop runs the OnStop hooks, then stops accepting connections; requests
// that still arrive get ELOGOFF (HTTP 503), so clients retry elsewhere,
// while requests in flight finish. Call Join to wait for them.
func (s *Server) Stop() error {
	if s.state.Load() != stateRunning {
		return nil
	}
	s.stopHooks.Do(func() { // a concurrent Stop waits for the hooks too
		s.mu.Lock()
		hooks := s.onStop
		s.onStop = nil
		s.mu.Unlock()
		for _, f := range hooks {
			f()
		}
	})
	if !s.state.CompareAndSwap(stateRunning, stateStopping) {
		return nil
	}
	// Close only the listeners here: connections stay up until their
	// requests are answered (Join closes them).
	for _, l := range []*listener{s.mainLn, s.internalLn} {
		if l != nil {
			l.ln.Close()
		}
	}
	s.abortHandshakes()
	// New requests get ELOGOFF from here on, so idle handler goroutines can
	// go now (busy ones end after their request), even if Join is never
	// called.
	s.workers.stop()
	s.signalIfDrained()
	return nil
}

// OnStop makes Stop call f first, while the server still answers as
// usual: the place to take the server out of a naming service (for
// example an etcd registration's Close), so clients stop sending before
// requests get ELOGOFF. Hooks run once, in the order they were added.
func (s *Server) OnStop(f func()) {
	s.mu.Lock()
	s.onStop = append(s.onStop, f)
	s.mu.Unlock()
}

// Join waits until Stop was called and every request in flight has been
// answered (handlers called done; Join never waits for a client to read),
// lets the answers still queued go out while their clients read them,
// then closes every connection.
func (s *Server) Join() {
	if s.state.Load() == stateNew {
		return
	}
	s.drainMu.Lock()
	for s.state.Load() == stateRunning || s.inflight.Load() != 0 {
		s.drainCond.Wait()
	}
	s.drainMu.Unlock()
	if !s.state.CompareAndSwap(stateStopping, stateStopped) {
		return // another Join did it
	}
	s.handshakes.Wait() // every new connection is handed over or closed
	s.mu.Lock()
	conns := make([]*transport.ServerConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	flushAnswers(conns)
	for _, c := range conns {
		c.Close()
	}
	s.httpLn.Close()
	s.h2Ln.Close()
	// The answers handlers gave may still be on their way (an HTTP/2
	// stream's trailers leave after its handler returned): Shutdown lets
	// them go (HTTP/2 connections get a GOAWAY), within the same bound as
	// baidu_std's answers; Close ends what is left.
	ctx, cancel := context.WithTimeout(context.Background(), joinFlushStall)
	var wg sync.WaitGroup
	for _, srv := range []*http.Server{s.http, s.h2} {
		wg.Go(func() { srv.Shutdown(ctx) })
	}
	wg.Wait()
	cancel()
	s.http.Close()
	s.h2.Close()
	close(s.stopIdle)
	s.loops.Wait()
	if s.pages != nil {
		s.pages.Close()
	}
	s.hideServerStats()
}

// Join gives the answers queued on the connections this long to leave
// once they stop moving (a client that does not read), and at most
// joinFlushLimit in all.
const (
	joinFlushStall = 200 * time.Millisecond
	joinFlushLimit = 5 * time.Second
)

// flushAnswers waits until the answers queued on conns are written, while
// their clients keep reading them.
func flushAnswers(conns []*transport.ServerConn) {
	start := time.Now()
	lastMove, lastWritten := start, int64(-1)
	for {
		unwritten, written := 0, int64(0)
		for _, c := range conns {
			unwritten += c.Unwritten()
			written += c.Written()
		}
		now := time.Now()
		if unwritten == 0 || now.Sub(start) > joinFlushLimit {
			return
		}
		if written != lastWritten {
			lastMove, lastWritten = now, written
		} else if now.Sub(lastMove) > joinFlushStall {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// closeIdleConnections is brpc's idle_timeout_sec: once a second it closes
// the baidu_std connections on which nothing moved for that long.
func (s *Server) closeIdleConnections(timeout time.Duration) {
	defer s.loops.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-s.stopIdle:
			return
		case now := <-t.C:
			s.mu.Lock()
			var idle []*transport.ServerConn
			for c := range s.conns {
				// Idle: no byte moved either way for timeout, no request in
				// a handler and no answer waiting to go out.
				if c.InFlight() == 0 && c.Unwritten() == 0 && now.Sub(c.IdleSince()) >= timeout {
					idle = append(idle, c)
				}
			}
			s.mu.Unlock()
			for _, c := range idle {
				c.Close()
			}
		}
	}
}

// RunUntilAskedToQuit blocks until SIGINT or SIGTERM, then stops the
// server and waits for it, as brpc's.
func (s *Server) RunUntilAskedToQuit() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)
	<-sig
	slog.Info("gobrpc: asked to quit, stopping server", "addr", s.addr)
	s.Stop()
	s.Join()
}

// beginRequest counts a request in flight; it fails once the server stops.
func (s *Server) beginRequest() bool {
	s.inflight.Add(1)
	if s.state.Load() != stateRunning {
		s.endRequest()
		return false
	}
	return true
}

func (s *Server) endRequest() {
	if s.inflight.Add(-1) == 0 && s.state.Load() != stateRunning {
		s.signalIfDrained()
	}
}

func (s *Server) signalIfDrained() {
	s.drainMu.Lock()
	s.drainCond.Broadcast()
	s.drainMu.Unlock()
}

// newMessage allocates a message of type t.
func newMessage(t protoreflect.MessageType) proto.Message { return t.New().Interface() }
