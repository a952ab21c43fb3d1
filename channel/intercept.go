package channel

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

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
// send the call (perhaps more than once, one send at a time).
type interceptedCall struct {
	resultsIn sync.WaitGroup // the results are in the Controller
	finished  sync.WaitGroup // and done has returned
	start     time.Time      // the call's timeout counts from here, whatever the interceptors do

	mu       sync.Mutex
	canceled bool
	over     bool                     // the chain returned: the Controller is the caller's again
	inner    *call                    // the call being sent with the caller's Controller
	own      []*controller.Controller // calls sent with interceptors' own Controllers, in flight
	sent     int
}

// Cancel implements ctrl.Call: it reaches every call the chain has in
// flight.
func (ic *interceptedCall) Cancel() {
	ic.mu.Lock()
	ic.canceled = true
	inner := ic.inner
	own := append([]*controller.Controller(nil), ic.own...)
	ic.mu.Unlock()
	if inner != nil {
		inner.Cancel()
	}
	for _, c := range own {
		c.StartCancel()
	}
}

// Wait implements ctrl.Call.
func (ic *interceptedCall) Wait() { ic.finished.Wait() }

var (
	errInvokeBusy = errno.New(controller.EINVAL,
		"an interceptor invoked again while its call with this Controller was in flight")
	errInvokeLate = errno.New(controller.EINVAL,
		"an interceptor invoked after its chain returned: the Controller is its caller's again")
)

func startIntercepted(s sender, ics []Interceptor, md protoreflect.MethodDescriptor,
	cntl *controller.Controller, req, resp proto.Message, done func()) {
	st := ctrl.Of(cntl)
	ic := &interceptedCall{start: time.Now()}
	ic.resultsIn.Add(1)
	ic.finished.Add(1)
	prev, reused, _ := claimController(st, ic) // a StartCancel before is seen by send
	if reused {
		refuseReuse(st, prev, done)
		return
	}

	invoke := func(ctx context.Context, md protoreflect.MethodDescriptor, c *controller.Controller,
		req, resp proto.Message) error {
		if c != cntl { // an interceptor sends with a Controller of its own
			c.SetContext(ctx)
			return ic.sendOwn(s, md, c, req, resp)
		}
		return ic.send(s, ctx, md, cntl, req, resp)
	}
	for i := len(ics) - 1; i >= 0; i-- {
		interceptor, next := ics[i], invoke
		invoke = func(ctx context.Context, md protoreflect.MethodDescriptor, c *controller.Controller,
			req, resp proto.Message) error {
			return interceptor(ctx, md, c, req, resp, next)
		}
	}
	run := func() {
		// The call ends even when an interceptor panics: Join and a reuse
		// of the Controller must not wait forever. A synchronous caller
		// gets the panic; an asynchronous call, whose chain runs on a
		// goroutine of ours, fails with EINTERNAL, as a handler's panic.
		ended := false
		defer func() {
			if ended {
				return
			}
			p := recover()
			ic.end()
			setOutcome(st, errno.New(controller.EINTERNAL, fmt.Sprintf("interceptor panicked: %v", p)))
			ic.resultsIn.Done()
			if done == nil {
				ic.finished.Done()
				panic(p)
			}
			slog.Error("gobrpc: client interceptor panicked", "method", md.FullName(), "panic", p,
				"stack", string(debug.Stack()))
			done()
			ic.finished.Done()
		}()
		err := invoke(cntl.Context(), md, cntl, req, resp)
		ended = true
		ic.end()
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

// end marks the chain over: a late invoke is refused.
func (ic *interceptedCall) end() {
	ic.mu.Lock()
	ic.over = true
	ic.mu.Unlock()
}

// send makes one call of the chain's end with the caller's Controller, one
// at a time and only while the chain runs. Its timeout counts from the
// start of the chain, so an interceptor that retries or waits cannot
// stretch the caller's deadline.
func (ic *interceptedCall) send(s sender, ctx context.Context, md protoreflect.MethodDescriptor,
	cntl *controller.Controller, req, resp proto.Message) error {
	c := newCall(s, md, cntl, req, resp, nil)
	c.start = ic.start
	st := c.st
	c.mu.Lock()
	ic.mu.Lock()
	switch {
	case ic.over:
		ic.mu.Unlock()
		c.mu.Unlock()
		return errInvokeLate
	case ic.inner != nil:
		ic.mu.Unlock()
		c.mu.Unlock()
		return errInvokeBusy
	}
	cntl.SetContext(ctx)
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
	return cntl.Err()
}

// sendOwn makes a call an interceptor sends with a Controller of its own;
// the caller's StartCancel reaches it too.
func (ic *interceptedCall) sendOwn(s sender, md protoreflect.MethodDescriptor, c *controller.Controller,
	req, resp proto.Message) error {
	ic.mu.Lock()
	canceled := ic.canceled
	ic.own = append(ic.own, c)
	ic.mu.Unlock()
	if canceled {
		c.StartCancel() // before the call: it fails at once
	}
	startCall(s, md, c, req, resp, nil)
	ic.mu.Lock()
	for i, o := range ic.own {
		if o == c {
			ic.own = append(ic.own[:i], ic.own[i+1:]...)
			break
		}
	}
	ic.mu.Unlock()
	return c.Err()
}

// setOutcome makes what the interceptors returned the call's result: an
// error the Controller does not already hold replaces its result. An
// error is always a failure: one without a code is EINTERNAL.
func setOutcome(st *ctrl.State, err error) {
	if err == nil {
		return
	}
	code := errno.CodeOf(err)
	if code == 0 {
		code = controller.EINTERNAL
	}
	if st.ErrorCode == int32(code) {
		return // the call's own failure, passed on
	}
	text := errno.Text(code, err.Error())
	if e, ok := err.(*errno.Error); ok && e.Code == code {
		text = e.Error() // already "[E<code>]..."
	}
	st.ErrorCode, st.ErrorText = int32(code), text
}
