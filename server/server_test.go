package server_test

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/gobrpc/gobrpc/channel"
	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/example/echo/echopb"
	"github.com/gobrpc/gobrpc/protocol/baidustd"
	"github.com/gobrpc/gobrpc/server"
	"github.com/gobrpc/gobrpc/testsupport/echotest"
	"github.com/gobrpc/gobrpc/testsupport/testpb"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, echotest.LeakOptions()...)
}

// rawConn talks baidu_std by hand, so tests control every byte.
type rawConn struct {
	t *testing.T
	net.Conn
}

func dialRaw(t *testing.T, srv *server.Server) *rawConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", srv.ListenAddress().String(), time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return &rawConn{t: t, Conn: c}
}

func (c *rawConn) send(b []byte) {
	c.t.Helper()
	_, err := c.Write(b)
	require.NoError(c.t, err)
}

// readFrame reads one response frame, or returns nil when the server
// closed the connection.
func (c *rawConn) readFrame() []byte {
	c.t.Helper()
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	hdr := make([]byte, 12)
	if _, err := io.ReadFull(c, hdr); err != nil {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			c.t.Fatal("timed out waiting for a response")
		}
		return nil
	}
	body := make([]byte, binary.BigEndian.Uint32(hdr[4:8]))
	_, err := io.ReadFull(c, body)
	require.NoError(c.t, err)
	return append(hdr, body...)
}

func (c *rawConn) expectClosed() {
	c.t.Helper()
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	_, err := io.ReadAll(c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		c.t.Fatal("the server did not close the connection")
	}
}

func decode(t *testing.T, frame []byte) (baidustd.Meta, []byte, []byte) {
	t.Helper()
	var m baidustd.Meta
	msg, att, err := baidustd.DecodeFrame(frame, &m)
	require.NoError(t, err)
	return m, msg, att
}

func echoPayload(t *testing.T, s string) []byte {
	b, err := proto.Marshal(&testpb.EchoRequest{Message: proto.String(s)})
	require.NoError(t, err)
	return b
}

func requestFrame(t *testing.T, service, method string, id int64, payload, att []byte) []byte {
	m := baidustd.Meta{HasRequest: true, ServiceName: service, MethodName: method, HasLogID: true,
		CorrelationID: id, AttachmentSize: int32(len(att))}
	b, err := baidustd.AppendFrame(nil, &m, payload, att)
	require.NoError(t, err)
	return b
}

// brpcEcho serves brpc's example.EchoService (example/echo/echopb), which
// the golden frames recorded from C++ brpc call, as brpc's echo_c++
// server does.
type brpcEcho struct{}

func (brpcEcho) Echo(cntl *controller.Controller, req *echopb.EchoRequest, resp *echopb.EchoResponse, done func()) {
	defer done()
	resp.Message = req.Message
	cntl.ResponseAttachment().Write(cntl.RequestAttachment().Bytes())
}

// The server answers each golden request recorded from C++ brpc with the
// exact bytes C++ brpc answered.
func TestGoldenResponsesByteForByte(t *testing.T) {
	srv := server.New(nil)
	require.NoError(t, echopb.RegisterEchoServiceServer(srv, brpcEcho{}))
	require.NoError(t, srv.Start("127.0.0.1:0"))
	t.Cleanup(func() { srv.Stop(); srv.Join() })
	dir := filepath.Join("..", "protocol", "baidustd", "testdata", "brpc-wire")
	for _, name := range []string{"plain", "attachment", "checksum", "compress-gzip", "compress-zlib", "compress-snappy", "nomethod", "noservice", "shortservice"} {
		t.Run(name, func(t *testing.T) {
			req, err := os.ReadFile(filepath.Join(dir, name+".request.bin"))
			require.NoError(t, err)
			want, err := os.ReadFile(filepath.Join(dir, name+".response.bin"))
			require.NoError(t, err)
			c := dialRaw(t, srv)
			c.send(req)
			got := c.readFrame()
			require.NotNil(t, got)
			// brpc's server ran on 127.0.0.1:8000; ours has another port,
			// which appears in error texts.
			wm, wmsg, watt := decode(t, want)
			if wm.ErrorText != "" {
				wm.ErrorText = replaceAddr(wm.ErrorText, "127.0.0.1:8000", srv.ListenAddress().String())
				want, err = baidustd.AppendFrame(nil, &wm, wmsg, watt)
				require.NoError(t, err)
			}
			assert.Equal(t, want, got)
		})
	}
}

func replaceAddr(s, from, to string) string {
	return string(bytes.ReplaceAll([]byte(s), []byte(from), []byte(to)))
}

func TestDispatchErrors(t *testing.T) {
	srv, _ := echotest.StartServer(t, nil)
	addr := srv.ListenAddress().String()
	cases := []struct {
		name, service, method string
		code                  controller.Errno
		text                  string
	}{
		{"unknown method", "gobrpc.test.EchoService", "Nope", controller.ENOMETHOD, "Fail to find method=gobrpc.test.EchoService/Nope"},
		{"unknown full service", "foo.Bar", "Echo", controller.ENOMETHOD, "Fail to find method=foo.Bar/Echo"},
		{"unknown short service", "Nope", "Echo", controller.ENOSERVICE, "Fail to find service=Nope"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := dialRaw(t, srv)
			c.send(requestFrame(t, tc.service, tc.method, 7, echoPayload(t, "x"), nil))
			m, msg, att := decode(t, c.readFrame())
			assert.Equal(t, int32(tc.code), m.ErrorCode)
			assert.Equal(t, "["+addr+"][E"+strconv.Itoa(int(tc.code))+"]"+tc.text, m.ErrorText)
			assert.Equal(t, int64(7), m.CorrelationID)
			assert.Empty(t, msg)
			assert.Empty(t, att)
			// The connection stays open and serves the next request.
			c.send(requestFrame(t, "EchoService", "Echo", 8, echoPayload(t, "short"), nil))
			m, msg, _ = decode(t, c.readFrame())
			assert.Equal(t, int32(0), m.ErrorCode)
			var resp testpb.EchoResponse
			require.NoError(t, proto.Unmarshal(msg, &resp))
			assert.Equal(t, "short", resp.GetMessage())
		})
	}
}

// Each kind of bad input gets brpc's error reply or closes only its own
// connection; another connection keeps being served.
func TestBadInput(t *testing.T) {
	srv, _ := echotest.StartServer(t, &server.Options{MaxBodySize: 1 << 20})
	good := requestFrame(t, "gobrpc.test.EchoService", "Echo", 1, echoPayload(t, "hi"), nil)
	header := func(body, meta uint32) []byte {
		h := []byte("PRPC\x00\x00\x00\x00\x00\x00\x00\x00")
		binary.BigEndian.PutUint32(h[4:], body)
		binary.BigEndian.PutUint32(h[8:], meta)
		return h
	}
	// A meta claiming an attachment longer than the payload.
	badAtt := func() []byte {
		m := baidustd.Meta{HasRequest: true, ServiceName: "gobrpc.test.EchoService", MethodName: "Echo",
			CorrelationID: 5, AttachmentSize: 1000}
		meta := baidustd.AppendMeta(nil, &m)
		payload := echoPayload(t, "hi")
		return append(append(header(uint32(len(meta)+len(payload)), uint32(len(meta))), meta...), payload...)
	}()
	cases := []struct {
		name      string
		input     []byte
		wantReply controller.Errno // 0: the connection is closed
	}{
		{"wrong magic", []byte("HELLO WORLD\r\n\r\n"), 0},
		{"short wrong magic", []byte("XY"), 0},
		{"meta_size > body_size", append(header(4, 10), "abcd"...), 0},
		{"oversize body", header(2<<20, 1), 0},
		{"meta that does not parse", append(header(5, 5), 0xff, 0xff, 0xff, 0xff, 0xff), 0},
		{"attachment_size > payload", badAtt, controller.EREQUEST},
		{"unknown service", requestFrame(t, "no.Such", "Echo", 9, nil, nil), controller.ENOMETHOD},
		{"request that does not parse", requestFrame(t, "gobrpc.test.EchoService", "Echo", 9, []byte{0x0a, 0xff}, nil), controller.EREQUEST},
		{"missing required field", requestFrame(t, "gobrpc.test.EchoService", "Echo", 9, nil, nil), controller.EREQUEST},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			other := dialRaw(t, srv) // a bystander connection
			c := dialRaw(t, srv)
			c.send(tc.input)
			if tc.wantReply == 0 {
				c.expectClosed()
			} else {
				m, _, _ := decode(t, c.readFrame())
				assert.Equal(t, int32(tc.wantReply), m.ErrorCode, m.ErrorText)
			}
			other.send(good)
			m, _, _ := decode(t, other.readFrame())
			assert.Equal(t, int32(0), m.ErrorCode)
		})
	}
	t.Run("truncated frame then close", func(t *testing.T) {
		for n := 1; n < len(good); n++ {
			c := dialRaw(t, srv)
			c.send(good[:n])
			c.Close()
		}
		other := dialRaw(t, srv)
		other.send(good)
		m, _, _ := decode(t, other.readFrame())
		assert.Equal(t, int32(0), m.ErrorCode)
	})
}

// A frame split over many writes and many frames in one write are both
// served.
func TestIncrementalAndPipelinedFrames(t *testing.T) {
	srv, _ := echotest.StartServer(t, nil)
	c := dialRaw(t, srv)
	frame := requestFrame(t, "gobrpc.test.EchoService", "Echo", 1, echoPayload(t, "split"), []byte("att"))
	for i := range frame {
		c.send(frame[i : i+1])
		time.Sleep(time.Millisecond)
	}
	m, _, att := decode(t, c.readFrame())
	assert.Equal(t, int64(1), m.CorrelationID)
	assert.Equal(t, "att", string(att))

	var many []byte
	for id := int64(10); id < 20; id++ {
		many = append(many, requestFrame(t, "gobrpc.test.EchoService", "Echo", id, echoPayload(t, "p"), nil)...)
	}
	c.send(many)
	seen := map[int64]bool{}
	for range 10 {
		m, _, _ := decode(t, c.readFrame())
		seen[m.CorrelationID] = true
	}
	assert.Len(t, seen, 10)
}

// Stop: requests in flight finish; new requests get ELOGOFF.
func TestStopDrainsInFlightAndRefusesNew(t *testing.T) {
	srv := server.New(nil)
	svc := &echotest.Service{}
	require.NoError(t, testpb.RegisterEchoServiceServer(srv, svc))
	require.NoError(t, srv.Start("127.0.0.1:0"))

	c := dialRaw(t, srv)
	c.send(requestFrame(t, "gobrpc.test.EchoService", "Echo", 1, echoPayload(t, "sleep:300ms"), nil))
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, srv.Stop())

	c.send(requestFrame(t, "gobrpc.test.EchoService", "Echo", 2, echoPayload(t, "late"), nil))
	replies := map[int64]int32{}
	for range 2 {
		m, _, _ := decode(t, c.readFrame())
		replies[m.CorrelationID] = m.ErrorCode
	}
	assert.Equal(t, int32(controller.ELOGOFF), replies[2])
	assert.Equal(t, int32(0), replies[1], "the request in flight must finish")

	joined := make(chan struct{})
	go func() { srv.Join(); close(joined) }()
	select {
	case <-joined:
	case <-time.After(5 * time.Second):
		t.Fatal("Join did not return")
	}
	c.expectClosed()
	_, err := net.DialTimeout("tcp", srv.ListenAddress().String(), 200*time.Millisecond)
	assert.Error(t, err, "a stopped server must not accept connections")
}

// OnStop hooks run once, first, while the server still answers normally:
// a naming service deregisters there before requests get ELOGOFF.
func TestOnStopRunsBeforeTheServerStopsAnswering(t *testing.T) {
	srv := server.New(nil)
	require.NoError(t, testpb.RegisterEchoServiceServer(srv, &echotest.Service{}))
	require.NoError(t, srv.Start("127.0.0.1:0"))
	c := dialRaw(t, srv)
	var order []string
	srv.OnStop(func() {
		order = append(order, "first")
		c.send(requestFrame(t, "gobrpc.test.EchoService", "Echo", 1, echoPayload(t, "during"), nil))
		m, _, _ := decode(t, c.readFrame())
		assert.Equal(t, int32(0), m.ErrorCode, "a request during an OnStop hook is served")
	})
	srv.OnStop(func() { order = append(order, "second") })
	require.NoError(t, srv.Stop())
	require.NoError(t, srv.Stop())
	srv.Join()
	assert.Equal(t, []string{"first", "second"}, order, "in order, once")
}

func TestRegisterServiceErrors(t *testing.T) {
	srv := server.New(nil)
	require.NoError(t, testpb.RegisterEchoServiceServer(srv, &echotest.Service{}))
	assert.ErrorContains(t, testpb.RegisterEchoServiceServer(srv, &echotest.Service{}), "already registered")
	assert.Error(t, testpb.RegisterEchoServiceServer(srv, nil))
	assert.Error(t, srv.RegisterService(&server.ServiceDesc{}))
	desc := &server.ServiceDesc{Descriptor: testpb.File_testsupport_testpb_echo_proto.Services().ByName("EchoService")}
	assert.ErrorContains(t, server.New(nil).RegisterService(desc), "no handler")
}

// A handler may call done later, from another goroutine, and many
// requests on one connection are served concurrently.
func TestConcurrentHandlersOnOneConnection(t *testing.T) {
	srv, svc := echotest.StartServer(t, nil)
	var ch channel.Channel
	require.NoError(t, ch.Init(srv.ListenAddress().String(), "", nil))
	defer ch.Close()
	stub := testpb.NewEchoServiceStub(&ch)
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cntl := controller.New()
			resp := &testpb.EchoResponse{}
			stub.Echo(cntl, &testpb.EchoRequest{Message: proto.String("sleep:100ms")}, resp, nil)
			assert.NoError(t, cntl.Err())
		}()
	}
	wg.Wait()
	assert.Greater(t, svc.MaxConcurrent.Load(), int64(1), "handlers on one connection must run concurrently")
}

// A handler's Context is cancelled when the client's connection breaks.
func TestContextCancelledWhenClientLeaves(t *testing.T) {
	srv, svc := echotest.StartServer(t, nil)
	c := dialRaw(t, srv)
	c.send(requestFrame(t, "gobrpc.test.EchoService", "Echo", 1, echoPayload(t, "wait-cancel"), nil))
	time.Sleep(50 * time.Millisecond)
	c.Close()
	select {
	case canceled := <-svc.Canceled:
		assert.True(t, canceled)
	case <-time.After(10 * time.Second):
		t.Fatal("the handler never finished")
	}
}

// A panicking handler is answered with EINTERNAL; the server lives on.
func TestHandlerPanicIsAnswered(t *testing.T) {
	srv, _ := echotest.StartServer(t, nil)
	c := dialRaw(t, srv)
	c.send(requestFrame(t, "gobrpc.test.EchoService", "Echo", 1, echoPayload(t, "panic"), nil))
	m, _, _ := decode(t, c.readFrame())
	assert.Equal(t, int32(controller.EINTERNAL), m.ErrorCode)
	assert.Contains(t, m.ErrorText, "panicked")
	c.send(requestFrame(t, "gobrpc.test.EchoService", "Echo", 2, echoPayload(t, "alive"), nil))
	m, _, _ = decode(t, c.readFrame())
	assert.Equal(t, int32(0), m.ErrorCode)
}
