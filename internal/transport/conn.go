package transport

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cloudwego/netpoll"

	"github.com/gobrpc/gobrpc/internal/ratelog"
	"github.com/gobrpc/gobrpc/protocol/baidustd"
)

// Conn is one TCP connection carrying baidu_std frames, on either end:
// netpoll's poller reads it and hands every complete frame to the owner
// (ClientConn or ServerConn), and a Writer writes it without ever waiting
// for the peer.
type Conn struct {
	nc          netpoll.Connection
	w           *Writer
	remote      net.Addr
	local       net.Addr
	maxBodySize int
	handle      FrameHandler
	lastRead    atomic.Int64 // unix ns of the last frame read, for idle timeouts

	meta baidustd.Meta // reused by the reader; only it touches this
}

// FrameHandler receives each frame read from a connection, decoded into m
// (err is DecodeFrame's error, when the frame does not decode). msg, att
// and m's byte fields alias the read buffer and are only valid during the
// call. It runs on the connection's reader: it must not block. A non-nil
// return closes the connection.
type FrameHandler func(m *baidustd.Meta, msg, att []byte, err error) error

// adopt moves tc into netpoll: its socket is duplicated twice, once for
// netpoll (which then reads it from its first byte, only peeked so far on
// a server) and once for the Writer, and Go's copy is closed. onClose runs
// once when the connection closes, whoever closes it. Reading starts with
// start, once the owner can take frames.
func adopt(tc *net.TCPConn, maxBodySize int, handle FrameHandler, onClose func()) (*Conn, error) {
	c := &Conn{remote: tc.RemoteAddr(), local: tc.LocalAddr(), maxBodySize: maxBodySize, handle: handle}
	readFD, writeFD, err := dupSocket(tc)
	tc.Close() // the duplicates keep the socket open
	if err != nil {
		return nil, err
	}
	nc, err := netpoll.NewFDConnection(readFD)
	if err != nil {
		syscall.Close(readFD)
		syscall.Close(writeFD)
		return nil, err
	}
	c.nc = nc
	c.w = newWriter(nc, writeFD, func(err error) {
		if !errors.Is(err, netpoll.ErrConnClosed) && !errors.Is(err, ErrWriterClosed) {
			logWriteFailed.Warn("gobrpc: closing connection after a failed write", "remote", c.remote.String(), "err", err)
		}
		c.Close()
	})
	c.lastRead.Store(time.Now().UnixNano())
	nc.AddCloseCallback(func(netpoll.Connection) error {
		c.w.Close()
		if onClose != nil {
			onClose()
		}
		return nil
	})
	return c, nil
}

// start hands frames to the owner from now on.
func (c *Conn) start() error {
	if err := c.nc.SetOnRequest(c.onReadable); err != nil {
		c.nc.Close()
		return err
	}
	return nil
}

// dupSocket duplicates tc's socket twice, close-on-exec.
func dupSocket(tc *net.TCPConn) (readFD, writeFD int, err error) {
	raw, err := tc.SyscallConn()
	if err != nil {
		return -1, -1, err
	}
	readFD, writeFD = -1, -1
	var dupErr error
	cerr := raw.Control(func(s uintptr) {
		syscall.ForkLock.RLock()
		defer syscall.ForkLock.RUnlock()
		if readFD, dupErr = syscall.Dup(int(s)); dupErr != nil {
			readFD = -1
			return
		}
		syscall.CloseOnExec(readFD)
		if writeFD, dupErr = syscall.Dup(int(s)); dupErr != nil {
			writeFD = -1
			return
		}
		syscall.CloseOnExec(writeFD)
	})
	if cerr == nil {
		cerr = dupErr
	}
	if cerr != nil {
		for _, fd := range []int{readFD, writeFD} {
			if fd >= 0 {
				syscall.Close(fd)
			}
		}
		return -1, -1, cerr
	}
	return readFD, writeFD, nil
}

// onReadable runs on netpoll's handler goroutine whenever data arrives and
// hands every complete frame to the owner. It blocks only while the rest
// of a frame already started is on its way (see NextFrame), so a frame
// costs at most maxBodySize of buffer.
func (c *Conn) onReadable(_ context.Context, nc netpoll.Connection) error {
	r := nc.Reader()
	for r.Len() > 0 {
		frame, err := NextFrame(r, c.maxBodySize)
		if err != nil {
			return c.readFailed(err)
		}
		c.lastRead.Store(time.Now().UnixNano())
		m := &c.meta
		msg, att, derr := baidustd.DecodeFrame(frame, m)
		err = c.handle(m, msg, att, derr)
		// An idle connection keeps nothing of its last frame.
		m.Reset()
		r.Release()
		if err != nil {
			return c.readFailed(err)
		}
	}
	return nil
}

func (c *Conn) readFailed(err error) error {
	if !errors.Is(err, netpoll.ErrEOF) && !errors.Is(err, netpoll.ErrConnClosed) {
		logBadPeer.Warn("gobrpc: closing connection", "remote", c.remote.String(), "err", err)
	}
	c.Close()
	return err
}

// Write sends one frame (head then body) without waiting for the peer; see
// Writer.Write.
func (c *Conn) Write(head, body []byte, othersLikely bool) error {
	return c.w.Write(head, body, othersLikely)
}

// Close closes the connection; frames still queued are dropped.
func (c *Conn) Close() { c.nc.Close() }

// Active reports whether the connection is open.
func (c *Conn) Active() bool { return c.nc.IsActive() }

// RemoteAddr is the peer's address.
func (c *Conn) RemoteAddr() net.Addr { return c.remote }

// LocalAddr is this end's address.
func (c *Conn) LocalAddr() net.Addr { return c.local }

// Unwritten is how many bytes wait to be written.
func (c *Conn) Unwritten() int { return c.w.Unwritten() }

// Written counts the bytes written so far.
func (c *Conn) Written() int64 { return c.w.Written() }

// IdleSince is when the last frame was read.
func (c *Conn) IdleSince() time.Time { return time.Unix(0, c.lastRead.Load()) }

// Log lines about peers are rate-limited: a flood of bad connections must
// not flood the log.
var (
	logBadPeer     = ratelog.New(time.Second)
	logWriteFailed = ratelog.New(time.Second)
)
