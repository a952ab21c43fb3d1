package echobench

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// rawtcp is the floor under every framework: no RPC at all, frames of a
// 4-byte big-endian length and the payload, echoed as they are. Each caller
// has its own TCP connection with one request outstanding on it (write a
// frame, read the echo back), so a caller costs what a closed-loop RPC
// caller costs at the least: a write and a read on each side, plus the
// scheduling. The server reads through a bufio.Reader (a frame in one read
// most of the time) and answers each frame with one write.

// maxRawFrame bounds a frame's length: a bad length does not make the
// server allocate gigabytes.
const maxRawFrame = 64 << 20

// rawtcpServer serves the raw echo on ln until close.
type rawtcpServer struct {
	ln    net.Listener
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func serveRawTCP(ln net.Listener) *rawtcpServer {
	s := &rawtcpServer{ln: ln, conns: map[net.Conn]struct{}{}}
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns[c] = struct{}{}
			s.mu.Unlock()
			s.wg.Go(func() {
				rawEchoConn(c)
				s.mu.Lock()
				delete(s.conns, c)
				s.mu.Unlock()
				c.Close()
			})
		}
	})
	return s
}

// rawEchoConn echoes c's frames until it ends or sends a bad frame.
func rawEchoConn(c net.Conn) {
	r := bufio.NewReaderSize(c, 64<<10)
	buf := make([]byte, 4, 4+1024) // the frame being echoed, reused
	for {
		if _, err := io.ReadFull(r, buf[:4]); err != nil {
			return
		}
		n := binary.BigEndian.Uint32(buf)
		if n > maxRawFrame {
			return
		}
		if cap(buf) < 4+int(n) {
			b := make([]byte, 4+int(n))
			copy(b, buf[:4])
			buf = b
		}
		buf = buf[:4+int(n)]
		if _, err := io.ReadFull(r, buf[4:]); err != nil {
			return
		}
		if _, err := c.Write(buf); err != nil {
			return
		}
	}
}

func (s *rawtcpServer) close() {
	s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// rawtcpClient opens one connection per caller.
type rawtcpClient struct {
	addr  string
	wait  time.Duration
	mu    sync.Mutex
	first net.Conn // dialed by dialRawTCP, not yet given to a caller
	conns []net.Conn
}

func dialRawTCP(addr string, timeout time.Duration) (client, error) {
	// One connection now, so that a wrong address fails here and not in
	// every call; it becomes the first caller's.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &rawtcpClient{addr: addr, wait: timeout, first: c, conns: []net.Conn{c}}, nil
}

var errRawFrame = errors.New("rawtcp: the echo's length is not the request's")

func (c *rawtcpClient) caller(payload []byte) func() error {
	c.mu.Lock()
	conn := c.first
	c.first = nil
	c.mu.Unlock()
	if conn == nil {
		var err error
		if conn, err = net.Dial("tcp", c.addr); err != nil {
			return func() error { return fmt.Errorf("rawtcp: %w", err) }
		}
		c.mu.Lock()
		c.conns = append(c.conns, conn)
		c.mu.Unlock()
	}
	r := bufio.NewReaderSize(conn, 64<<10)
	req := make([]byte, 4+len(payload))
	binary.BigEndian.PutUint32(req, uint32(len(payload)))
	copy(req[4:], payload)
	resp := make([]byte, 4+len(payload))
	return func() error {
		if c.wait > 0 {
			conn.SetDeadline(time.Now().Add(c.wait))
		}
		if _, err := conn.Write(req); err != nil {
			return err
		}
		if _, err := io.ReadFull(r, resp[:4]); err != nil {
			return err
		}
		if binary.BigEndian.Uint32(resp) != uint32(len(payload)) {
			return errRawFrame
		}
		if _, err := io.ReadFull(r, resp[4:]); err != nil {
			return err
		}
		return nil
	}
}

func (c *rawtcpClient) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.conns {
		conn.Close()
	}
}
