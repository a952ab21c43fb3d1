package transport

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/cloudwego/netpoll"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// netpollPair is a netpoll connection and the Go connection at its other end.
func netpollPair(t *testing.T) (netpoll.Connection, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	nc, _, _, err := dialNetpoll(ln.Addr().String(), time.Second)
	require.NoError(t, err)
	peer := <-accepted
	require.NotNil(t, peer)
	return nc, peer
}

// Frames written by many goroutines at once, with and without the yield
// that batches them, arrive whole and, per writer, in order.
func TestFrameWriterKeepsFramesWholeAndInOrder(t *testing.T) {
	nc, peer := netpollPair(t)
	defer peer.Close()
	defer nc.Close()
	w := NewFrameWriter(nc, func(err error) { t.Errorf("write failed: %v", err) })

	const writers, perWriter = 16, 2000
	received := make(chan [writers]int, 1)
	go func() {
		var next [writers]int
		r := bufio.NewReader(peer)
		var frame [12]byte // writer, sequence, writer again
		for n := 0; n < writers*perWriter; n++ {
			if _, err := io.ReadFull(r, frame[:]); err != nil {
				t.Errorf("after %d frames: %v", n, err)
				break
			}
			id := binary.BigEndian.Uint32(frame[0:])
			seq := binary.BigEndian.Uint32(frame[4:])
			if id >= writers || binary.BigEndian.Uint32(frame[8:]) != id || int(seq) != next[id] {
				t.Errorf("frame %d: torn or out of order: % x (writer %d expects %d)", n, frame, id, next[id%writers])
				break
			}
			next[id]++
		}
		received <- next
	}()

	var wg sync.WaitGroup
	for id := range writers {
		wg.Go(func() {
			var frame [12]byte
			for seq := range perWriter {
				binary.BigEndian.PutUint32(frame[0:], uint32(id))
				binary.BigEndian.PutUint32(frame[4:], uint32(seq))
				binary.BigEndian.PutUint32(frame[8:], uint32(id))
				assert.NoError(t, w.Write(frame[:], seq%2 == 0))
			}
		})
	}
	wg.Wait()
	select {
	case next := <-received:
		for id, n := range next {
			assert.Equal(t, perWriter, n, "frames of writer %d", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the frames did not all arrive in 10 s")
	}
}

// Once the connection is closed, Write fails instead of queueing frames
// nobody will send.
func TestFrameWriterFailsAfterClose(t *testing.T) {
	nc, peer := netpollPair(t)
	defer peer.Close()
	w := NewFrameWriter(nc, func(error) {})
	require.NoError(t, w.Write([]byte("hello"), false))
	nc.Close()
	assert.Error(t, w.Write([]byte("lost"), false))
	assert.Error(t, w.Write([]byte("lost"), true), "an error sticks")
}

// A peer that stops reading fills the socket; once more than
// socket_max_unwritten_bytes wait, Write refuses frames with
// ErrOvercrowded instead of queueing them, and takes them again once the
// peer has read.
func TestFrameWriterOvercrowded(t *testing.T) {
	old := MaxUnwrittenBytes.Get()
	require.NoError(t, MaxUnwrittenBytes.SetValue(256<<10))
	defer MaxUnwrittenBytes.SetValue(old)
	nc, peer := netpollPair(t)
	defer peer.Close()
	defer nc.Close()
	w := NewFrameWriter(nc, func(err error) { t.Errorf("write failed: %v", err) })

	frame := make([]byte, 64<<10)
	blocked := make(chan struct{})
	go func() { // the flusher: blocks once the socket buffers are full
		defer close(blocked)
		for range 1024 { // 64 MB, far beyond loopback's buffers
			if err := w.Write(frame, false); err != nil {
				return
			}
		}
	}()
	// Wait until the flusher is stuck in a write (the socket is full), so
	// that the frames below queue behind it.
	stuckSince := time.Time{}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "the writer never blocked")
		w.mu.Lock()
		stuck := w.flushing && w.writing > 0
		w.mu.Unlock()
		if !stuck {
			stuckSince = time.Time{}
			continue
		}
		if stuckSince.IsZero() {
			stuckSince = time.Now()
		}
		if time.Since(stuckSince) > 200*time.Millisecond {
			break
		}
	}
	var overcrowded bool
	for range 16 { // 1 MB: past the 256 KB limit
		err := w.Write(frame, false)
		if errors.Is(err, ErrOvercrowded) {
			overcrowded = true
			break
		}
		require.NoError(t, err)
	}
	require.True(t, overcrowded, "a peer that does not read must make Write refuse frames")

	drained := make(chan int64)
	go func() {
		n, _ := io.Copy(io.Discard, peer)
		drained <- n
	}()
	<-blocked
	require.NoError(t, w.Write(frame, false), "the connection works again once the peer reads")
	nc.Close()
	<-drained
}
