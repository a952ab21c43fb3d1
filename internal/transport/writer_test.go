package transport

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gobrpc/gobrpc/protocol/baidustd"
)

// connPair is an adopted connection (which ignores what it reads) and
// the Go connection at its other end.
func connPair(t *testing.T) (*Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	gc, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second)
	require.NoError(t, err)
	c, err := adopt(gc.(*net.TCPConn), 0, func(*baidustd.Meta, []byte, []byte, error) (Task, error) { return nil, nil }, nil)
	require.NoError(t, err)
	c.start()
	peer := <-accepted
	require.NotNil(t, peer)
	return c, peer
}

// Frames written by many goroutines at once, with and without the yield
// that batches them, arrive whole and, per writer, in order.
func TestWriterKeepsFramesWholeAndInOrder(t *testing.T) {
	nc, peer := connPair(t)
	defer peer.Close()
	defer nc.Close()
	w := nc.w

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
				assert.NoError(t, w.Write(frame[:4], frame[4:], seq%2 == 0))
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
func TestWriterFailsAfterClose(t *testing.T) {
	nc, peer := connPair(t)
	defer peer.Close()
	w := nc.w
	require.NoError(t, w.Write([]byte("hello"), nil, false))
	nc.Close()
	require.Eventually(t, func() bool { return w.Write([]byte("lost"), nil, false) != nil }, time.Second, time.Millisecond)
	assert.Error(t, w.Write([]byte("lost"), nil, true), "an error sticks")
}

// A peer that stops reading fills the socket; the Writer never waits for
// it: each Write returns at once, queueing what the socket does not take,
// until more than socket_max_unwritten_bytes wait and Write refuses frames
// with ErrOvercrowded. Once the peer reads, the queue drains in order and
// frames are taken again.
func TestWriterOvercrowded(t *testing.T) {
	old := MaxUnwrittenBytes.Get()
	require.NoError(t, MaxUnwrittenBytes.SetValue(256<<10))
	defer MaxUnwrittenBytes.SetValue(old)
	nc, peer := connPair(t)
	defer peer.Close()
	defer nc.Close()
	w := nc.w

	frame := make([]byte, 64<<10)
	sent := 0
	overcrowded := false
	for range 1024 { // 64 MB, far beyond loopback's buffers
		err := w.Write(frame, nil, false)
		if errors.Is(err, ErrOvercrowded) {
			overcrowded = true
			break
		}
		require.NoError(t, err)
		sent++
	}
	require.True(t, overcrowded, "a peer that does not read must make Write refuse frames")
	assert.LessOrEqual(t, w.Unwritten(), 256<<10+len(frame), "the queue stays within the limit")

	drained := make(chan int64)
	go func() {
		n, _ := io.Copy(io.Discard, peer)
		drained <- n
	}()
	require.Eventually(t, func() bool { return w.Unwritten() == 0 }, 10*time.Second, time.Millisecond)
	require.NoError(t, w.Write(frame, nil, false), "the connection works again once the peer reads")
	sent++
	require.Eventually(t, func() bool { return w.Unwritten() == 0 }, 10*time.Second, time.Millisecond)
	nc.Close()
	assert.Equal(t, int64(sent*len(frame)), <-drained, "every frame taken arrived, none twice")
}

// A frame larger than the socket's buffers is taken in part and the rest
// queued: Write returns without waiting for the peer, which receives the
// frame whole (and frames written after it, after it) once it reads.
func TestWriterNeverWaitsForThePeer(t *testing.T) {
	nc, peer := connPair(t)
	defer peer.Close()
	defer nc.Close()
	big := make([]byte, 16<<20)
	for i := range big {
		big[i] = byte(i)
	}
	returned := make(chan error, 1)
	go func() {
		err := nc.Write(big[:12], big[12:], false)
		if err == nil {
			err = nc.Write([]byte("tail"), nil, false)
		}
		returned <- err
	}()
	select {
	case err := <-returned:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Write waited for a peer that does not read")
	}
	assert.Greater(t, nc.Unwritten(), 0, "the rest is queued")
	got, err := io.ReadAll(io.LimitReader(peer, int64(len(big)+4)))
	require.NoError(t, err)
	require.Equal(t, len(big)+4, len(got))
	assert.True(t, bytes.Equal(big, got[:len(big)]), "the frame arrived whole")
	assert.Equal(t, "tail", string(got[len(big):]))
}
