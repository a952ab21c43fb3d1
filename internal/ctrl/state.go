// Package ctrl holds the parts of a Controller that only the framework
// (channel, server, transport) may write: results of a call, server-side
// request data and the hook used by StartCancel.
//
// The public controller package owns a State inside every Controller and
// installs Of at init, so users cannot reach these fields while the
// framework packages can, without an import cycle.
package ctrl

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/gobrpc/gobrpc/auth"
)

// Call is a call made with a Controller, in flight or over.
type Call interface {
	// Cancel ends the call with ECANCELED if it has not ended yet.
	Cancel()
	// Wait returns once the call has ended and its done has returned.
	Wait()
}

// State is the framework-owned part of a Controller.
type State struct {
	// Results, written once by the call's single completion owner.
	ErrorCode        int32
	ErrorText        string
	LatencyUs        int64
	RemoteSide       net.Addr
	LocalSide        net.Addr
	RetriedCount     int
	HasBackupRequest bool
	BackupWon        bool
	// GRPCStatus is the exact gRPC status of a call answered by a gRPC
	// server, or set by a handler (protocol/grpc.SetStatus); 0 otherwise.
	GRPCStatus uint32

	// brpc's user_fields, nil until a Controller method creates them or a
	// peer sent some.
	RequestUserFields  map[string]string
	ResponseUserFields map[string]string

	// Server side.
	Server        bool
	LogID         int64
	HasLogID      bool
	ServiceName   string
	MethodName    string
	ConnCtx       context.Context // cancelled when the client's connection breaks
	Deadline      time.Time       // received + the timeout the client delivered; zero if none
	ReceivedAtNs  int64
	TimeoutMsSent int32         // the timeout the client delivered in the meta, 0 if none
	Trace         Trace         // the server span: the client's, or a new one when rpcz is on
	ParentSpanID  int64         // the client span's parent, for the server span
	Auth          *auth.Context // what the server's Authenticator verified of the connection
	// The handler's context, built on first use (most handlers never ask)
	// and cancelled when the call ends. Guarded by Mu.
	ctx    context.Context
	cancel context.CancelFunc
	ended  bool // the call was answered: a context built now is born cancelled

	// Call lifecycle (client side). Mu guards Call, CancelRequested and
	// InUse. Call is the last call made with the Controller: the call
	// itself is what Join waits on, so a done that Resets the Controller
	// and starts the next call touches nothing the previous call still
	// uses.
	Mu              sync.Mutex
	Call            Call
	CancelRequested bool
	InUse           bool
}

// ServerContext is a server call's context: the connection's, with the
// client's deadline and trace. It is built once, on first use.
func (s *State) ServerContext() context.Context {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	if s.ctx != nil {
		return s.ctx
	}
	ctx := s.ConnCtx
	if ctx == nil {
		ctx = context.Background()
	}
	if s.Trace.TraceID != 0 {
		ctx = WithTrace(ctx, s.Trace)
	}
	if !s.Deadline.IsZero() {
		ctx, s.cancel = context.WithDeadline(ctx, s.Deadline)
	} else {
		ctx, s.cancel = context.WithCancel(ctx)
	}
	if s.ended {
		s.cancel()
	}
	s.ctx = ctx
	return ctx
}

// EndServerContext cancels the handler's context once the call is
// answered, as net/http cancels a request's; one asked for later is born
// cancelled.
func (s *State) EndServerContext() {
	s.Mu.Lock()
	s.ended = true
	cancel := s.cancel
	s.Mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// Trace identifies an rpcz span: the trace it belongs to and its own id.
type Trace struct {
	TraceID, SpanID int64
}

type traceKey struct{}

// WithTrace returns ctx carrying span t: calls made with it are its
// children.
func WithTrace(ctx context.Context, t Trace) context.Context {
	return context.WithValue(ctx, traceKey{}, t)
}

// TraceOf returns the span ctx carries, if any.
func TraceOf(ctx context.Context) (Trace, bool) {
	if ctx == nil {
		return Trace{}, false
	}
	t, ok := ctx.Value(traceKey{}).(Trace)
	return t, ok
}

// Of returns the framework-owned state of a *controller.Controller.
// It is installed by package controller at init time.
var Of func(cntl any) *State
