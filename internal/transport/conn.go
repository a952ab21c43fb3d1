package transport

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gobrpc/gobrpc/internal/ratelog"
	"github.com/gobrpc/gobrpc/internal/timerq"
	"github.com/gobrpc/gobrpc/protocol/baidustd"
)

// Conn is one TCP connection carrying baidu_std frames, on either end. Its
// reader hands every complete frame to the owner (ClientConn or
// ServerConn); a Writer writes it without ever waiting for the peer.
//
// One goroutine at a time reads a connection, but not always the same one:
// a server's reader runs a request in place and is replaced if that takes
// long (see runInline); a client's is often the caller waiting for the
// response (see ClientConn.ReadFor). Whoever reads owns the read buffer;
// the hand-over from one reader to the next is synchronised by its owner.
//
// The reader reads only when the frames it has are handled, so a peer that
// sends faster than they are handled fills its own socket buffers (TCP flow
// control), not this process's memory: what a connection buffers is the
// frame being read, at most maxBodySize, plus one read's worth.
type Conn struct {
	tc          *net.TCPConn
	raw         syscall.RawConn
	w           *Writer
	remote      net.Addr
	local       net.Addr
	maxBodySize int
	handle      FrameHandler
	onClose     func(cause error)

	closed    atomic.Bool
	closeOnce sync.Once
	ended     bool         // the reader saw the end and ran onClose (reader-owned)
	lastRead  atomic.Int64 // unix ns of the last bytes read, for idle timeouts

	// The read buffer and the frame being decoded, owned by the
	// goroutine reading: buf[rd:wr] holds bytes read and not yet handled.
	buf    []byte
	rd, wr int
	next   int // where the frame being handled ends
	meta   baidustd.Meta

	// Requests run in place (runInline): bit 0 is set while the reader
	// runs one, the rest counts the readers that took over.
	inline   atomic.Uint64
	takeover timerq.Timer // fires when a request in place runs long
}

// Task is a request a server's reader runs in place (see FrameHandler).
type Task interface{ Run() }

// FrameHandler receives each frame read from a connection, decoded into m
// (err is DecodeFrame's error, when the frame does not decode). msg, att
// and m's byte fields alias the read buffer and are only valid during the
// call. It runs on the connection's reader: it must not block. A non-nil
// error closes the connection. A non-nil Task is run by the reader itself
// once the frame is consumed (see runInline).
type FrameHandler func(m *baidustd.Meta, msg, att []byte, err error) (Task, error)

// adopt takes tc over; nothing reads it until its owner starts a reader.
// onClose runs once, on the goroutine reading, when the connection has
// closed, whoever closed it; cause is what the reader could not take (a
// frame over maxBodySize, a wrong magic ...), nil for a close, an EOF or a
// reset.
func adopt(tc *net.TCPConn, maxBodySize int, handle FrameHandler, onClose func(cause error)) (*Conn, error) {
	raw, err := tc.SyscallConn()
	if err != nil {
		tc.Close()
		return nil, err
	}
	if maxBodySize <= 0 {
		maxBodySize = baidustd.DefaultMaxBodySize
	}
	c := &Conn{tc: tc, raw: raw, remote: tc.RemoteAddr(), local: tc.LocalAddr(), maxBodySize: maxBodySize,
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

// start starts a reader goroutine that reads until the connection ends.
func (c *Conn) start() { go c.readLoop() }

func (c *Conn) readLoop() { c.readFrames(nil) }

// Read buffers: a connection reads into a small buffer that grows (up to
// maxReadBuffer) while reads fill it, and goes back to small once drained;
// a frame larger than the buffer grows it only as its bytes arrive, so a
// header announcing 64 MiB costs nothing until the bytes come.
const (
	minReadBuffer = 4 << 10
	maxReadBuffer = 64 << 10
)

// readFrames reads frames and hands them to the owner until the
// connection ends (it closes the connection, runs onClose and returns
// true) or stop
// reports true (checked before each frame and each read) or this
// goroutine's reading was taken over by another (see runInline); then it
// returns false. A read deadline (see interrupt) wakes a blocked read to
// ask stop again.
func (c *Conn) readFrames(stop func() bool) (ended bool) {
	if c.ended {
		return false
	}
	if c.buf == nil {
		c.buf = make([]byte, minReadBuffer)
	}
	var cause error
	defer func() {
		if ended {
			c.end(cause)
		}
	}()
	for {
		need := 0 // the length of the frame being read, once its header is in
		for !c.closed.Load() {
			if stop != nil && stop() {
				return false
			}
			n, err := baidustd.Cut(c.buf[c.rd:c.wr], c.maxBodySize)
			if errors.Is(err, baidustd.ErrNotEnoughData) {
				need = n
				break
			}
			if err != nil {
				cause = err
				logBadPeer.Warn("gobrpc: closing connection", "remote", c.remote.String(), "err", err)
				return true
			}
			c.next = c.rd + n
			msg, att, derr := baidustd.DecodeFrame(c.buf[c.rd:c.rd+n], &c.meta)
			task, herr := c.handle(&c.meta, msg, att, derr)
			c.meta.Reset() // an idle connection keeps nothing of its last frame
			c.rd += n
			if herr != nil {
				cause = herr
				logBadPeer.Warn("gobrpc: closing connection", "remote", c.remote.String(), "err", herr)
				return true
			}
			if task != nil && !c.runInline(task) {
				return false
			}
		}
		if c.closed.Load() {
			return true
		}
		if stop != nil && stop() {
			return false
		}
		c.makeRoom(need)
		n, err := c.tc.Read(c.buf[c.wr:])
		if n > 0 {
			c.lastRead.Store(time.Now().UnixNano())
			if c.wr += n; c.wr == len(c.buf) && len(c.buf) < maxReadBuffer && need <= len(c.buf) {
				// The reads fill the buffer: read more at a time.
				nb := make([]byte, 2*len(c.buf))
				c.wr = copy(nb, c.buf[c.rd:c.wr])
				c.buf, c.rd = nb, 0
			}
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && !c.closed.Load() {
				// An interrupt: ask stop again, with the deadline cleared
				// for whoever reads next.
				c.tc.SetReadDeadline(time.Time{})
				continue
			}
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !isReset(err) {
				logBadPeer.Warn("gobrpc: connection read failed", "remote", c.remote.String(), "err", err)
			}
			return true
		}
	}
}

// end closes the connection after its reader saw the end, and runs
// onClose.
func (c *Conn) end(cause error) {
	c.ended = true
	c.Close()
	c.w.Close()
	if c.onClose != nil {
		c.onClose(cause)
	}
}

// interrupt wakes the goroutine blocked reading c (its read returns, and
// it asks its stop again); one that is not blocked yet returns from its
// next read at once.
func (c *Conn) interrupt() { c.tc.SetReadDeadline(aLongTimeAgo) }

var aLongTimeAgo = time.Unix(1, 0)

// Requests in place. A server's reader runs a request's handler itself
// when nothing else of the connection waits (brpc runs the last message
// of a read in place the same way): one goroutine hand-off fewer, which at
// low load is a wake-up of another thread saved on every call. A handler
// that takes long must not stop the connection's other requests: after
// takeoverAfter another goroutine takes over reading, and the one running
// the handler ends with it.
const (
	takeoverAfter = 500 * time.Microsecond
	takeoverSlack = 2 * time.Millisecond // a takeover is a safety net, not a deadline
)

func fireTakeover(c any) { c.(*Conn).takeOver() }

// frameBuffered reports, during a FrameHandler call, whether another whole
// frame is buffered behind the one being handled.
func (c *Conn) frameBuffered() bool {
	_, err := baidustd.Cut(c.buf[c.next:c.wr], c.maxBodySize)
	return err == nil
}

// runInline runs t on the reader, which has consumed t's frame. It returns
// false when another goroutine took over reading meanwhile: the caller
// then must not touch the read state.
func (c *Conn) runInline(t Task) bool {
	epoch := c.inline.Load() // bit 0 clear: this reader runs nothing now
	c.inline.Store(epoch | 1)
	c.takeover.Start(takeoverAfter, takeoverSlack, true, fireTakeover, c)
	t.Run()
	c.takeover.Stop()
	return c.inline.CompareAndSwap(epoch|1, epoch)
}

// takeOver starts a new reader for a connection whose reader runs a
// request in place for long. (A timer that fires late, during a later
// request in place, takes that one over: harmless.)
func (c *Conn) takeOver() {
	v := c.inline.Load()
	if v&1 == 1 && !c.closed.Load() && c.inline.CompareAndSwap(v, v+1) { // the next epoch, running nothing
		go c.readLoop()
	}
}

// makeRoom leaves buf[rd:wr] at the start of a buffer with free space to
// read into: for the rest of a frame of need bytes, at most double what is
// buffered (so memory follows the bytes that came, not the header's
// claim); a drained large buffer goes back to the small size.
func (c *Conn) makeRoom(need int) {
	c.buf, c.rd, c.wr = makeRoom(c.buf, c.rd, c.wr, need)
}

func makeRoom(buf []byte, r, w, need int) ([]byte, int, int) {
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
		c.w.Close() // nobody may be reading to do it
	})
}

// peekAlive reports whether the peer has not closed or reset the
// connection, looking at what came without taking it. Nobody may be
// reading c.
func (c *Conn) peekAlive() bool {
	alive := true
	// Control, not Read: a read deadline left by an interrupt must not
	// fail the look.
	err := c.raw.Control(func(fd uintptr) { alive = peekFD(fd) })
	return err == nil && alive
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
