package grpcgo

// attack17: a gobrpc server attacked with raw HTTP/2 frames.

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"golang.org/x/net/http2"
	"google.golang.org/protobuf/proto"

	"github.com/gobrpc/gobrpc/channel"
	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/server"
	"github.com/gobrpc/gobrpc/testsupport/testpb"
)

// atkEcho: "deadline" answers the time left, "srvtimeout" the
// ServerTimeoutMs, "hold" hands done to Held, "sleep:<d>", "big:<n>" an
// n-byte answer; anything else is echoed.
type atkEcho struct {
	held chan func()
}

func (a *atkEcho) Echo(cntl *controller.Controller, req *testpb.EchoRequest, resp *testpb.EchoResponse, done func()) {
	msg := req.GetMessage()
	switch {
	case msg == "deadline":
		dl, ok := cntl.Context().Deadline()
		if !ok {
			resp.Message = proto.String("none")
		} else {
			resp.Message = proto.String(time.Until(dl).String())
		}
	case msg == "srvtimeout":
		resp.Message = proto.String(fmt.Sprint(cntl.ServerTimeoutMs()))
	case msg == "hold":
		resp.Message = proto.String("held")
		a.held <- done
		return
	case strings.HasPrefix(msg, "sleep:"):
		d, _ := time.ParseDuration(msg[len("sleep:"):])
		go func() {
			time.Sleep(d)
			resp.Message = proto.String(msg)
			done()
		}()
		return
	case strings.HasPrefix(msg, "big:"):
		var n int
		fmt.Sscanf(msg, "big:%d", &n)
		resp.Message = proto.String(strings.Repeat("b", n))
	default:
		resp.Message = req.Message
	}
	done()
}

type atkServer struct {
	srv  *server.Server
	addr string
	svc  *atkEcho
	once sync.Once
}

func (s *atkServer) stop() time.Duration {
	start := time.Now()
	s.once.Do(func() { s.srv.Stop(); s.srv.Join() })
	return time.Since(start)
}

func startAtk(t *testing.T, opts *server.Options) *atkServer {
	t.Helper()
	srv := server.New(opts)
	svc := &atkEcho{held: make(chan func(), 64)}
	require.NoError(t, testpb.RegisterEchoServiceServer(srv, svc))
	require.NoError(t, srv.Start("127.0.0.1:0"))
	s := &atkServer{srv: srv, addr: srv.ListenAddress().String(), svc: svc}
	t.Cleanup(func() {
		done := make(chan struct{})
		go func() { s.stop(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Errorf("Stop+Join hung")
		}
	})
	return s
}

// okCall checks the server still answers a normal gRPC call.
func okCall(t *testing.T, addr string) {
	t.Helper()
	opts := channel.DefaultOptions()
	opts.Protocol = "h2:grpc"
	opts.TimeoutMs = 3000
	ch, err := channel.New(addr, "", &opts)
	require.NoError(t, err)
	defer ch.Close()
	cntl := controller.New()
	resp := &testpb.EchoResponse{}
	testpb.NewEchoServiceStub(ch).Echo(cntl, &testpb.EchoRequest{Message: proto.String("alive")}, resp, nil)
	require.False(t, cntl.Failed(), cntl.ErrorText())
	require.Equal(t, "alive", resp.GetMessage())
}

func TestAtk17SrvPartialPrefaceThenSilence(t *testing.T) {
	s := startAtk(t, &server.Options{IdleTimeoutSec: 1})
	c, err := net.Dial("tcp", s.addr)
	require.NoError(t, err)
	defer c.Close()
	io.WriteString(c, "PRI * HTTP/2.0\r\n") // 16 of the 24 bytes
	start := time.Now()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = io.Copy(io.Discard, c)
	t.Logf("partial preface: connection ended after %v (err %v)", time.Since(start), err)
	assert.Less(t, time.Since(start), 5*time.Second, "a silent half-preface must be dropped within the sniff/idle deadline")
	okCall(t, s.addr)
}

func TestAtk17SrvPartialPrefaceStopJoinBounded(t *testing.T) {
	s := startAtk(t, nil) // default 30s sniff deadline
	var conns []net.Conn
	for range 20 {
		c, err := net.Dial("tcp", s.addr)
		require.NoError(t, err)
		defer c.Close()
		io.WriteString(c, "PRI * HTTP/2.0\r\n\r\nSM") // all but "\r\n\r\n"
		conns = append(conns, c)
	}
	// Full preface, SETTINGS, then nothing.
	for range 20 {
		r := dialRaw(t, s.addr)
		defer r.Close()
	}
	time.Sleep(200 * time.Millisecond)
	d := s.stop()
	t.Logf("Stop+Join with 40 silent h2 connections: %v", d)
	assert.Less(t, d, 3*time.Second)
}

func TestAtk17SrvPrefaceThenReset(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	s := startAtk(t, nil)
	for i := range 100 {
		c, err := net.Dial("tcp", s.addr)
		require.NoError(t, err)
		switch i % 3 {
		case 0:
			io.WriteString(c, http2.ClientPreface)
		case 1:
			io.WriteString(c, "PRI ")
		case 2:
			r := &rawH2{t: t, c: c, fr: http2.NewFramer(c, c)}
			io.WriteString(c, http2.ClientPreface)
			r.enc = newEnc(&r.hb)
			r.fr.WriteSettings()
			r.headers(1, false, grpcHeaders())
			r.fr.WriteData(1, false, grpcFrame(false, echoBytes("x"))[:3])
		}
		c.(*net.TCPConn).SetLinger(0)
		c.Close()
	}
	okCall(t, s.addr)
	assert.Less(t, s.stop(), 3*time.Second)
}

func TestAtk17SrvHeadersWithoutData(t *testing.T) {
	s := startAtk(t, nil)
	r := dialRaw(t, s.addr)
	defer r.Close()
	// END_STREAM on HEADERS: no message at all.
	res := r.call(1, grpcHeaders(), nil, 3*time.Second)
	t.Logf("HEADERS+END_STREAM: %v", res)
	assert.NotEqual(t, "0", res.status())
	assert.NotEqual(t, "<none>", res.status())
	// HEADERS without END_STREAM and no DATA: the server waits for the
	// body (60 s); Stop+Join must not wait that long.
	require.NoError(t, r.headers(3, false, grpcHeaders()))
	time.Sleep(100 * time.Millisecond)
	okCall(t, s.addr)
	d := s.stop()
	t.Logf("Stop+Join with a stream waiting for its body: %v", d)
	assert.Less(t, d, 5*time.Second)
}

func TestAtk17SrvHugeLengthPrefix(t *testing.T) {
	s := startAtk(t, nil)
	r := dialRaw(t, s.addr)
	defer r.Close()
	body := []byte{0, 0xff, 0xff, 0xff, 0xff, 1, 2, 3}
	res := r.call(1, grpcHeaders(), body, 3*time.Second)
	t.Logf("4 GiB prefix: %v", res)
	assert.Equal(t, "8", res.status())
	// Compressed flag 2 (invalid).
	res = r.call(3, grpcHeaders(), []byte{2, 0, 0, 0, 1, 0}, 3*time.Second)
	t.Logf("flag 2: %v", res)
	assert.NotEqual(t, "0", res.status())
	assert.NotEqual(t, "<none>", res.status())
	// A prefix claiming 100 bytes, then END_STREAM after 3.
	res = r.call(5, grpcHeaders(), []byte{0, 0, 0, 0, 100, 1, 2, 3}, 3*time.Second)
	t.Logf("short body: %v", res)
	assert.NotEqual(t, "0", res.status())
	// A truncated prefix.
	res = r.call(7, grpcHeaders(), []byte{0, 0}, 3*time.Second)
	t.Logf("truncated prefix: %v", res)
	assert.NotEqual(t, "0", res.status())
	assert.NotEqual(t, "<none>", res.status())
	okCall(t, s.addr)
}

func gz(b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	w.Write(b)
	w.Close()
	return buf.Bytes()
}

func TestAtk17SrvCompressionAttacks(t *testing.T) {
	s := startAtk(t, &server.Options{MaxBodySize: 1024})
	r := dialRaw(t, s.addr)
	defer r.Close()
	id := uint32(1)
	next := func() uint32 { v := id; id += 2; return v }

	res := r.call(next(), grpcHeaders(), grpcFrame(true, gz(echoBytes("x"))), 3*time.Second)
	t.Logf("compressed flag, no grpc-encoding: %v", res)
	assert.NotEqual(t, "0", res.status())
	assert.NotEqual(t, "<none>", res.status())

	res = r.call(next(), grpcHeaders("grpc-encoding", "snappy"), grpcFrame(true, []byte("zz")), 3*time.Second)
	t.Logf("unknown grpc-encoding: %v", res)
	assert.Equal(t, "12", res.status())

	res = r.call(next(), grpcHeaders("grpc-encoding", "gzip"), grpcFrame(true, []byte("not gzip at all")), 3*time.Second)
	t.Logf("bad gzip: %v", res)
	assert.NotEqual(t, "0", res.status())
	assert.NotEqual(t, "<none>", res.status())

	// A bomb: 1 MiB of 'a' in a proto, compressed to ~1 KiB; MaxBodySize 1 KiB.
	bomb := gz(echoBytes(strings.Repeat("a", 1<<20)))
	t.Logf("bomb compressed %d bytes", len(bomb))
	bomb2 := gz(echoBytes(strings.Repeat("a", 200<<10)))
	t.Logf("bomb2 compressed %d bytes", len(bomb2))
	res = r.call(next(), grpcHeaders("grpc-encoding", "gzip"), grpcFrame(true, bomb2), 3*time.Second)
	t.Logf("gzip bomb vs 1 KiB: %v", res)
	assert.Equal(t, "8", res.status())

	// Exactly at the limit, compressed: fine.
	plain := echoBytes(strings.Repeat("c", 1000))
	require.LessOrEqual(t, len(plain), 1024)
	res = r.call(next(), grpcHeaders("grpc-encoding", "gzip", "grpc-accept-encoding", "gzip"), grpcFrame(true, gz(plain)), 3*time.Second)
	t.Logf("gzip at limit: %v", res)
	assert.Equal(t, "0", res.status())

	// grpc-encoding gzip but flag 0: a plain message is fine.
	res = r.call(next(), grpcHeaders("grpc-encoding", "gzip"), grpcFrame(false, echoBytes("plain")), 3*time.Second)
	t.Logf("gzip header, plain message: %v", res)
	assert.Equal(t, "0", res.status())
	okCall(t, s.addr)
}

func TestAtk17SrvGzipBombDefaultLimit(t *testing.T) {
	// A bomb twice the limit (the default limit is 64 MiB: the same test
	// with 128 MiB took 20 s under -race, compressing it).
	s := startAtk(t, &server.Options{MaxBodySize: 4 << 20})
	r := dialRaw(t, s.addr)
	defer r.Close()
	r.settle()
	// 8 MiB of zeros in the string field (~8 KiB compressed).
	var buf bytes.Buffer
	w, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	// proto: field 1 (tag 0x0a), varint length 512 MiB.
	n := 8 << 20
	hdr := []byte{0x0a}
	for v := uint64(n); ; {
		if v < 0x80 {
			hdr = append(hdr, byte(v))
			break
		}
		hdr = append(hdr, byte(v)|0x80)
		v >>= 7
	}
	w.Write(hdr)
	zero := make([]byte, 1<<20)
	for range n >> 20 {
		w.Write(zero)
	}
	w.Close()
	t.Logf("8 MiB bomb: %d bytes compressed", buf.Len())
	start := time.Now()
	res := r.call(1, grpcHeaders("grpc-encoding", "gzip"), grpcFrame(true, buf.Bytes()), 20*time.Second)
	t.Logf("bomb vs default limit: %v in %v", res, time.Since(start))
	assert.Equal(t, "8", res.status())
}

func TestAtk17SrvTimeoutValues(t *testing.T) {
	s := startAtk(t, nil)
	r := dialRaw(t, s.addr)
	defer r.Close()
	id := uint32(1)
	for _, v := range []string{"", "999999999H", "-1m", "1x", "0m", "0n", "00000000S", "99999999H", "2562048H", "1", "m", "+5S", " 5S", "5 S", "100m"} {
		kv := grpcHeaders("grpc-timeout", v)
		res := r.call(id, kv, grpcFrame(false, echoBytes("deadline")), 3*time.Second)
		var got testpb.EchoResponse
		if len(res.data) > 5 {
			proto.Unmarshal(res.data[5:], &got)
		}
		res2 := r.call(id+2, kv, grpcFrame(false, echoBytes("srvtimeout")), 3*time.Second)
		var got2 testpb.EchoResponse
		if len(res2.data) > 5 {
			proto.Unmarshal(res2.data[5:], &got2)
		}
		t.Logf("grpc-timeout %-12q -> status=%s msg=%q deadline-left=%q ServerTimeoutMs=%q", v, res.status(), res.message(), got.GetMessage(), got2.GetMessage())
		id += 4
		switch v {
		case "0m", "0n", "00000000S":
			// grpc-go: a zero timeout is an expired deadline.
			assert.NotEqual(t, "none", got.GetMessage(), "grpc-timeout %q: an already-expired deadline served as no deadline", v)
		case "99999999H", "2562048H":
			assert.NotEqual(t, "1", got2.GetMessage(), "grpc-timeout %q: a saturated timeout is reported as 1 ms to the handler and the limiter", v)
		}
	}
	okCall(t, s.addr)
}

func TestAtk17SrvTwoMessagesInUnary(t *testing.T) {
	s := startAtk(t, nil)
	r := dialRaw(t, s.addr)
	defer r.Close()
	body := append(grpcFrame(false, echoBytes("first")), grpcFrame(false, echoBytes("second"))...)
	res := r.call(1, grpcHeaders(), body, 3*time.Second)
	var got testpb.EchoResponse
	if len(res.data) > 5 {
		proto.Unmarshal(res.data[5:], &got)
	}
	t.Logf("gobrpc, two messages: %v answer=%q", res, got.GetMessage())

	// grpc-go's server, for comparison.
	addr := startGRPCGo(t, grpcGoEcho("g", nil))
	r2 := dialRaw(t, addr)
	defer r2.Close()
	res2 := r2.call(1, grpcHeaders(), body, 3*time.Second)
	var got2 testpb.EchoResponse
	if len(res2.data) > 5 {
		proto.Unmarshal(res2.data[5:], &got2)
	}
	t.Logf("grpc-go, two messages: %v answer=%q", res2, got2.GetMessage())
	assert.NotEqual(t, "0", res.status(), "a unary request with two messages is answered OK (the second is silently dropped)")
}

func TestAtk17SrvMetadataGarbage(t *testing.T) {
	s := startAtk(t, nil)
	r := dialRaw(t, s.addr)
	defer r.Close()
	id := uint32(1)
	cases := [][]string{
		{"x-bad-bin", "!!!!not base64"},
		{"x-raw-bin", "\x00\xff\xfe"},
		{"x-text", "\xff\x00\x01"},
		{"x-bd-trace-id", "-1"},
		{"x-bd-trace-id", "999999999999999999999999"},
		{"authorization", strings.Repeat("A", 64<<10)},
		{"grpc-timeout", "1m", "grpc-timeout", "5S"},
		{"content-type", "application/grpc+json"},
		{":path", "/gobrpc.test.EchoService/Echo/extra"},
		{":path", "//Echo"},
	}
	for _, kv := range cases {
		res := r.call(id, grpcHeaders(kv...), grpcFrame(false, echoBytes("m")), 3*time.Second)
		t.Logf("headers %q: %v", clipS(fmt.Sprint(kv), 80), res)
		id += 2
		if res.connErr != nil {
			r.Close()
			r = dialRaw(t, s.addr)
			id = 1
		}
	}
	// Huge header list: 200 headers of 8 KiB (1.6 MiB).
	var kv []string
	for i := range 200 {
		kv = append(kv, fmt.Sprintf("x-h%d", i), strings.Repeat("v", 8<<10))
	}
	r3 := dialRaw(t, s.addr)
	defer r3.Close()
	// Send as HEADERS + CONTINUATIONs.
	r3.hb.Reset()
	for _, f := range grpcHeaders(kv...) {
		_ = f
	}
	hk := grpcHeaders(kv...)
	for i := 0; i+1 < len(hk); i += 2 {
		r3.enc.WriteField(hf(hk[i], hk[i+1]))
	}
	block := r3.hb.Bytes()
	first := block[:16384]
	rest := block[16384:]
	r3.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: first, EndStream: false})
	for len(rest) > 0 {
		n := min(16384, len(rest))
		r3.fr.WriteContinuation(1, n == len(rest), rest[:n])
		rest = rest[n:]
	}
	r3.writeData(1, grpcFrame(false, echoBytes("m")))
	res := r3.readStreams(3*time.Second, true, 1)[1]
	t.Logf("1.6 MiB of headers: %v", res)
	okCall(t, s.addr)
}

func clipS(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

func TestAtk17SrvManyStreams(t *testing.T) {
	s := startAtk(t, nil)
	r := dialRaw(t, s.addr)
	defer r.Close()
	var ids []uint32
	for i := range 1000 {
		id := uint32(2*i + 1)
		ids = append(ids, id)
		if err := r.headers(id, false, grpcHeaders()); err != nil {
			t.Logf("write headers %d: %v", id, err)
			break
		}
		if err := r.fr.WriteData(id, true, grpcFrame(false, echoBytes("sleep:200ms"))); err != nil {
			t.Logf("write data %d: %v", id, err)
			break
		}
	}
	res := r.readStreams(10*time.Second, true, ids...)
	counts := map[string]int{}
	for _, s := range res {
		switch {
		case s.gotRST:
			counts["rst:"+s.rst.String()]++
		case s.goaway:
			counts["goaway"]++
		case s.connErr != nil:
			counts["connerr"]++
		default:
			counts["status:"+s.status()]++
		}
	}
	t.Logf("1000 streams at once: %v", counts)
	okCall(t, s.addr)
}

// A client that never reads its answers (window 0) must not keep others
// from being served, nor Stop+Join from ending.
func TestAtk17SrvNonReadingClient(t *testing.T) {
	s := startAtk(t, nil)
	var hogs []*rawH2
	for range 4 {
		r := dialRaw(t, s.addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
		defer r.Close()
		for i := range 50 {
			r.headers(uint32(2*i+1), false, grpcHeaders())
			r.fr.WriteData(uint32(2*i+1), true, grpcFrame(false, echoBytes("big:100000")))
		}
		hogs = append(hogs, r)
	}
	// And one that never reads the socket at all, with big answers.
	r := dialRaw(t, s.addr)
	defer r.Close()
	for i := range 100 {
		r.headers(uint32(2*i+1), false, grpcHeaders())
		r.fr.WriteData(uint32(2*i+1), true, grpcFrame(false, echoBytes("big:500000")))
	}
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	for range 5 {
		okCall(t, s.addr)
	}
	t.Logf("5 calls beside non-reading clients: %v", time.Since(start))
	d := s.stop()
	t.Logf("Stop+Join with non-reading clients: %v", d)
	assert.Less(t, d, 10*time.Second)
}

// A handler that never calls done while its client resets the stream;
// the done comes later.
func TestAtk17SrvHoldThenReset(t *testing.T) {
	s := startAtk(t, nil)
	r := dialRaw(t, s.addr)
	defer r.Close()
	r.headers(1, false, grpcHeaders())
	r.fr.WriteData(1, true, grpcFrame(false, echoBytes("hold")))
	var done func()
	select {
	case done = <-s.svc.held:
	case <-time.After(3 * time.Second):
		t.Fatal("not held")
	}
	r.fr.WriteRSTStream(1, http2.ErrCodeCancel)
	time.Sleep(100 * time.Millisecond)
	okCall(t, s.addr)
	go func() { time.Sleep(300 * time.Millisecond); done() }()
	s.srv.Stop()
	start := time.Now()
	joined := make(chan struct{})
	go func() { s.stop(); close(joined) }()
	select {
	case <-joined:
	case <-time.After(5 * time.Second):
		t.Fatal("Join hung after the held call's done")
	}
	t.Logf("Join after hold+reset: %v", time.Since(start))
}

// Stop and Join with gRPC calls in flight: they are answered, Join ends.
func TestAtk17SrvStopJoinInFlight(t *testing.T) {
	s := startAtk(t, nil)
	opts := channel.DefaultOptions()
	opts.Protocol = "h2:grpc"
	opts.TimeoutMs = 5000
	for _, ct := range []string{"single", "pooled", "short"} {
		_ = ct
	}
	opts.ConnectionType = "pooled"
	ch, err := channel.New(s.addr, "", &opts)
	require.NoError(t, err)
	defer ch.Close()
	stub := testpb.NewEchoServiceStub(ch)
	const n = 30
	cntls := make([]controller.Controller, n)
	resps := make([]testpb.EchoResponse, n)
	for i := range n {
		cntls[i].SetMaxRetry(0)
		stub.Echo(&cntls[i], &testpb.EchoRequest{Message: proto.String("sleep:300ms")}, &resps[i], func() {})
	}
	time.Sleep(100 * time.Millisecond)
	d := s.stop()
	t.Logf("Stop+Join with %d calls in flight: %v", n, d)
	assert.Less(t, d, 3*time.Second)
	counts := map[string]int{}
	for i := range n {
		cntls[i].Join()
		if cntls[i].Failed() {
			counts[cntls[i].ErrorCode().Name()]++
			if counts[cntls[i].ErrorCode().Name()] == 1 {
				t.Logf("failed: %s", cntls[i].ErrorText())
			}
		} else {
			counts["ok"]++
			assert.Equal(t, "sleep:300ms", resps[i].GetMessage())
		}
	}
	t.Logf("outcomes: %v", counts)
	assert.Equal(t, n, counts["ok"], "calls in flight at Stop should be answered")
}
