package server

import (
	"log/slog"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/internal/ctrl"
)

// One dispatch serves every protocol: a protocol parses a request, finds
// its method (findMethod) and admits it (admit); then serverCall runs the
// handler, recovers a panic, and its done sends the answer through the
// protocol's replier and records the call in the method's statistics. So
// Stop+Join, limits, bvars and panics behave the same on baidu_std and
// HTTP.

// serverCall is one request being served. The Controller lives inside it:
// one allocation for both.
type serverCall struct {
	cntl     controller.Controller
	s        *Server
	m        *method
	req      proto.Message
	resp     proto.Message
	received time.Time
	answered atomic.Bool
	replier  replier // the protocol's side of the call, which embeds it
}

// replier sends a call's answer the way its protocol does. reply runs
// once, from done, on the goroutine that called done; it must not wait
// for the client.
type replier interface {
	reply(c *serverCall)
}

// Run calls the handler; a panic is answered with EINTERNAL unless the
// handler had answered already. It is what a worker runs.
func (c *serverCall) Run() {
	defer func() {
		if p := recover(); p != nil {
			slog.Error("gobrpc: handler panicked", "method", c.m.fullName, "panic", p, "stack", string(debug.Stack()))
			if c.answered.CompareAndSwap(false, true) {
				c.cntl.SetFailed(controller.EINTERNAL, "handler of %s panicked: %v", c.m.fullName, p)
				c.finish()
			}
		}
	}()
	c.m.handler(&c.cntl, c.req, c.resp, c.done)
}

// done is the handler's done: it answers, once.
func (c *serverCall) done() {
	if c.answered.Swap(true) {
		slog.Warn("gobrpc: done called more than once", "method", c.m.fullName)
		return
	}
	c.finish()
}

func (c *serverCall) finish() {
	c.replier.reply(c)
	ctrl.Of(&c.cntl).EndServerContext()
	c.s.endCall(c.m, c.received, &c.cntl)
}

// findMethod applies brpc's lookup rules: a service name without a dot is
// a short name (ENOSERVICE when unknown); otherwise an unknown service or
// method is ENOMETHOD.
func (s *Server) findMethod(svcName, methodName string) (*method, controller.Errno, string) {
	var svc *service
	if !strings.Contains(svcName, ".") {
		svc = s.byShort[svcName]
		if svc == nil {
			return nil, controller.ENOSERVICE, "Fail to find service=" + clip(svcName)
		}
	} else {
		svc = s.services[svcName]
	}
	if svc != nil {
		if m := svc.methods[methodName]; m != nil {
			return m, 0, ""
		}
	}
	return nil, controller.ENOMETHOD, "Fail to find method=" + clip(svcName) + "/" + clip(methodName)
}

// clip shortens a name the client sent for an error text: a 10 MB name
// must not come back as a 10 MB answer.
func clip(name string) string {
	const max = 256
	if len(name) <= max {
		return name
	}
	return name[:max] + "...(" + strconv.Itoa(len(name)-max) + " more bytes)"
}
