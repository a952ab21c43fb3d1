package transport

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cloudwego/netpoll"

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

// ClientConn is one client connection to a server. Writes are serialised;
// responses are matched to waiting attempts by correlation id.
type ClientConn struct {
	conn        netpoll.Connection
	ep          *Endpoint
	remote      net.Addr
	local       net.Addr
	maxBodySize int

	writer *FrameWriter

	mu      sync.Mutex
	pending map[int64]ResponseHandler
	broken  bool

	closed   atomic.Bool
	inflight atomic.Int32 // len(pending), read without mu as FrameWriter's batching hint

	readMeta baidustd.Meta // reused by the reader; only it touches this
}

var errConnBroken = errors.New("connection is broken")

func dial(ep *Endpoint, timeout time.Duration) (*ClientConn, error) {
	nc, remote, local, err := dialNetpoll(ep.addr, timeout)
	if err != nil {
		return nil, err
	}
	c := &ClientConn{
		conn:        nc,
		ep:          ep,
		remote:      remote,
		local:       local,
		maxBodySize: ep.opts.MaxBodySize,
		pending:     make(map[int64]ResponseHandler),
	}
	c.writer = NewFrameWriter(nc, func(err error) {
		slog.Warn("gobrpc: closing client connection after a failed write", "remote", c.remote.String(), "err", err)
		c.Close()
	})
	if err := nc.SetOnRequest(c.onReadable); err != nil {
		nc.Close()
		return nil, err
	}
	nc.AddCloseCallback(func(netpoll.Connection) error {
		c.failAll(controller.EEOF, "Got EOF of "+c.remote.String())
		return nil
	})
	return c, nil
}

// dialNetpoll connects with Go's dialer and hands the socket to netpoll.
// netpoll's own dialer reports a refused connection as "closed by peer";
// Go's keeps the errno (ECONNREFUSED, ETIMEDOUT, EHOSTUNREACH ...), which
// brpc's retry policy and users' logs rely on.
func dialNetpoll(addr string, timeout time.Duration) (netpoll.Connection, net.Addr, net.Addr, error) {
	d := net.Dialer{Timeout: timeout}
	gc, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, nil, nil, err
	}
	tc := gc.(*net.TCPConn) // TCP_NODELAY is already on, as Go sets it
	remote, local := tc.RemoteAddr(), tc.LocalAddr()
	raw, err := tc.SyscallConn()
	if err != nil {
		tc.Close()
		return nil, nil, nil, err
	}
	fd, dupErr := -1, error(nil)
	err = raw.Control(func(s uintptr) {
		syscall.ForkLock.RLock()
		fd, dupErr = syscall.Dup(int(s))
		if dupErr == nil {
			syscall.CloseOnExec(fd)
		}
		syscall.ForkLock.RUnlock()
	})
	tc.Close() // the duplicate keeps the socket open
	if err == nil {
		err = dupErr
	}
	if err != nil {
		return nil, nil, nil, err
	}
	nc, err := netpoll.NewFDConnection(fd)
	if err != nil {
		syscall.Close(fd)
		return nil, nil, nil, err
	}
	return nc, remote, local, nil
}

// RemoteAddr is the server's address.
func (c *ClientConn) RemoteAddr() net.Addr { return c.remote }

// LocalAddr is this end of the connection.
func (c *ClientConn) LocalAddr() net.Addr { return c.local }

// Healthy reports whether the connection can carry requests.
func (c *ClientConn) Healthy() bool {
	if c.closed.Load() || !c.conn.IsActive() {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.broken
}

// Register makes h the receiver of the response with correlation id.
// It fails when the connection broke meanwhile.
func (c *ClientConn) Register(id int64, h ResponseHandler) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.broken {
		return errConnBroken
	}
	c.pending[id] = h
	c.inflight.Store(int32(len(c.pending)))
	return nil
}

// Unregister forgets the attempt with correlation id; a late response for
// it is then dropped silently, as brpc does.
func (c *ClientConn) Unregister(id int64) {
	c.mu.Lock()
	delete(c.pending, id)
	c.inflight.Store(int32(len(c.pending)))
	c.mu.Unlock()
}

// Write sends one complete frame, batched with other writers' (see
// FrameWriter). On an error the frame was not sent and the caller must
// close the connection.
func (c *ClientConn) Write(frame []byte) error {
	return c.writer.Write(frame, c.inflight.Load() > 1)
}

// Close closes the connection; waiting attempts fail with EFAILEDSOCKET.
func (c *ClientConn) Close() {
	if c.closed.Swap(true) {
		return
	}
	c.failAll(controller.EFAILEDSOCKET, "Connection to "+c.remote.String()+" was closed")
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

// onReadable runs on netpoll's handler goroutine whenever data arrives and
// consumes every complete frame (see NextFrame).
func (c *ClientConn) onReadable(_ context.Context, nc netpoll.Connection) error {
	r := nc.Reader()
	m := &c.readMeta
	for r.Len() > 0 {
		frame, err := NextFrame(r, c.maxBodySize)
		if err != nil {
			return c.protocolError(err)
		}
		m.Reset()
		msg, att, err := baidustd.DecodeFrame(frame, m)
		if err != nil && !errors.Is(err, baidustd.ErrBadAttachmentSize) {
			// brpc drops a response whose meta it cannot parse; the
			// attempt it belonged to will time out or be retried.
			slog.Warn("gobrpc: dropped a malformed response", "remote", c.remote.String(), "err", err)
			r.Release()
			continue
		}
		c.mu.Lock()
		h := c.pending[m.CorrelationID]
		delete(c.pending, m.CorrelationID)
		c.inflight.Store(int32(len(c.pending)))
		c.mu.Unlock()
		switch {
		case h == nil: // the call ended already: drop it, as brpc does
		case err != nil:
			h.HandleFailure(c, controller.ERESPONSE, err.Error())
		default:
			h.HandleResponse(c, m, msg, att)
		}
		r.Release()
	}
	return nil
}

func (c *ClientConn) protocolError(err error) error {
	if !errors.Is(err, netpoll.ErrEOF) && !errors.Is(err, netpoll.ErrConnClosed) {
		slog.Warn("gobrpc: closing client connection", "remote", c.remote.String(), "err", err)
	}
	c.Close()
	return err
}

// ErrnoOf maps a dial or write error to brpc's error code.
func ErrnoOf(err error) controller.Errno {
	// netpoll's own errors are syscall.Errno values above 0x100: test them
	// before treating err as a system errno.
	switch {
	case errors.Is(err, ErrOvercrowded):
		return controller.EOVERCROWDED
	case errors.Is(err, netpoll.ErrDialTimeout), errors.Is(err, context.DeadlineExceeded):
		return controller.ETIMEDOUT
	case errors.Is(err, netpoll.ErrEOF):
		return controller.EEOF
	case errors.Is(err, netpoll.ErrConnClosed):
		return controller.EFAILEDSOCKET
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return controller.ETIMEDOUT
	}
	var errno syscall.Errno
	if errors.As(err, &errno) && errno > 0 && errno < 0x100 {
		return controller.Errno(errno)
	}
	return controller.EFAILEDSOCKET
}
