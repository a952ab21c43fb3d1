// Package h2client holds a channel's HTTP/2 connections to one server (for
// gRPC, brpc's "h2:grpc"): the connections are net/http's
// (Transport.NewClientConn, HTTP/2 with prior knowledge over TCP), this
// package decides how many there are and who uses them, as
// internal/transport does for baidu_std: "single" multiplexes every call
// on one connection, "pooled" gives each call in flight a connection of
// its own and keeps them for the next calls, "short" opens one per call.
// A server whose connection failed is out of selection until a connect
// to it succeeds (transport.ProbeUntilUp).
package h2client

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gobrpc/gobrpc/internal/transport"
)

// ErrClosed is returned by Acquire after Close.
var ErrClosed = errors.New("endpoint is closed")

// maxIdle bounds the idle connections of a pooled endpoint (brpc's
// max_connection_pool_size).
const maxIdle = 100

// h2Transport makes the connections: HTTP/2 only, without TLS, and
// nothing else of a Transport's (its pool, proxies, redirects) is used.
var h2Transport = func() *http.Transport {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Transport{
		Protocols: &p,
		// The connect timeout is the context's (Acquire's); keep-alive
		// probes as net's defaults.
		DialContext: (&net.Dialer{}).DialContext,
		// Large messages: a 1 MiB window per stream and 4 MiB (just
		// under, the largest valid) per connection rather than 64 KiB,
		// so a big response is not held by window updates.
		HTTP2: &http.HTTP2Config{
			MaxReceiveBufferPerStream:     1 << 20,
			MaxReceiveBufferPerConnection: 4<<20 - 1,
			MaxReadFrameSize:              1 << 20,
		},
		DisableCompression: true, // gRPC compresses messages itself
	}
}()

// Endpoint holds the HTTP/2 connections of one channel to one server.
type Endpoint struct {
	addr     string
	remote   net.Addr // addr, resolved
	connType transport.ConnType

	mu      sync.Mutex
	closed  bool
	single  atomic.Pointer[http.ClientConn]
	dialing chan struct{} // closed when the single connection's dial in flight ends
	dialErr error         // that dial's error
	idle    []*http.ClientConn
	nidle   atomic.Int32
	live    map[*http.ClientConn]struct{}

	health transport.Health

	closing   context.Context // ends dials in flight at Close
	stopDials context.CancelFunc
}

// New prepares connections to addr; nothing is dialed until Acquire.
func New(addr string, connType transport.ConnType) *Endpoint {
	if connType == 0 {
		connType = transport.Single
	}
	closing, stop := context.WithCancel(context.Background())
	var remote net.Addr
	if a, err := net.ResolveTCPAddr("tcp", addr); err == nil {
		remote = a
	}
	return &Endpoint{addr: addr, remote: remote, connType: connType, live: map[*http.ClientConn]struct{}{},
		closing: closing, stopDials: stop}
}

// Addr is the server's address.
func (e *Endpoint) Addr() string { return e.addr }

// RemoteAddr is Addr resolved (nil if it is not ip:port).
func (e *Endpoint) RemoteAddr() net.Addr { return e.remote }

// usable tells whether a connection can take one more request now.
func usable(cc *http.ClientConn) bool { return cc.Err() == nil && cc.Available() > 0 }

// Ready reports whether TryAcquire would find a connection (a hint).
func (e *Endpoint) Ready() bool {
	if e.connType == transport.Single {
		cc := e.single.Load()
		return cc != nil && cc.Err() == nil
	}
	return e.connType == transport.Pooled && e.nidle.Load() > 0
}

// TryAcquire returns a connection without dialing, if one is open (and,
// pooled, idle) now.
func (e *Endpoint) TryAcquire() (*http.ClientConn, bool) {
	switch e.connType {
	case transport.Single:
		if cc := e.single.Load(); cc != nil && cc.Err() == nil {
			return cc, true
		}
	case transport.Pooled:
		e.mu.Lock()
		defer e.mu.Unlock()
		for len(e.idle) > 0 {
			cc := e.idle[len(e.idle)-1]
			e.idle = e.idle[:len(e.idle)-1]
			e.nidle.Store(int32(len(e.idle)))
			if usable(cc) {
				return cc, true
			}
			delete(e.live, cc)
			go cc.Close()
		}
	}
	return nil, false
}

// Acquire returns a connection for one request, dialing within
// connectTimeout (<= 0: no limit) when none is open. Pooled and short
// connections are the caller's until Release.
func (e *Endpoint) Acquire(connectTimeout time.Duration) (*http.ClientConn, error) {
	if cc, ok := e.TryAcquire(); ok {
		return cc, nil
	}
	if e.connType != transport.Single {
		return e.dial(connectTimeout)
	}
	deadline := time.Time{}
	if connectTimeout > 0 {
		deadline = time.Now().Add(connectTimeout)
	}
	for {
		e.mu.Lock()
		if e.closed {
			e.mu.Unlock()
			return nil, ErrClosed
		}
		if cc := e.single.Load(); cc != nil && cc.Err() == nil {
			e.mu.Unlock()
			return cc, nil
		}
		if e.dialing == nil {
			// This caller dials; the others wait for it.
			done := make(chan struct{})
			e.dialing = done
			e.mu.Unlock()
			cc, err := e.dial(connectTimeout)
			e.mu.Lock()
			e.dialing, e.dialErr = nil, err
			if err == nil {
				if old := e.single.Swap(cc); old != nil {
					delete(e.live, old)
					go old.Close()
				}
			}
			e.mu.Unlock()
			close(done)
			return cc, err
		}
		wait := e.dialing
		e.mu.Unlock()
		var timer <-chan time.Time
		if !deadline.IsZero() {
			t := time.NewTimer(time.Until(deadline))
			defer t.Stop()
			timer = t.C
		}
		select {
		case <-wait:
			e.mu.Lock()
			err := e.dialErr
			e.mu.Unlock()
			if cc := e.single.Load(); cc != nil && cc.Err() == nil {
				return cc, nil
			}
			if err != nil {
				return nil, err
			}
		case <-timer:
			return nil, context.DeadlineExceeded
		}
	}
}

// dial opens a connection and tracks it.
func (e *Endpoint) dial(timeout time.Duration) (*http.ClientConn, error) {
	ctx := e.closing
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	cc, err := h2Transport.NewClientConn(ctx, "http", e.addr)
	if err != nil {
		if e.closing.Err() != nil {
			return nil, ErrClosed
		}
		return nil, err
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		cc.Close()
		return nil, ErrClosed
	}
	e.live[cc] = struct{}{}
	e.mu.Unlock()
	return cc, nil
}

// Release gives back a connection from Acquire. An HTTP/2 stream that was
// abandoned is reset on its own, so a pooled connection stays usable
// either way; a short one is closed.
func (e *Endpoint) Release(cc *http.ClientConn) {
	switch e.connType {
	case transport.Single:
		return
	case transport.Pooled:
		if cc.Err() == nil {
			e.mu.Lock()
			if !e.closed && len(e.idle) < maxIdle {
				e.idle = append(e.idle, cc)
				e.nidle.Store(int32(len(e.idle)))
				e.mu.Unlock()
				return
			}
			e.mu.Unlock()
		}
	}
	e.mu.Lock()
	delete(e.live, cc)
	e.mu.Unlock()
	cc.Close()
}

// Available reports whether the server may be selected.
func (e *Endpoint) Available() bool { return e.health.Available() }

// MarkFailed takes the server out of selection until a TCP connect to it
// succeeds (probed every health_check_interval).
func (e *Endpoint) MarkFailed(reason string) {
	e.health.MarkFailed(e.addr, reason, func(timeout time.Duration) bool {
		c, err := net.DialTimeout("tcp", e.addr, timeout)
		if err != nil {
			return false
		}
		c.Close()
		return true
	})
}

// Close closes every connection (requests on them fail) and stops the
// health check.
func (e *Endpoint) Close() {
	e.mu.Lock()
	e.closed = true
	live := e.live
	e.live = map[*http.ClientConn]struct{}{}
	e.single.Store(nil)
	e.idle = nil
	e.nidle.Store(0)
	e.mu.Unlock()
	e.stopDials()
	for cc := range live {
		cc.Close()
	}
	e.health.Close()
}
