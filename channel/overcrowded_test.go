package channel_test

import (
	"flag"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gobrpc/gobrpc/channel"
	"github.com/gobrpc/gobrpc/controller"
)

// A server that accepts but never reads: once more than
// -socket_max_unwritten_bytes wait on the connection, calls fail at once
// with EOVERCROWDED (as brpc's) instead of queueing without bound.
func TestOvercrowdedConnection(t *testing.T) {
	require.NoError(t, flag.CommandLine.Set("socket_max_unwritten_bytes", "262144"))
	defer flag.CommandLine.Set("socket_max_unwritten_bytes", "67108864")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // never read
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	}()

	stub := newChannel(t, ln.Addr().String(), func(o *channel.Options) {
		o.TimeoutMs = 3000
		o.MaxRetry = 0
		o.ConnectTimeoutMs = -1 // bounded by the deadline: 256 callers wait for one dial on a busy machine
	})
	attachment := make([]byte, 64<<10)
	codes := make(chan controller.Errno, 256)
	texts := make(chan string, 256)
	var wg sync.WaitGroup
	for range 256 { // 16 MB in all: more than loopback buffers plus the limit
		wg.Go(func() {
			cntl := controller.New()
			cntl.RequestAttachment().Write(attachment)
			start := time.Now()
			echo(stub, cntl, "x")
			if cntl.ErrorCode() == controller.EOVERCROWDED {
				assert.Less(t, time.Since(start), time.Second, "EOVERCROWDED must come at once, not at the deadline")
				texts <- cntl.ErrorText()
			}
			codes <- cntl.ErrorCode()
		})
	}
	wg.Wait()
	close(codes)
	close(texts)
	seen := map[controller.Errno]int{}
	for c := range codes {
		seen[c]++
	}
	t.Logf("outcomes: %v", seen)
	require.Positive(t, seen[controller.EOVERCROWDED], "outcomes %v", seen)
	assert.Contains(t, <-texts, "[E1011]")
	assert.Equal(t, 256, seen[controller.EOVERCROWDED]+seen[controller.ERPCTIMEDOUT], "the others wait for the server and time out: %v", seen)
}
