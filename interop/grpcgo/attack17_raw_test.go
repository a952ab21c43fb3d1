package grpcgo

// attack17: raw HTTP/2 helpers (a hand-driven h2c client and server made
// of x/net/http2's Framer and hpack).

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"

	"github.com/gobrpc/gobrpc/testsupport/testpb"
)

const atkPath = "/gobrpc.test.EchoService/Echo"

// rawH2 is a hand-driven HTTP/2 client connection.
type rawH2 struct {
	t   testing.TB
	c   net.Conn
	fr  *http2.Framer
	enc *hpack.Encoder
	hb  bytes.Buffer
}

func dialRaw(t testing.TB, addr string, settings ...http2.Setting) *rawH2 {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	r := &rawH2{t: t, c: c, fr: http2.NewFramer(c, c)}
	r.fr.ReadMetaHeaders = hpack.NewDecoder(1<<20, nil)
	r.fr.MaxHeaderListSize = 16 << 20
	r.enc = hpack.NewEncoder(&r.hb)
	if err := r.fr.WriteSettings(settings...); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *rawH2) Close() { r.c.Close() }

// grpcHeaders are a request's headers plus extra pairs.
func grpcHeaders(extra ...string) []string {
	return append([]string{":method", "POST", ":scheme", "http", ":path", atkPath, ":authority", "x",
		"content-type", "application/grpc", "te", "trailers"}, extra...)
}

func (r *rawH2) headers(id uint32, endStream bool, kv []string) error {
	r.hb.Reset()
	for i := 0; i+1 < len(kv); i += 2 {
		r.enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	return r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: r.hb.Bytes(), EndStream: endStream, EndHeaders: true})
}

func grpcFrame(compressed bool, payload []byte) []byte {
	b := make([]byte, 5, 5+len(payload))
	if compressed {
		b[0] = 1
	}
	binary.BigEndian.PutUint32(b[1:], uint32(len(payload)))
	return append(b, payload...)
}

func echoBytes(msg string) []byte {
	b, _ := proto.Marshal(&testpb.EchoRequest{Message: proto.String(msg)})
	return b
}

// streamResult is what came back on one stream.
type streamResult struct {
	headers  map[string]string
	trailers map[string]string
	data     []byte
	rst      http2.ErrCode
	gotRST   bool
	goaway   bool
	connErr  error
	ended    bool
}

func (s *streamResult) status() string {
	if v, ok := s.trailers["grpc-status"]; ok {
		return v
	}
	if v, ok := s.headers["grpc-status"]; ok {
		return v
	}
	return "<none>"
}

func (s *streamResult) message() string {
	if v, ok := s.trailers["grpc-message"]; ok {
		return v
	}
	return s.headers["grpc-message"]
}

func (s *streamResult) String() string {
	return fmt.Sprintf("status=%s msg=%q headers=%v trailers=%v data=%dB rst=%v(%v) goaway=%v connErr=%v",
		s.status(), s.message(), s.headers, s.trailers, len(s.data), s.gotRST, s.rst, s.goaway, s.connErr)
}

// readStreams reads frames until every stream in ids ended, the
// connection failed or timeout passed; it answers SETTINGS and PING and
// (when ack) gives back the flow-control window of DATA it reads.
func (r *rawH2) readStreams(timeout time.Duration, ack bool, ids ...uint32) map[uint32]*streamResult {
	res := map[uint32]*streamResult{}
	for _, id := range ids {
		res[id] = &streamResult{}
	}
	open := len(ids)
	r.c.SetReadDeadline(time.Now().Add(timeout))
	defer r.c.SetReadDeadline(time.Time{})
	for open > 0 {
		f, err := r.fr.ReadFrame()
		if err != nil {
			for _, s := range res {
				if !s.ended {
					s.connErr = err
				}
			}
			return res
		}
		end := func(id uint32) {
			if s := res[id]; s != nil && !s.ended {
				s.ended = true
				open--
			}
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				r.fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				r.fr.WritePing(true, f.Data)
			}
		case *http2.MetaHeadersFrame:
			s := res[f.StreamID]
			if s == nil {
				continue
			}
			m := map[string]string{}
			for _, hf := range f.Fields {
				m[hf.Name] = hf.Value
			}
			if s.headers == nil {
				s.headers = m
			} else {
				s.trailers = m
			}
			if f.StreamEnded() {
				end(f.StreamID)
			}
		case *http2.DataFrame:
			s := res[f.StreamID]
			if s == nil {
				continue
			}
			s.data = append(s.data, f.Data()...)
			if ack && len(f.Data()) > 0 {
				r.fr.WriteWindowUpdate(0, uint32(len(f.Data())))
				r.fr.WriteWindowUpdate(f.StreamID, uint32(len(f.Data())))
			}
			if f.StreamEnded() {
				end(f.StreamID)
			}
		case *http2.RSTStreamFrame:
			if s := res[f.StreamID]; s != nil {
				s.gotRST, s.rst = true, f.ErrCode
				end(f.StreamID)
			}
		case *http2.GoAwayFrame:
			for id, s := range res {
				if id > f.LastStreamID && !s.ended {
					s.goaway = true
					end(id)
				}
			}
		}
	}
	return res
}

// call sends one request (headers, then body when non-nil) and reads its answer.
func (r *rawH2) call(id uint32, kv []string, body []byte, timeout time.Duration) *streamResult {
	r.t.Helper()
	if err := r.headers(id, body == nil, kv); err != nil {
		return &streamResult{connErr: err}
	}
	if body != nil {
		if err := r.writeData(id, body); err != nil {
			return &streamResult{connErr: err}
		}
	}
	return r.readStreams(timeout, true, id)[id]
}

// writeData writes body in frames of at most 16 KiB, END_STREAM on the last.
func (r *rawH2) writeData(id uint32, body []byte) error {
	for {
		n := min(len(body), 16384)
		if err := r.fr.WriteData(id, n == len(body), body[:n]); err != nil {
			return err
		}
		body = body[n:]
		if len(body) == 0 {
			return nil
		}
	}
}

// ---- hostile server side ----

// rawServer accepts connections and runs fn on each with a Framer that
// has already read the client preface and sent its SETTINGS.
type rawServer struct {
	ln   net.Listener
	done chan struct{}
}

type rawSrvConn struct {
	c   net.Conn
	fr  *http2.Framer
	enc *hpack.Encoder
	hb  bytes.Buffer
}

func (s *rawSrvConn) headers(id uint32, endStream bool, kv ...string) error {
	s.hb.Reset()
	for i := 0; i+1 < len(kv); i += 2 {
		s.enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	return s.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: s.hb.Bytes(), EndStream: endStream, EndHeaders: true})
}

// nextRequest reads frames until a request's HEADERS (answering SETTINGS
// and PING); it returns the stream id and the request headers.
func (s *rawSrvConn) nextRequest() (uint32, map[string]string, error) {
	for {
		f, err := s.fr.ReadFrame()
		if err != nil {
			return 0, nil, err
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				s.fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				s.fr.WritePing(true, f.Data)
			}
		case *http2.MetaHeadersFrame:
			m := map[string]string{}
			for _, hf := range f.Fields {
				m[hf.Name] = hf.Value
			}
			return f.StreamID, m, nil
		}
	}
}

func startRawServer(t testing.TB, fn func(s *rawSrvConn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rs := &rawServer{ln: ln, done: make(chan struct{})}
	conns := make(chan net.Conn, 1024)
	go func() {
		defer close(rs.done)
		var handlers = make(chan struct{}, 1024)
		n := 0
		for {
			c, err := ln.Accept()
			if err != nil {
				break
			}
			conns <- c
			n++
			go func() {
				defer func() { handlers <- struct{}{} }()
				defer c.Close()
				pre := make([]byte, len(http2.ClientPreface))
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				if _, err := io.ReadFull(c, pre); err != nil || string(pre) != http2.ClientPreface {
					return
				}
				c.SetReadDeadline(time.Time{})
				sc := &rawSrvConn{c: c, fr: http2.NewFramer(c, c)}
				sc.fr.ReadMetaHeaders = hpack.NewDecoder(1<<20, nil)
				sc.enc = hpack.NewEncoder(&sc.hb)
				sc.fr.WriteSettings()
				fn(sc)
			}()
		}
		// Close every connection still open and wait for their handlers.
		close(conns)
		for c := range conns {
			c.Close()
		}
		for range n {
			<-handlers
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		select {
		case <-rs.done:
		case <-time.After(10 * time.Second):
			t.Errorf("raw server's handlers did not end")
		}
	})
	return ln.Addr().String()
}

// readUntilEOF drains the connection (so that net.Conn closes end fn).
func (s *rawSrvConn) drain() {
	for {
		if _, err := s.fr.ReadFrame(); err != nil {
			return
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

var _ = strconv.Itoa

func newEnc(b *bytes.Buffer) *hpack.Encoder { return hpack.NewEncoder(b) }

func hf(k, v string) hpack.HeaderField { return hpack.HeaderField{Name: k, Value: v} }

// settle reads the server's SETTINGS and window updates for a while, so
// that bodies larger than 64 KiB may be sent.
func (r *rawH2) settle() {
	r.c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	defer r.c.SetReadDeadline(time.Time{})
	for {
		f, err := r.fr.ReadFrame()
		if err != nil {
			return
		}
		if sf, ok := f.(*http2.SettingsFrame); ok && !sf.IsAck() {
			r.fr.WriteSettingsAck()
		}
	}
}
