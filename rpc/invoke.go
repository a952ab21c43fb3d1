package rpc

import (
	"bytes"
	"context"
	"maps"
	"net"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/internal/ctrl"
)

// CallOption sets what a Controller would set for one call of a
// context-first client, or reads a result back after it. The zero value
// does nothing.
type CallOption struct {
	before func(*controller.Controller)
	after  func(*controller.Controller)
}

// Invoke makes one synchronous call through c with a Controller of its
// own, and returns nil or the call's error (an *errno.Error: errors.Is
// matches its code, and context.DeadlineExceeded or context.Canceled for
// ERPCTIMEDOUT and ECANCELED). ctx's deadline caps the timeout and its
// cancellation ends the call. The generated context-first clients call it.
//
// The Controller is reused once Invoke returns, so a Caller (or a channel
// interceptor) must not keep it past the call; read results with Result.
func Invoke(ctx context.Context, c Caller, md protoreflect.MethodDescriptor, req, resp proto.Message, opts ...CallOption) error {
	cntl := controllers.Get().(*controller.Controller)
	cntl.SetContext(ctx)
	for _, o := range opts {
		if o.before != nil {
			o.before(cntl)
		}
	}
	c.CallMethod(md, cntl, req, resp, nil)
	for _, o := range opts {
		if o.after != nil {
			o.after(cntl)
		}
	}
	err := cntl.Err()
	// Nothing reads a Controller once its call has ended, so it can serve
	// the next Invoke: the context-first path costs no Controller.
	cntl.Reset()
	controllers.Put(cntl)
	return err
}

var controllers = sync.Pool{New: func() any { return controller.New() }}

// WithTimeout sets the call's timeout (Controller.SetTimeoutMs), rounded
// up to a millisecond; negative waits forever. A context deadline caps it
// either way.
func WithTimeout(d time.Duration) CallOption {
	ms := int64(-1)
	if d >= 0 {
		ms = int64((d + time.Millisecond - 1) / time.Millisecond)
	}
	return WithController(func(c *controller.Controller) { c.SetTimeoutMs(ms) })
}

// WithMaxRetry sets how many times a failed attempt may be retried.
func WithMaxRetry(n int) CallOption {
	return WithController(func(c *controller.Controller) { c.SetMaxRetry(n) })
}

// WithBackupRequestMs sends a backup request after ms milliseconds
// without an answer; negative sends none. It beats the channel's backup
// settings.
func WithBackupRequestMs(ms int64) CallOption {
	return WithController(func(c *controller.Controller) { c.SetBackupRequestMs(ms) })
}

// WithBackupRequestPolicy decides this call's backups with p.
func WithBackupRequestPolicy(p controller.BackupPolicy) CallOption {
	return WithController(func(c *controller.Controller) { c.SetBackupRequestPolicy(p) })
}

// WithLogID sets the log id carried in the request meta.
func WithLogID(id int64) CallOption {
	return WithController(func(c *controller.Controller) { c.SetLogID(id) })
}

// WithRequestCode sets the key consistent-hashing load balancers hash.
func WithRequestCode(code uint64) CallOption {
	return WithController(func(c *controller.Controller) { c.SetRequestCode(code) })
}

// WithRequestCompressType compresses the request message with t.
func WithRequestCompressType(t controller.CompressType) CallOption {
	return WithController(func(c *controller.Controller) { c.SetRequestCompressType(t) })
}

// WithRequestAttachment sends b after the request message, as raw bytes.
// b is copied when the call starts.
func WithRequestAttachment(b []byte) CallOption {
	return WithController(func(c *controller.Controller) { c.RequestAttachment().Write(b) })
}

// WithRequestUserField adds a user field (brpc's user_fields: a string
// pair in the request meta, read by the server like an HTTP header).
func WithRequestUserField(key, value string) CallOption {
	return WithController(func(c *controller.Controller) { c.RequestUserFields()[key] = value })
}

// WithController runs set on the call's Controller before the call: for
// any setting without an option of its own.
func WithController(set func(*controller.Controller)) CallOption {
	return CallOption{before: set}
}

// CallResult is what a Controller holds after a call, for a
// context-first client to read (see Result).
type CallResult struct {
	ResponseAttachment []byte            // raw bytes the server sent after the response
	ResponseUserFields map[string]string // user_fields of the response
	RemoteSide         net.Addr          // the server that answered
	LocalSide          net.Addr
	LatencyUs          int64
	RetriedCount       int  // retries, a backup included
	HasBackupRequest   bool // a backup request was sent
	BackupWon          bool // and its answer ended the call
}

// Result fills r with the call's results when it ends, failed or not.
func Result(r *CallResult) CallOption {
	return CallOption{after: func(c *controller.Controller) {
		*r = CallResult{
			RemoteSide: c.RemoteSide(), LocalSide: c.LocalSide(), LatencyUs: c.LatencyUs(),
			RetriedCount: c.RetriedCount(), HasBackupRequest: c.HasBackupRequest(), BackupWon: c.BackupWon(),
		}
		if att := c.ResponseAttachment(); att.Len() > 0 {
			r.ResponseAttachment = bytes.Clone(att.Bytes())
		}
		if f := ctrl.Of(c).ResponseUserFields; len(f) > 0 { // (the accessor would make a map)
			r.ResponseUserFields = maps.Clone(f)
		}
	}}
}
