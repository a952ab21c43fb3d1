package transport

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gobrpc/gobrpc/auth"
	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/protocol/baidustd"
)

// ResponseHandler is an attempt waiting on a connection for its response.
// Both methods are called at most once in total, from the connection's
// reader or closer goroutine; they must not block (hand slow work to
// another goroutine) and must copy what they keep from msg and att, which
// are only valid during the call.
type ResponseHandler interface {
	HandleResponse(conn *ClientConn, m *baidustd.Meta, msg, att []byte)
	HandleFailure(conn *ClientConn, code controller.Errno, text string)
}

// ClientConn is one client connection to a server. Writes never wait for
// the server; responses are matched to waiting attempts by correlation id.
//
// A synchronous caller usually reads its own response (see Register and
// ReadFor): at low load that saves the hand-off from a reader goroutine to
// the caller, a wake-up of another thread on every call (which on a
// 2-core machine costs about a third of a round trip). While attempts of
// other callers wait, a background reader goroutine reads instead; while
// nothing waits, nobody reads, and Healthy looks (without reading) at a
// connection nobody reads before it is used again.
type ClientConn struct {
	conn *Conn
	ep   *Endpoint

	mu      sync.Mutex
	pending map[int64]ResponseHandler
	broken  bool
	// Who reads the connection: nobody while nothing is pending, the
	// background reader, or a caller waiting for its own response
	// (ReadFor), whose attempt is readerFor until its answer is handed
	// over. A pooled connection released while its caller still reads is
	// given back when that caller stops (releaseLater).
	reader       readerKind
	readerFor    ResponseHandler
	releaseLater bool

	closed   atomic.Bool
	inflight atomic.Int32 // len(pending), read without mu as the Writer's batching hint

	// The credential goes out once, in the connection's first request;
	// credentialMu holds other writers back until it has been written. It
	// is generated with the connection, where the wait is bounded by the
	// connect timeout and never on a caller's goroutine.
	credential     []byte
	credentialMu   sync.Mutex
	credentialSent atomic.Bool
}

// NeedsCredential reports whether the next request may have to carry the
// endpoint's credential (see WriteFirst).
func (c *ClientConn) NeedsCredential() bool {
	return c.ep.opts.Auth != nil && !c.credentialSent.Load()
}

// CredentialError is a failure of the Authenticator to generate a
// credential.
type CredentialError struct{ Err error }

func (e *CredentialError) Error() string { return "fail to generate credential: " + e.Err.Error() }
func (e *CredentialError) Unwrap() error { return e.Err }

// WriteFirst writes a request that may be the connection's first, as
// brpc's clients authenticate: the first writer puts the connection's
// credential in that request's meta; writers that come meanwhile wait
// until it is written (a write never waits for the peer) and get nil.
func (c *ClientConn) WriteFirst(write func(credential []byte) error) error {
	c.credentialMu.Lock()
	defer c.credentialMu.Unlock()
	if c.credentialSent.Load() {
		return write(nil)
	}
	if err := write(c.credential); err != nil {
		return err
	}
	c.credentialSent.Store(true)
	return nil
}

// generateCredential runs the endpoint's Authenticator for a new
// connection, within timeout (0: none): a slow one fails the connect, as a
// slow server would.
func generateCredential(a auth.Authenticator, timeout time.Duration) ([]byte, error) {
	type result struct {
		cred string
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		cred, err := a.GenerateCredential()
		ch <- result{cred, err}
	}()
	var expired <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, &CredentialError{Err: r.err}
		}
		return []byte(r.cred), nil
	case <-expired:
		return nil, &CredentialError{Err: ErrCredentialTimeout}
	}
}

// ErrCredentialTimeout is the CredentialError of an Authenticator slower
// than the connect timeout.
var ErrCredentialTimeout = errors.New("timed out generating the credential")

var errConnBroken = errors.New("connection is broken")

// dial connects with Go's dialer, which keeps the errno (ECONNREFUSED,
// ETIMEDOUT, EHOSTUNREACH ...) that brpc's retry policy and users' logs
// rely on.
func dial(ep *Endpoint, timeout time.Duration) (*ClientConn, error) {
	var credential []byte
	if a := ep.opts.Auth; a != nil {
		start := time.Now()
		var err error
		if credential, err = generateCredential(a, timeout); err != nil {
			return nil, err
		}
		if timeout > 0 {
			if timeout -= time.Since(start); timeout <= 0 {
				return nil, &CredentialError{Err: ErrCredentialTimeout}
			}
		}
	}
	d := net.Dialer{Timeout: timeout}
	gc, err := d.DialContext(ep.closing, "tcp", ep.addr)
	if err != nil {
		return nil, err
	}
	c := &ClientConn{ep: ep, pending: make(map[int64]ResponseHandler), credential: credential}
	remote := gc.RemoteAddr().String()
	// TCP_NODELAY is already on, as Go sets it.
	conn, err := adopt(gc.(*net.TCPConn), ep.opts.MaxBodySize, c.onFrame, func(cause error) {
		if cause != nil { // the server sent what cannot be a response
			c.failAll(controller.EFAILEDSOCKET, "Fail to read a response from "+remote+": "+cause.Error())
			return
		}
		c.failAll(controller.EEOF, "Got EOF of "+remote)
	})
	if err != nil {
		return nil, err
	}
	c.conn = conn // nothing reads it until a request waits (Register)
	return c, nil
}

type readerKind uint8

const (
	noReader readerKind = iota
	backgroundReader
	callerReader
)

// Waiter is an attempt whose caller reads its own response (ReadFor).
type Waiter interface {
	ResponseHandler
	// Ended reports whether the attempt's call is over without this
	// response (its deadline, a cancel, another attempt's answer).
	Ended() bool
}

// RemoteAddr is the server's address.
func (c *ClientConn) RemoteAddr() net.Addr { return c.conn.remote }

// LocalAddr is this end of the connection.
func (c *ClientConn) LocalAddr() net.Addr { return c.conn.local }

// usable reports whether the connection is neither closed nor broken,
// without looking at the socket (see Healthy).
func (c *ClientConn) usable() bool {
	if c.closed.Load() || !c.conn.Active() {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.broken
}

// Healthy reports whether the connection can carry requests.
func (c *ClientConn) Healthy() bool {
	if c.closed.Load() || !c.conn.Active() {
		return false
	}
	c.mu.Lock()
	if c.broken {
		c.mu.Unlock()
		return false
	}
	if c.reader != noReader {
		c.mu.Unlock()
		return true
	}
	// Nobody reads it (nothing is pending), so nobody has seen what the
	// server sent since the last response (a caller stops reading right
	// after its own): look, without reading, so that a server's close (an
	// idle timeout, a restart, a close right after answering) costs a
	// reconnect, not a failed call. One non-blocking recv per call that
	// finds nobody reading.
	alive := c.conn.peekAlive()
	c.mu.Unlock()
	if !alive {
		c.Close()
	}
	return alive
}

// Register makes h the receiver of the response with correlation id; it
// fails when the connection broke meanwhile. With callerReads (a
// synchronous caller on its own goroutine) the caller may be made the
// connection's reader: then reading is true and it must call ReadFor(h)
// once its request is written. Otherwise whoever reads hands h its
// response, starting the background reader if nobody did.
func (c *ClientConn) Register(id int64, h ResponseHandler, callerReads bool) (reading bool, err error) {
	c.mu.Lock()
	if c.broken {
		c.mu.Unlock()
		return false, errConnBroken
	}
	c.pending[id] = h
	c.inflight.Store(int32(len(c.pending)))
	start := false
	switch {
	case c.reader != noReader: // it hands h its response
	case callerReads:
		c.reader, c.readerFor, reading = callerReader, h, true
	default:
		c.reader, start = backgroundReader, true
	}
	c.mu.Unlock()
	if start {
		go c.readBackground()
	}
	return reading, nil
}

// Unregister forgets the attempt with correlation id; a late response for
// it is then dropped silently, as brpc does. A caller reading for that
// attempt, or the background reader left with nothing to wait for, is
// woken to stop.
func (c *ClientConn) Unregister(id int64) {
	c.mu.Lock()
	h := c.pending[id]
	delete(c.pending, id)
	c.inflight.Store(int32(len(c.pending)))
	wake := false
	if h != nil && h == c.readerFor {
		c.readerFor, wake = nil, true
	}
	if c.reader == backgroundReader && len(c.pending) == 0 {
		wake = true
	}
	c.mu.Unlock()
	if wake {
		c.conn.interrupt()
	}
}

// ReadFor reads the connection on the caller's goroutine, handing every
// response to its attempt, until w's response has been handed to it or w's
// call ended otherwise (Unregister wakes it), then passes the reading on.
// w is an attempt registered with Register(..., true) = true.
func (c *ClientConn) ReadFor(w Waiter) {
	c.conn.readFrames(func() bool { return c.callerStops(w) })
}

// callerStops reports whether the caller reading for w stops (and then
// passes the reading on): the background reader takes over while others
// wait.
func (c *ClientConn) callerStops(w Waiter) bool {
	c.mu.Lock()
	if c.readerFor == w && !w.Ended() {
		c.mu.Unlock()
		return false
	}
	c.readerFor = nil
	start := false
	c.reader = noReader
	if len(c.pending) > 0 && !c.broken {
		c.reader, start = backgroundReader, true
	}
	release := c.releaseLater
	c.releaseLater = false
	c.mu.Unlock()
	if start {
		go c.readBackground()
	}
	if release {
		c.ep.Release(c, true)
	}
	return true
}

// deferRelease is asked by a pooled Endpoint's Release: while the caller
// that received the response still reads the connection, the connection
// goes back to the pool when that caller stops (callerStops), so that the
// next user finds nobody reading and reads it itself.
func (c *ClientConn) deferRelease() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reader != callerReader {
		return false
	}
	c.releaseLater = true
	return true
}

// readBackground reads while attempts wait and no caller reads.
func (c *ClientConn) readBackground() { c.conn.readFrames(c.backgroundStops) }

func (c *ClientConn) backgroundStops() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.pending) > 0 && !c.broken {
		return false
	}
	c.reader = noReader
	return true
}

// Write sends one frame, head then body, without waiting for the server
// (see Writer.Write). On an error the frame was not sent; unless it is
// ErrOvercrowded the connection is closing.
func (c *ClientConn) Write(head, body []byte) error {
	return c.conn.Write(head, body, c.inflight.Load() > 1)
}

// WriteNow is Write for a writer that must not wait for other goroutines
// (the timer goroutine sending a backup): it never yields to let others
// batch with it. If another writer owns the socket, the frame is queued
// behind its batch, as with Write.
func (c *ClientConn) WriteNow(head, body []byte) error {
	return c.conn.Write(head, body, false)
}

// Close closes the connection; waiting attempts fail with EFAILEDSOCKET.
func (c *ClientConn) Close() {
	if c.closed.Swap(true) {
		return
	}
	c.failAll(controller.EFAILEDSOCKET, "Connection to "+c.conn.remote.String()+" was closed")
	c.conn.Close()
}

func (c *ClientConn) failAll(code controller.Errno, text string) {
	c.mu.Lock()
	if c.broken {
		c.mu.Unlock()
		return
	}
	c.broken = true
	pending := c.pending
	c.pending = nil
	c.mu.Unlock()
	for _, h := range pending {
		h.HandleFailure(c, code, text)
	}
}

// onFrame hands a response to the attempt waiting for it; it runs on the
// connection's reader.
func (c *ClientConn) onFrame(m *baidustd.Meta, msg, att []byte, err error) (Task, error) {
	if err != nil && !errors.Is(err, baidustd.ErrBadAttachmentSize) {
		// brpc drops a response whose meta it cannot parse; the attempt
		// it belonged to will time out or be retried.
		logBadPeer.Warn("gobrpc: dropped a malformed response", "remote", c.conn.remote.String(), "err", err)
		return nil, nil
	}
	c.mu.Lock()
	h := c.pending[m.CorrelationID]
	delete(c.pending, m.CorrelationID)
	c.inflight.Store(int32(len(c.pending)))
	if h != nil && h == c.readerFor {
		c.readerFor = nil // the caller reading stops after this frame
	}
	c.mu.Unlock()
	switch {
	case h == nil: // the call ended already, or an id never sent: drop it, as brpc does
	case err != nil:
		h.HandleFailure(c, controller.ERESPONSE, err.Error())
	default:
		h.HandleResponse(c, m, msg, att)
	}
	return nil, nil
}

// ErrnoOf maps a dial or write error to brpc's error code.
func ErrnoOf(err error) controller.Errno {
	switch {
	case errors.Is(err, ErrOvercrowded):
		return controller.EOVERCROWDED
	case errors.Is(err, context.DeadlineExceeded):
		return controller.ETIMEDOUT
	case errors.Is(err, io.EOF):
		return controller.EEOF
	case errors.Is(err, net.ErrClosed), errors.Is(err, ErrWriterClosed):
		return controller.EFAILEDSOCKET
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return controller.ETIMEDOUT
	}
	var errno syscall.Errno
	if errors.As(err, &errno) && errno > 0 {
		return controller.ErrnoOfSystem(errno)
	}
	return controller.EFAILEDSOCKET
}
