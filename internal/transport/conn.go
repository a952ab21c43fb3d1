package transport

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gobrpc/gobrpc/internal/ratelog"
	"github.com/gobrpc/gobrpc/protocol/baidustd"
)

// Conn is one TCP connection carrying baidu_std frames, on either end. A
// reader goroutine reads it and hands every complete frame to the owner
// (ClientConn or ServerConn); a Writer writes it without ever waiting for
// the peer.
//
// The reader reads only when the frames it has are handled, so a peer that
// sends faster than they are handled fills its own socket buffers (TCP flow
// control), not this process's memory: what a connection buffers is the
// frame being read, at most maxBodySize, plus one read's worth.
type Conn struct {
	tc          *net.TCPConn
	w           *Writer
	remote      net.Addr
	local       net.Addr
	maxBodySize int
	handle      FrameHandler
	onClose     func(cause error)

	closed    atomic.Bool
	closeOnce sync.Once
	lastRead  atomic.Int64 // unix ns of the last bytes read, for idle timeouts
}

// FrameHandler receives each frame read from a connection, decoded into m
// (err is DecodeFrame's error, when the frame does not decode). msg, att
// and m's byte fields alias the read buffer and are only valid during the
// call. It runs on the connection's reader: it must not block. A non-nil
// return closes the connection.
type FrameHandler func(m *baidustd.Meta, msg, att []byte, err error) error

// adopt takes tc over: start starts its reader. onClose runs once, on the
// reader's goroutine, when the connection has closed, whoever closed it;
// cause is what the reader could not take (a frame over maxBodySize, a
// wrong magic ...), nil for a close, an EOF or a reset.
func adopt(tc *net.TCPConn, maxBodySize int, handle FrameHandler, onClose func(cause error)) (*Conn, error) {
	raw, err := tc.SyscallConn()
	if err != nil {
		tc.Close()
		return nil, err
	}
	if maxBodySize <= 0 {
		maxBodySize = baidustd.DefaultMaxBodySize
	}
	c := &Conn{tc: tc, remote: tc.RemoteAddr(), local: tc.LocalAddr(), maxBodySize: maxBodySize,
		handle: handle, onClose: onClose}
	c.w = newWriter(tc, raw, func(err error) {
		if !errors.Is(err, net.ErrClosed) && !errors.Is(err, ErrWriterClosed) {
			logWriteFailed.Warn("gobrpc: closing connection after a failed write", "remote", c.remote.String(), "err", err)
		}
		c.Close()
	})
	c.lastRead.Store(time.Now().UnixNano())
	return c, nil
}

// start starts the reader, once the owner can take frames.
func (c *Conn) start() { go c.readLoop() }

// Read buffers: a connection reads into a small buffer that grows (up to
// maxReadBuffer) while reads fill it, and goes back to small once drained;
// a frame larger than the buffer grows it only as its bytes arrive, so a
// header announcing 64 MiB costs nothing until the bytes come.
const (
	minReadBuffer = 4 << 10
	maxReadBuffer = 64 << 10
)

// readLoop reads frames until the connection closes, then runs onClose.
func (c *Conn) readLoop() {
	var cause error
	defer func() {
		c.Close()
		c.w.Close()
		if c.onClose != nil {
			c.onClose(cause)
		}
	}()
	var meta baidustd.Meta
	buf := make([]byte, minReadBuffer)
	r, w := 0, 0 // buf[r:w] holds bytes read and not yet handled
	for {
		need := 0 // the length of the frame being read, once its header is in
		for !c.closed.Load() {
			n, err := baidustd.Cut(buf[r:w], c.maxBodySize)
			if errors.Is(err, baidustd.ErrNotEnoughData) {
				need = n
				break
			}
			if err != nil {
				cause = err
				logBadPeer.Warn("gobrpc: closing connection", "remote", c.remote.String(), "err", err)
				return
			}
			msg, att, derr := baidustd.DecodeFrame(buf[r:r+n], &meta)
			herr := c.handle(&meta, msg, att, derr)
			meta.Reset() // an idle connection keeps nothing of its last frame
			r += n
			if herr != nil {
				cause = herr
				logBadPeer.Warn("gobrpc: closing connection", "remote", c.remote.String(), "err", herr)
				return
			}
		}
		if c.closed.Load() {
			return
		}
		buf, r, w = c.makeRoom(buf, r, w, need)
		n, err := c.tc.Read(buf[w:])
		if n > 0 {
			c.lastRead.Store(time.Now().UnixNano())
			if w += n; w == len(buf) && len(buf) < maxReadBuffer && need <= len(buf) {
				// The reads fill the buffer: read more at a time.
				nb := make([]byte, 2*len(buf))
				w = copy(nb, buf[r:w])
				buf, r = nb, 0
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !isReset(err) {
				logBadPeer.Warn("gobrpc: connection read failed", "remote", c.remote.String(), "err", err)
			}
			return
		}
	}
}

// makeRoom returns a buffer holding buf[r:w] at its start with free space
// to read into: for the rest of a frame of need bytes, at most double what
// is buffered (so memory follows the bytes that came, not the header's
// claim); a drained large buffer goes back to the small size.
func (c *Conn) makeRoom(buf []byte, r, w, need int) ([]byte, int, int) {
	n := w - r
	switch {
	case n == 0 && len(buf) > maxReadBuffer:
		return make([]byte, minReadBuffer), 0, 0
	case n == 0:
		return buf, 0, 0
	case need > len(buf):
		size := min(need, max(2*n, maxReadBuffer))
		if size > len(buf) {
			nb := make([]byte, size)
			copy(nb, buf[r:w])
			return nb, 0, n
		}
	}
	if w == len(buf) || (need > 0 && r+need > len(buf)) {
		copy(buf, buf[r:w])
		return buf, 0, n
	}
	return buf, r, w
}

func isReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// Write sends one frame (head then body) without waiting for the peer; see
// Writer.Write.
func (c *Conn) Write(head, body []byte, othersLikely bool) error {
	return c.w.Write(head, body, othersLikely)
}

// Close closes the connection; frames still queued are dropped. The
// reader then stops and runs onClose.
func (c *Conn) Close() {
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		c.tc.Close()
	})
}

// Active reports whether the connection is open.
func (c *Conn) Active() bool { return !c.closed.Load() }

// RemoteAddr is the peer's address.
func (c *Conn) RemoteAddr() net.Addr { return c.remote }

// LocalAddr is this end's address.
func (c *Conn) LocalAddr() net.Addr { return c.local }

// Unwritten is how many bytes wait to be written.
func (c *Conn) Unwritten() int { return c.w.Unwritten() }

// Written counts the bytes written so far.
func (c *Conn) Written() int64 { return c.w.Written() }

// IdleSince is when bytes last moved on the connection, either way.
func (c *Conn) IdleSince() time.Time {
	return time.Unix(0, max(c.lastRead.Load(), c.w.lastWrite.Load()))
}

// Log lines about peers are rate-limited: a flood of bad connections must
// not flood the log.
var (
	logBadPeer     = ratelog.New(time.Second)
	logWriteFailed = ratelog.New(time.Second)
)
