package transport

import (
	"errors"
	"runtime"
	"sync"

	"github.com/cloudwego/netpoll"

	"github.com/gobrpc/gobrpc/flags"
)

// MaxUnwrittenBytes is brpc's -socket_max_unwritten_bytes: a connection
// whose peer does not read stops taking frames (ErrOvercrowded, which a
// call sees as EOVERCROWDED and retries elsewhere) instead of queueing
// without bound.
var MaxUnwrittenBytes = flags.DefineInt64("socket_max_unwritten_bytes", 64<<20,
	"Max unwritten bytes in each socket, if the limit is reached, Socket.Write fails with EOVERCROWDED",
	flags.Positive[int64])

// ErrOvercrowded is returned by FrameWriter.Write when more than
// MaxUnwrittenBytes wait to be written on the connection. The frame was not
// taken; the connection is fine.
var ErrOvercrowded = errors.New("too much unwritten data on the connection (socket_max_unwritten_bytes)")

// FrameWriter writes complete frames to one connection from many
// goroutines, batching them under load. The first writer to find the
// connection idle writes its frame itself; frames that arrive while a write
// is in progress are appended to a pending buffer, and the writer in
// progress (the flusher) writes all of them with its next syscall. Writers
// never wait for each other's syscalls, and under load one syscall carries
// many frames: brpc's Socket::Write works the same way (the first writer
// writes, later ones only enqueue).
//
// With 2 cores, writers rarely overlap by chance: netpoll's write is a raw
// syscall that keeps its P, so while one goroutine writes, at most one
// other runs. Profiles of 64 callers on one connection showed 40-46% of
// each side's CPU in one sendmsg per frame. So a writer that knows others
// are about to write (othersLikely: more than one request in flight on the
// connection) queues its frame and yields once before flushing: the
// runnable goroutines, typically the callers or handlers woken by the same
// read, add their frames, and one syscall carries them all. Measured with
// tools/bench echobench (16 B, 64 callers): CPU per call -30%, p99 -30%;
// 1 KB, 512 callers: CPU -20%, p99 -25%. A lone caller never yields.
type FrameWriter struct {
	conn    netpoll.Connection
	onError func(error) // a batch failed: close the connection

	mu       sync.Mutex
	pending  []byte // frames queued for the flusher
	spare    []byte // the flusher's last batch, kept to be reused
	writing  int    // bytes of the write in progress
	flushing bool
	err      error // the first write error; every later Write fails with it
}

// maxFlushRounds bounds how many batches a writer flushes for others before
// it hands the rest to a new goroutine, so a caller is not held up for long
// by a stream of other writers' frames.
const maxFlushRounds = 8

// Batch buffers are reused: 512 callers of 1 KB make batches of about
// 0.5 MB, and re-growing them cost more than the syscalls saved. A
// connection keeps a buffer of up to maxSpare for itself; larger ones go to
// batchPool, shared by all connections and emptied by the GC when unused,
// so that thousands of connections that once saw a burst do not each hold
// a large buffer. Batches over maxPooled are left to the GC.
const (
	maxSpare  = 64 << 10
	maxPooled = 4 << 20
)

var batchPool sync.Pool // of *[]byte

func getBatch() []byte {
	if p, ok := batchPool.Get().(*[]byte); ok {
		return (*p)[:0]
	}
	return nil
}

// putBatch gives a buffer larger than maxSpare back to batchPool.
func putBatch(b []byte) {
	if cap(b) <= maxPooled {
		b = b[:0]
		batchPool.Put(&b)
	}
}

// NewFrameWriter writes to conn; onError is called once, from a writer's
// goroutine, when a write of queued frames fails (the frames' owners have
// already returned, so the connection must be failed as a whole).
func NewFrameWriter(conn netpoll.Connection, onError func(error)) *FrameWriter {
	return &FrameWriter{conn: conn, onError: onError}
}

// Write sends frame, or queues it for the write in progress; othersLikely
// says other writers are likely to be runnable now (see above). It returns an
// error when frame was not written: ErrOvercrowded when it would take the
// bytes waiting to be written past MaxUnwrittenBytes (nothing else is
// wrong: later frames may go), or the connection failed earlier, or the
// caller wrote frame alone and that failed. When frame went out in a batch
// (queued behind a write in progress, or with othersLikely) a failure goes
// to onError instead, which must fail the connection.
// frame can be reused when Write returns.
//
// netpoll's Connection.Write copies into its buffer under the connection's
// flush lock, which its close path also takes; writing through Malloc and
// Flush instead can touch buffers a concurrent close has released.
func (w *FrameWriter) Write(frame []byte, othersLikely bool) error {
	w.mu.Lock()
	if w.err != nil {
		err := w.err
		w.mu.Unlock()
		return err
	}
	if w.flushing {
		if int64(w.writing+len(w.pending)+len(frame)) > MaxUnwrittenBytes.Get() {
			w.mu.Unlock()
			return ErrOvercrowded
		}
		w.pending = append(w.pending, frame...)
		w.mu.Unlock()
		return nil
	}
	w.flushing = true
	if othersLikely {
		w.pending = append(w.pending, frame...)
		w.mu.Unlock()
		runtime.Gosched()
		w.flush()
		return nil
	}
	w.writing = len(frame)
	w.mu.Unlock()

	if _, err := w.conn.Write(frame); err != nil {
		w.mu.Lock()
		w.fail(err)
		w.mu.Unlock()
		return err
	}
	w.flush()
	return nil
}

// flush writes the pending frames until there are none; the caller is the
// flusher.
func (w *FrameWriter) flush() {
	w.mu.Lock()
	for round := 0; ; round++ {
		w.writing = 0
		if w.err != nil || len(w.pending) == 0 {
			w.flushing = false
			w.mu.Unlock()
			return
		}
		if round == maxFlushRounds {
			w.mu.Unlock()
			go w.flush() // still the flusher: flushing stays true
			return
		}
		batch := w.pending
		if w.spare != nil {
			w.pending, w.spare = w.spare[:0], nil
		} else {
			w.pending = getBatch()
		}
		w.writing = len(batch)
		w.mu.Unlock()

		_, err := w.conn.Write(batch)

		w.mu.Lock()
		if cap(batch) <= maxSpare {
			w.spare = batch[:0]
		} else {
			putBatch(batch)
		}
		if err != nil {
			w.fail(err)
			w.mu.Unlock()
			w.onError(err)
			return
		}
	}
}

// fail records the first write error and drops what is queued; w.mu is
// held.
func (w *FrameWriter) fail(err error) {
	if w.err == nil {
		w.err = err
	}
	w.flushing = false
	w.writing = 0
	w.pending, w.spare = nil, nil
}
