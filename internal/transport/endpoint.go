package transport

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gobrpc/gobrpc/auth"
)

// EndpointOptions configure the connections to one server.
type EndpointOptions struct {
	ConnType    ConnType
	MaxBodySize int // largest response body accepted
	// MaxIdle bounds the idle connections kept by a pooled endpoint
	// (brpc's max_connection_pool_size, default 100).
	MaxIdle int
	// Auth makes the first request of every connection carry a credential
	// (see ClientConn.WriteFirst); channels share connections only with
	// the same Authenticator, as brpc keys its sockets.
	Auth auth.Authenticator
}

// ErrEndpointClosed is returned by Acquire after Close.
var ErrEndpointClosed = errors.New("endpoint is closed")

// Endpoint holds the connections of one channel to one server.
type Endpoint struct {
	addr string
	opts EndpointOptions

	mu     sync.Mutex
	closed bool
	single *ClientConn
	// current is single, for the per-call path to read without mu (every
	// caller of a single connection checks it; a lock there is contended).
	current atomic.Pointer[ClientConn]
	nidle   atomic.Int32 // len(idle), for Ready without mu
	dialing *pendingDial // the dial in progress for the single connection
	idle    []*ClientConn
	live    map[*ClientConn]struct{} // every open connection, closed by Close

	health Health // out of selection until a probe revives it

	key  endpointKey // in the socket map
	refs int         // guarded by socketMap's lock

	// closing ends the dials in flight when the endpoint closes: a dial
	// to a server that never answers must not outlive the channel.
	closing   context.Context
	stopDials context.CancelFunc
}

// pendingDial lets concurrent callers of a single connection wait for one
// dial instead of each opening a connection.
type pendingDial struct {
	done    chan struct{}
	conn    *ClientConn
	err     error
	timeout time.Duration // the owner's connect timeout (0: none)
}

// NewEndpoint prepares connections to addr ("ip:port" or "host:port");
// nothing is dialed until the first Acquire.
func NewEndpoint(addr string, opts EndpointOptions) *Endpoint {
	if opts.ConnType == 0 {
		opts.ConnType = Single
	}
	if opts.MaxIdle <= 0 {
		opts.MaxIdle = 100
	}
	closing, stopDials := context.WithCancel(context.Background())
	return &Endpoint{addr: addr, opts: opts, live: make(map[*ClientConn]struct{}),
		closing: closing, stopDials: stopDials}
}

// Addr is the server address.
func (e *Endpoint) Addr() string { return e.addr }

// ConnType is the endpoint's connection type.
func (e *Endpoint) ConnType() ConnType { return e.opts.ConnType }

// Ready reports whether Acquire would return at once, without dialing: a
// single connection is open, or a pooled one is idle. It is a hint (it
// does not look at the socket, see ClientConn.Healthy): TryAcquire tells.
func (e *Endpoint) Ready() bool {
	switch e.opts.ConnType {
	case Pooled:
		return e.nidle.Load() > 0
	case Short:
		return false
	}
	c := e.current.Load()
	return c != nil && c.usable()
}

// currentSingle is the open single connection, or nil.
func (e *Endpoint) currentSingle() *ClientConn {
	if c := e.current.Load(); c != nil && c.Healthy() {
		return c
	}
	return nil
}

// setSingle replaces the single connection; e.mu is held.
func (e *Endpoint) setSingle(c *ClientConn) {
	if old := e.single; old != nil {
		delete(e.live, old)
		old.Close()
	}
	e.single = c
	e.current.Store(c)
}

// TryAcquire is Acquire without dialing: it returns a connection only if
// one is open (and, pooled, idle) now. Ready may have said so and the
// connection be found closed since: then ok is false and the caller dials
// (Acquire) where it may wait.
func (e *Endpoint) TryAcquire() (c *ClientConn, ok bool) {
	switch e.opts.ConnType {
	case Pooled:
		e.mu.Lock()
		defer e.mu.Unlock()
		for n := len(e.idle); n > 0 && !e.closed; n = len(e.idle) {
			c := e.idle[n-1]
			e.idle = e.idle[:n-1]
			e.nidle.Store(int32(len(e.idle)))
			if c.Healthy() {
				return c, true
			}
			delete(e.live, c)
			c.Close()
		}
		return nil, false
	case Short:
		return nil, false
	}
	c = e.currentSingle()
	return c, c != nil
}

// Acquire returns a connection ready for one request. connectTimeout <= 0
// means no limit. Pooled and short connections are exclusive to the
// caller until Release.
func (e *Endpoint) Acquire(connectTimeout time.Duration) (*ClientConn, error) {
	switch e.opts.ConnType {
	case Pooled:
		if c, ok := e.TryAcquire(); ok {
			return c, nil
		}
		e.mu.Lock()
		closed := e.closed
		e.mu.Unlock()
		if closed {
			return nil, ErrEndpointClosed
		}
		return e.dialTracked(connectTimeout)
	case Short:
		return e.dialTracked(connectTimeout)
	}
	return e.acquireSingle(connectTimeout)
}

func (e *Endpoint) acquireSingle(connectTimeout time.Duration) (*ClientConn, error) {
	start := time.Now()
	for {
		c, err, pd := e.acquireSingleOnce(connectTimeout)
		// A dial that timed out sooner than this caller would have waited
		// (its owner's deadline was nearer) says nothing of the server
		// yet: dial again with what is left of our own timeout.
		if pd == nil || !isTimeout(err) || !longer(connectTimeout-time.Since(start), pd.timeout) {
			return c, err
		}
		if connectTimeout > 0 {
			connectTimeout -= time.Since(start)
			start = time.Now()
		}
	}
}

// longer reports whether timeout a (0: none) is longer than b.
func longer(a, b time.Duration) bool { return b > 0 && (a <= 0 || a > b) }

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() && err != errDialWaitTimeout
}

// acquireSingleOnce returns the single connection, dialing it or waiting
// for the dial in flight; pd is that other caller's dial when it waited.
func (e *Endpoint) acquireSingleOnce(connectTimeout time.Duration) (*ClientConn, error, *pendingDial) {
	if c := e.currentSingle(); c != nil {
		return c, nil, nil // the common case, without the lock
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, ErrEndpointClosed, nil
	}
	if c := e.single; c != nil && c.Healthy() {
		e.mu.Unlock()
		return c, nil, nil
	}
	pd := e.dialing
	owner := pd == nil
	if owner {
		pd = &pendingDial{done: make(chan struct{}), timeout: max(connectTimeout, 0)}
		e.dialing = pd
	}
	e.mu.Unlock()

	if owner {
		pd.conn, pd.err = e.dialTracked(connectTimeout)
		e.mu.Lock()
		e.dialing = nil
		if pd.err == nil {
			e.setSingle(pd.conn)
		}
		e.mu.Unlock()
		close(pd.done)
		return pd.conn, pd.err, nil
	}
	// Another caller is dialing: wait for it, within our own timeout.
	var timeout <-chan time.Time
	if connectTimeout > 0 {
		t := time.NewTimer(connectTimeout)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-pd.done:
		return pd.conn, pd.err, pd
	case <-timeout:
		return nil, errDialWaitTimeout, nil
	}
}

var errDialWaitTimeout = timeoutError{}

type timeoutError struct{}

func (timeoutError) Error() string   { return "timed out waiting for the connection" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

func (e *Endpoint) dialTracked(timeout time.Duration) (*ClientConn, error) {
	if timeout < 0 {
		timeout = 0
	}
	c, err := dial(e, timeout)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		c.Close()
		return nil, ErrEndpointClosed
	}
	e.live[c] = struct{}{}
	e.mu.Unlock()
	return c, nil
}

// Release gives back a connection obtained from Acquire. reusable is false
// when the request on it did not complete normally (timed out, abandoned,
// failed): a pooled or short connection is then closed, because a late
// response could still arrive on it. Single connections are shared and
// stay open either way.
func (e *Endpoint) Release(c *ClientConn, reusable bool) {
	switch e.opts.ConnType {
	case Single:
		return
	case Pooled:
		if reusable && c.deferRelease() {
			return // given back when its caller stops reading
		}
		if reusable && c.usable() { // the next Acquire looks at the socket
			e.mu.Lock()
			if !e.closed && len(e.idle) < e.opts.MaxIdle {
				e.idle = append(e.idle, c)
				e.nidle.Store(int32(len(e.idle)))
				e.mu.Unlock()
				return
			}
			e.mu.Unlock()
		}
	}
	e.mu.Lock()
	delete(e.live, c)
	e.mu.Unlock()
	c.Close()
}

// Close closes every connection and stops health checking; attempts still
// waiting fail.
func (e *Endpoint) Close() {
	e.mu.Lock()
	e.closed = true
	live := e.live
	e.live = map[*ClientConn]struct{}{}
	e.single = nil
	e.current.Store(nil)
	e.idle = nil
	e.nidle.Store(0)
	e.mu.Unlock()
	e.stopDials()
	for c := range live {
		c.Close()
	}
	e.health.Close()
}
