package echobench

import (
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"
)

func TestRawTCPEcho(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := serveRawTCP(ln)
	defer srv.close()
	cl, err := dialRawTCP(ln.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.close()
	// Two callers on their own connections, payloads of 16 B and 1 KB.
	for _, n := range []int{16, 1024} {
		call := cl.caller(makePayload(n))
		for i := range 5 {
			if err := call(); err != nil {
				t.Fatalf("%d B, call %d: %v", n, i, err)
			}
		}
	}
	if got := len(cl.(*rawtcpClient).conns); got != 2 {
		t.Errorf("%d connections, want one per caller (2)", got)
	}

	// The server echoes a frame byte for byte.
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	frame := binary.BigEndian.AppendUint32(nil, 5)
	frame = append(frame, "hello"...)
	if _, err := c.Write(frame); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(frame))
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if string(got) != string(frame) {
		t.Errorf("echo %q, want %q", got, frame)
	}
}

func TestRawTCPCallFailsWhenServerGone(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := serveRawTCP(ln)
	cl, err := dialRawTCP(ln.Addr().String(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.close()
	call := cl.caller(makePayload(16))
	if err := call(); err != nil {
		t.Fatal(err)
	}
	srv.close()
	if err := call(); err == nil {
		t.Error("a call after the server closed: no error")
	}
}
