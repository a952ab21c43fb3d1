package channel

import (
	"context"
	"sync"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/errno"
	"github.com/gobrpc/gobrpc/internal/ctrl"
)

// Invoker sends a call: the rest of the interceptor chain, then the
// channel. It returns the call's error (cntl.Err()).
type Invoker func(ctx context.Context, md protoreflect.MethodDescriptor, cntl *controller.Controller,
	req, resp proto.Message) error

// Interceptor wraps the calls of a channel, in grpc-go's shape
// (grpc.UnaryClientInterceptor): it sees the method, the Controller
// (settings before, results after), the request and the response, and
// calls invoke to send the call on, with a new ctx if it wants to. It may
// instead reject the call by returning an error without invoking:
// errors.Is-able brpc codes (errno.New(controller.ERPCAUTH, "...")) keep
// their code, others become EINTERNAL. What it returns is the call's
// result, for a brpc-style stub (cntl.Failed) as for a context-first
// client; it cannot turn a failed call into a success by returning nil.
//
// Interceptors run on the caller's goroutine for a synchronous call; an
// asynchronous call runs them on a goroutine of their own, then done.
type Interceptor func(ctx context.Context, md protoreflect.MethodDescriptor, cntl *controller.Controller,
	req, resp proto.Message, invoke Invoker) error

// interceptedCall is a call made through interceptors: what the
// Controller's Join and StartCancel see, while the interceptors run and
// send the call (perhaps more than once).
type interceptedCall struct {
	resultsIn sync.WaitGroup // the results are in the Controller
	finished  sync.WaitGroup // and done has returned

	mu       sync.Mutex
	canceled bool
	inner    *call // the call being sent, nil before and between sends
	sent     int
}

// Cancel implements ctrl.Call.
func (ic *interceptedCall) Cancel() {
	ic.mu.Lock()
	ic.canceled = true
	inner := ic.inner
	ic.mu.Unlock()
	if inner != nil {
		inner.Cancel()
	}
}

// Wait implements ctrl.Call.
func (ic *interceptedCall) Wait() { ic.finished.Wait() }

func startIntercepted(s sender, ics []Interceptor, md protoreflect.MethodDescriptor,
	cntl *controller.Controller, req, resp proto.Message, done func()) {
	st := ctrl.Of(cntl)
	ic := &interceptedCall{}
	ic.resultsIn.Add(1)
	ic.finished.Add(1)
	st.Mu.Lock()
	reused := st.InUse
	prev := st.Call
	st.InUse = true
	if !reused {
		st.Call = ic
	}
	st.Mu.Unlock()
	if reused {
		refuseReuse(st, prev, done)
		return
	}

	invoke := func(ctx context.Context, md protoreflect.MethodDescriptor, c *controller.Controller,
		req, resp proto.Message) error {
		if c != cntl { // an interceptor sends with a Controller of its own
			c.SetContext(ctx)
			startCall(s, md, c, req, resp, nil)
			return c.Err()
		}
		cntl.SetContext(ctx)
		ic.send(s, md, cntl, req, resp)
		return cntl.Err()
	}
	for i := len(ics) - 1; i >= 0; i-- {
		interceptor, next := ics[i], invoke
		invoke = func(ctx context.Context, md protoreflect.MethodDescriptor, c *controller.Controller,
			req, resp proto.Message) error {
			return interceptor(ctx, md, c, req, resp, next)
		}
	}
	run := func() {
		err := invoke(cntl.Context(), md, cntl, req, resp)
		setOutcome(st, err)
		ic.resultsIn.Done()
		if done != nil {
			done()
		}
		ic.finished.Done()
	}
	if done == nil {
		run()
		return
	}
	go run()
}

// send makes one call of the chain's end with the caller's Controller.
func (ic *interceptedCall) send(s sender, md protoreflect.MethodDescriptor, cntl *controller.Controller,
	req, resp proto.Message) {
	c := newCall(s, md, cntl, req, resp, nil)
	st := c.st
	c.mu.Lock()
	ic.mu.Lock()
	if ic.sent > 0 { // sent again (an interceptor retries): start from no result
		cntl.ResponseAttachment().Reset()
		st.ResponseUserFields = nil
	}
	ic.sent++
	ic.inner = c
	canceled := ic.canceled
	ic.mu.Unlock()
	st.Mu.Lock()
	canceled = canceled || st.CancelRequested
	st.Mu.Unlock()
	c.begin(canceled)
	ic.mu.Lock()
	ic.inner = nil
	ic.mu.Unlock()
}

// setOutcome makes what the interceptors returned the call's result: an
// error the Controller does not already hold replaces its result.
func setOutcome(st *ctrl.State, err error) {
	if err == nil {
		return
	}
	code := errno.CodeOf(err)
	if st.ErrorCode == int32(code) && code != 0 {
		return // the call's own failure, passed on
	}
	text := err.Error()
	if e, ok := err.(*errno.Error); !ok || e.Text == "" {
		text = errno.Text(code, text)
	}
	st.ErrorCode, st.ErrorText = int32(code), text
}
