package transport

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"time"

	"github.com/gobrpc/gobrpc/protocol/baidustd"
)

// ServerConn is one accepted baidu_std connection. Its reader hands each
// request frame to the server; answers go out through Reply, which never
// waits for the client.
type ServerConn struct {
	conn     *Conn
	internal bool
	created  time.Time
	ctx      context.Context // cancelled when the connection closes
	cancel   context.CancelFunc
	// inflight counts the requests read and not yet answered: with more
	// than one, other answers are likely to be written soon (Writer).
	inflight        atomic.Int32
	overcrowdLogged atomic.Bool // a dropped answer was logged (once per connection)
	closed          atomic.Bool

	// Session is what the server keeps about the connection (its
	// authentication). Only the connection's reader, which runs
	// OnRequest, reads or writes it.
	Session any
}

// ServeOptions configure an accepted connection.
type ServeOptions struct {
	MaxBodySize int  // a larger frame closes the connection
	Internal    bool // accepted on the internal port
	// OnRequest receives each frame (see FrameHandler); an error closes
	// the connection, a Task is run by the reader in place (see
	// ServerConn.RunsInPlace).
	OnRequest func(sc *ServerConn, m *baidustd.Meta, msg, att []byte, err error) (Task, error)
	// OnClose runs once when the connection closes.
	OnClose func(sc *ServerConn)
}

// Serve takes an accepted connection over (its first bytes only peeked so
// far) and starts reading requests from it.
func Serve(tc *net.TCPConn, opts ServeOptions) (*ServerConn, error) {
	ctx, cancel := context.WithCancel(context.Background())
	sc := &ServerConn{internal: opts.Internal, created: time.Now(), ctx: ctx, cancel: cancel}
	conn, err := adopt(tc, opts.MaxBodySize,
		func(m *baidustd.Meta, msg, att []byte, err error) (Task, error) {
			return opts.OnRequest(sc, m, msg, att, err)
		},
		func(error) {
			sc.closed.Store(true)
			cancel()
			if opts.OnClose != nil {
				opts.OnClose(sc)
			}
		})
	if err != nil {
		cancel()
		return nil, err
	}
	sc.conn = conn
	conn.start()
	return sc, nil
}

// Reply writes an answer without waiting for the client. An answer the
// client does not read fast enough (socket_max_unwritten_bytes) is dropped,
// as brpc drops it: that call times out and the connection keeps serving.
// ErrOvercrowded is returned then; any other error means the connection is
// closing.
func (sc *ServerConn) Reply(head, body []byte) error {
	err := sc.conn.Write(head, body, sc.inflight.Load() > 1)
	if errors.Is(err, ErrOvercrowded) && !sc.overcrowdLogged.Swap(true) {
		logWriteFailed.Warn("gobrpc: dropped a response: the client does not read fast enough (socket_max_unwritten_bytes)",
			"remote", sc.conn.remote.String())
	}
	return err
}

// RunsInPlace reports, from OnRequest, whether the request being read
// should be returned as a Task, run by the reader itself: nothing else of
// the connection waits (no other request is being handled, none is
// buffered behind it). brpc runs the last request of a read in place the
// same way; a request that takes long is not a problem (see runInline).
func (sc *ServerConn) RunsInPlace() bool {
	return sc.inflight.Load() == 0 && !sc.conn.frameBuffered()
}

// RequestStarted counts a request handed to a handler; RequestDone ends it.
func (sc *ServerConn) RequestStarted() { sc.inflight.Add(1) }

// RequestDone ends a request counted by RequestStarted, after its Reply.
func (sc *ServerConn) RequestDone() { sc.inflight.Add(-1) }

// Context is cancelled when the connection closes.
func (sc *ServerConn) Context() context.Context { return sc.ctx }

// Internal reports whether the connection came in on the internal port.
func (sc *ServerConn) Internal() bool { return sc.internal }

// Created is when the connection was accepted.
func (sc *ServerConn) Created() time.Time { return sc.created }

// RemoteAddr is the client's address.
func (sc *ServerConn) RemoteAddr() net.Addr { return sc.conn.remote }

// LocalAddr is the server's address on this connection.
func (sc *ServerConn) LocalAddr() net.Addr { return sc.conn.local }

// IdleSince is when bytes last moved on the connection, either way.
func (sc *ServerConn) IdleSince() time.Time { return sc.conn.IdleSince() }

// InFlight counts the requests not answered yet.
func (sc *ServerConn) InFlight() int32 { return sc.inflight.Load() }

// Unwritten is how many bytes of answers wait to be written.
func (sc *ServerConn) Unwritten() int { return sc.conn.Unwritten() }

// Written counts the bytes written so far.
func (sc *ServerConn) Written() int64 { return sc.conn.Written() }

// Closed reports whether the connection has closed (OnClose ran or runs).
func (sc *ServerConn) Closed() bool { return sc.closed.Load() }

// Close closes the connection; answers still queued are dropped.
func (sc *ServerConn) Close() { sc.conn.Close() }
