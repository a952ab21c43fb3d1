package channel_test

// attack15: outside-attacker tests of the channel.

import (
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gobrpc/gobrpc/channel"
	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/testsupport/echotest"
	"github.com/gobrpc/gobrpc/testsupport/testpb"
)

// a15Backlog0 is a listener whose accept queue holds one connection: once
// that is queued, further connects hang (Linux drops their SYNs).
func a15Backlog0(t *testing.T) (net.Listener, string) {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	require.NoError(t, err)
	require.NoError(t, syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}))
	require.NoError(t, syscall.Listen(fd, 0))
	sa, err := syscall.Getsockname(fd)
	require.NoError(t, err)
	f := os.NewFile(uintptr(fd), "backlog0")
	ln, err := net.FileListener(f)
	f.Close()
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	return ln, fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
}

// TestAttack15BackupDialStallsEveryTimer: a pooled cluster channel whose
// backup goes to a server with an idle pooled connection that the server
// closed, and whose accept queue is full. The backup is issued on the
// process-wide timer goroutine; Ready() said an idle connection exists, so
// Acquire finds it dead and dials right there. While that connect hangs, no
// other deadline in the process fires: a victim call with a 100 ms
// timeout on another channel returns seconds late.
func TestAttack15BackupDialStallsEveryTimer(t *testing.T) {
	srvA := a15EchoAddr(t)
	lnB, addrB := a15Backlog0(t)

	closeB := make(chan struct{})
	var bCalls atomic.Int32
	var bwg sync.WaitGroup
	bwg.Add(1)
	go func() { // B: accept one connection, answer on it until closeB
		defer bwg.Done()
		c, err := lnB.Accept()
		if err != nil {
			return
		}
		go func() { <-closeB; c.Close() }()
		for {
			r, err := malReadRequest(c)
			if err != nil {
				return
			}
			bCalls.Add(1)
			c.Write(malReply(r.meta.CorrelationID, r.msg))
		}
	}()
	t.Cleanup(func() {
		select {
		case <-closeB:
		default:
			close(closeB)
		}
		lnB.Close()
		bwg.Wait()
	})

	_, stub := malChannel(t, "list://"+srvA+","+addrB, "rr", func(o *channel.Options) {
		o.ConnectionType = "pooled"
		o.MaxRetry = 1
		o.TimeoutMs = 3000
	})
	// Warm up until the last call went to B: rr's next pick is A.
	for i := 0; i < 10; i++ {
		before := bCalls.Load()
		cntl := controller.New()
		malCall(t, stub, cntl, "hi", 5*time.Second)
		require.False(t, cntl.Failed(), cntl.ErrorText())
		if bCalls.Load() > before && i >= 1 {
			break
		}
	}
	close(closeB) // B closes its (now idle) pooled connection
	// Fill B's accept queue: connects from now on hang.
	filler, err := net.DialTimeout("tcp", addrB, time.Second)
	require.NoError(t, err)
	defer filler.Close()
	time.Sleep(50 * time.Millisecond)

	// The attack: first attempt to A (slow), backup after 20 ms to B.
	attackDone := make(chan struct{})
	go func() {
		defer close(attackDone)
		cntl := controller.New()
		cntl.SetBackupRequestMs(20)
		resp := &testpb.EchoResponse{}
		stub.Echo(cntl, &testpb.EchoRequest{Message: strPtr("sleep:2500ms")}, resp, nil)
	}()
	time.Sleep(150 * time.Millisecond)

	// The victim: another channel, a silent server, a 100 ms deadline.
	silent := startMalServer(t, func(s *malServer, c net.Conn) { s.holdOpen(c) })
	_, vstub := malChannel(t, silent.addr(), "", func(o *channel.Options) { o.TimeoutMs = 100; o.MaxRetry = 0 })
	cntl := controller.New()
	_, took := malCall(t, vstub, cntl, "x", 10*time.Second)
	require.True(t, cntl.Failed())
	require.Equal(t, controller.ERPCTIMEDOUT, controller.Errno(cntl.ErrorCode()), cntl.ErrorText())
	<-attackDone
	require.Less(t, took, 1100*time.Millisecond,
		"a 100 ms call took %v: its deadline timer was held up by another channel's backup connect", took)
}

func strPtr(s string) *string { return &s }

func a15EchoAddr(t *testing.T) string {
	srv, _ := echotest.StartServer(t, nil)
	return srv.ListenAddress().String()
}
