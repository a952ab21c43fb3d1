package server

import (
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gobrpc/gobrpc/internal/ratelog"
)

// One port serves every protocol, as brpc's does: the first bytes of a
// new connection pick it. "PRPC" is baidu_std, handed to transport; an HTTP
// method is HTTP/1.1 and "PRI " HTTP/2 (gRPC), both handed to net/http;
// anything else is closed. The
// bytes are only peeked (MSG_PEEK), so whichever side takes the
// connection reads it from its first byte.

// sniffTimeout bounds how long a new connection may stay silent.
var sniffTimeout = newSetting(30 * time.Second)

// setting is a duration tests may shorten while servers run.
type setting struct{ ns atomic.Int64 }

func newSetting(d time.Duration) *setting {
	s := &setting{}
	s.ns.Store(int64(d))
	return s
}

func (s *setting) get() time.Duration  { return time.Duration(s.ns.Load()) }
func (s *setting) set(d time.Duration) { s.ns.Store(int64(d)) }

// Lines about what clients send are rate-limited: a flood of bad
// connections must not flood the log.
var logBadClient = ratelog.New(time.Second)

type protocolKind int

const (
	protoUnknown protocolKind = iota
	protoBaiduStd
	protoHTTP
	protoHTTP2
)

var httpMethods = []string{"GET ", "POST", "PUT ", "HEAD", "DELE", "OPTI", "PATC", "CONN", "TRAC"}

// http2Preface opens an HTTP/2 connection with prior knowledge (h2c, as
// gRPC clients speak it without TLS).
const http2Preface = "PRI "

// classify decides the protocol from the first bytes; ok is false while
// more bytes are needed to tell.
func classify(head []byte) (kind protocolKind, ok bool) {
	candidates := append([]string{"PRPC", http2Preface}, httpMethods...)
	possible := 0
	for _, c := range candidates {
		n := min(len(head), len(c))
		if string(head[:n]) != c[:n] {
			continue
		}
		if n == len(c) {
			switch c {
			case "PRPC":
				return protoBaiduStd, true
			case http2Preface:
				return protoHTTP2, true
			}
			return protoHTTP, true
		}
		possible++
	}
	if possible == 0 {
		return protoUnknown, true
	}
	return protoUnknown, false
}

// peek waits (until the connection's read deadline) for its first bytes
// without consuming them, and classifies them.
func peek(c *net.TCPConn) (protocolKind, []byte, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return protoUnknown, nil, err
	}
	defer c.SetReadDeadline(time.Time{})
	buf := make([]byte, 4)
	var (
		n       int
		seen    = -1 // bytes seen at the previous wake-up
		kind    protocolKind
		decided bool
		rerr    error
	)
	err = raw.Read(func(fd uintptr) bool {
		got, _, e := syscall.Recvfrom(int(fd), buf, syscall.MSG_PEEK)
		// recvfrom returns -1 with an error: n must stay what was seen
		// before (a reset, the sniff deadline or Stop end the peek with
		// n bytes known, never with a negative count).
		rerr = e
		if e == nil {
			n = got
		}
		switch {
		case rerr == syscall.EAGAIN || rerr == syscall.EINTR:
			rerr = nil
			return false // wait for data
		case rerr != nil:
			return true
		case n == 0:
			rerr = errors.New("closed before sending anything")
			return true
		case n == seen:
			// Woken with no new byte: either the readiness was left over
			// from the bytes already seen, or the peer closed (a FIN does
			// not show in a peek while data is still buffered).
			if peerClosed(fd) {
				rerr = errors.New("closed before its protocol was known")
				return true
			}
			return false
		}
		seen = n
		if kind, decided = classify(buf[:n]); decided {
			return true
		}
		// Not decided yet: wait for more bytes (the poller wakes us on
		// new data, not on data already there), unless the peer has
		// closed already: its FIN may have come with the bytes, before
		// this wait began, and would wake nobody.
		if peerClosed(fd) {
			rerr = errors.New("closed before its protocol was known")
			return true
		}
		return false
	})
	if err == nil {
		err = rerr
	}
	return kind, buf[:max(n, 0)], err
}

// sniffDeadline is how long a new connection may stay silent: the sniff
// timeout, or IdleTimeoutSec when that is shorter.
func (s *Server) sniffDeadline() time.Duration {
	d := sniffTimeout.get()
	if idle := time.Duration(s.opts.IdleTimeoutSec) * time.Second; idle > 0 && idle < d {
		d = idle
	}
	return d
}

// abortHandshakes ends the peeks of connections not classified yet (Stop
// does not wait sniffTimeout for silent clients).
func (s *Server) abortHandshakes() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.sniffing {
		c.SetReadDeadline(time.Now())
	}
}

// listener accepts connections for one port.
type listener struct {
	ln       net.Listener
	internal bool // the internal port: builtin pages allowed
}

func (s *Server) acceptLoop(l *listener) {
	defer s.loops.Done()
	var backoff time.Duration
	for {
		c, err := l.ln.Accept()
		if err != nil {
			if s.state.Load() != stateRunning || errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors and the like: wait and retry, as
			// net/http does.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			slog.Warn("gobrpc: accept failed", "addr", l.ln.Addr(), "err", err, "retry_in", backoff)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		tc := c.(*net.TCPConn)
		s.mu.Lock()
		if s.state.Load() != stateRunning {
			s.mu.Unlock()
			tc.Close()
			return
		}
		s.sniffing[tc] = struct{}{}
		s.handshakes.Add(1)
		s.mu.Unlock()
		go s.handshake(tc, l)
	}
}

// handshake classifies a new connection and hands it over.
func (s *Server) handshake(c *net.TCPConn, l *listener) {
	defer s.handshakes.Done()
	// The deadline is set under the lock Stop takes to abort handshakes,
	// so a Stop cannot slip in before it.
	s.mu.Lock()
	stopping := s.state.Load() != stateRunning
	c.SetReadDeadline(time.Now().Add(s.sniffDeadline()))
	s.mu.Unlock()
	if stopping {
		c.SetReadDeadline(time.Now())
	}
	kind, head, err := peek(c)
	s.mu.Lock()
	delete(s.sniffing, c)
	s.mu.Unlock()
	switch {
	case err != nil:
		if !errors.Is(err, net.ErrClosed) {
			slog.Debug("gobrpc: connection left before its protocol was known", "remote", c.RemoteAddr(), "err", err)
		}
		c.Close()
	case kind == protoBaiduStd:
		if err := s.serveBaiduStd(c, l); err != nil {
			logBadClient.Warn("gobrpc: cannot serve baidu_std connection", "remote", c.RemoteAddr(), "err", err)
		}
	case kind == protoHTTP, kind == protoHTTP2:
		s.serveHTTPConn(c, l, kind == protoHTTP2)
	default:
		logBadClient.Warn("gobrpc: closing connection of unknown protocol", "remote", c.RemoteAddr(), "first_bytes", head)
		c.Close()
	}
}

// chanListener feeds accepted HTTP connections to an http.Server.
type chanListener struct {
	addr   net.Addr
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newChanListener(addr net.Addr) *chanListener {
	return &chanListener{addr: addr, conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return l.addr }

// offer hands c to the http.Server; false when it is shut down.
func (l *chanListener) offer(c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.closed:
		return false
	}
}
