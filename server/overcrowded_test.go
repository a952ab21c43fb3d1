package server_test

import (
	"encoding/binary"
	"flag"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gobrpc/gobrpc/testsupport/echotest"
)

// A client that sends and does not read: once more than
// -socket_max_unwritten_bytes of answers wait on its connection, the server
// drops answers (as brpc does; those calls time out) instead of queueing
// them without bound, and the connection keeps serving.
func TestOvercrowdedResponsesAreDropped(t *testing.T) {
	require.NoError(t, flag.CommandLine.Set("socket_max_unwritten_bytes", "262144"))
	defer flag.CommandLine.Set("socket_max_unwritten_bytes", "67108864")
	srv, svc := echotest.StartServer(t, nil)
	c := dialRaw(t, srv)

	const n = 200
	att := make([]byte, 64<<10)
	go func() { // 12.5 MB of requests; each answer carries the attachment back
		for i := range n {
			if _, err := c.Write(requestFrame(t, "gobrpc.test.EchoService", "Echo", int64(i), echoPayload(t, "x"), att)); err != nil {
				return
			}
		}
	}()
	require.Eventually(t, func() bool { return svc.Calls.Load() == n }, 10*time.Second, 10*time.Millisecond)
	time.Sleep(200 * time.Millisecond) // the handlers answer

	got := 0
	for {
		c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		var hdr [12]byte
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			break
		}
		c.SetReadDeadline(time.Now().Add(3 * time.Second)) // the rest of a frame that started
		_, err := io.CopyN(io.Discard, c, int64(binary.BigEndian.Uint32(hdr[4:8])))
		require.NoError(t, err)
		got++
	}
	t.Logf("%d of %d answers arrived", got, n)
	assert.Positive(t, got)
	assert.Less(t, got, n, "answers beyond the limit are dropped")

	c.send(requestFrame(t, "gobrpc.test.EchoService", "Echo", 1000, echoPayload(t, "still here"), nil))
	m, _, _ := decode(t, c.readFrame())
	assert.Equal(t, int64(1000), m.CorrelationID, "the connection keeps serving")
	assert.Zero(t, m.ErrorCode)
}
