package server_test

// Attacks on the Go face of the server from raw sockets and real clients:
// timeout_ms delivered in the request meta, the handler's cntl.Context(),
// trace ids, user_fields, authentication_data, the Authenticator on
// baidu_std and HTTP, and server interceptors. Every helper here is
// prefixed "gfs" so as not to collide with the other test files of package
// server_test.
//
// Tests whose name contains "Finding" demonstrated a defect (the
// "FINDING n:" comment above each says what it was); each was fixed, and
// its test failed before the fix and passes since. The others are attacks
// that held.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/gobrpc/gobrpc/auth"
	"github.com/gobrpc/gobrpc/channel"
	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/protocol/baidustd"
	"github.com/gobrpc/gobrpc/rpcz"
	"github.com/gobrpc/gobrpc/server"
	"github.com/gobrpc/gobrpc/testsupport/testpb"
)

// ---------------------------------------------------------------------------
// Helpers.

const gfsService = "gobrpc.test.EchoService"

func gfsStart(t *testing.T, opts *server.Options, impl testpb.EchoServiceServer) *server.Server {
	t.Helper()
	srv := server.New(opts)
	require.NoError(t, testpb.RegisterEchoServiceServer(srv, impl))
	require.NoError(t, srv.Start("127.0.0.1:0"))
	t.Cleanup(func() {
		joined := make(chan struct{})
		go func() { srv.Stop(); srv.Join(); close(joined) }()
		select {
		case <-joined:
		case <-time.After(10 * time.Second):
			t.Error("Stop+Join did not return within 10 s")
		}
	})
	return srv
}

func gfsDial(t *testing.T, srv *server.Server) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", srv.ListenAddress().String(), 5*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// gfsMeta is an RpcMeta with a request for gfsService.Echo: reqExtra is
// appended to the RpcRequestMeta, metaExtra to the RpcMeta.
func gfsMeta(id int64, reqExtra, metaExtra []byte) []byte {
	var rq []byte
	rq = protowire.AppendTag(rq, 1, protowire.BytesType)
	rq = protowire.AppendString(rq, gfsService)
	rq = protowire.AppendTag(rq, 2, protowire.BytesType)
	rq = protowire.AppendString(rq, "Echo")
	rq = append(rq, reqExtra...)
	var m []byte
	m = protowire.AppendTag(m, 1, protowire.BytesType)
	m = protowire.AppendBytes(m, rq)
	m = protowire.AppendTag(m, 4, protowire.VarintType)
	m = protowire.AppendVarint(m, uint64(id))
	return append(m, metaExtra...)
}

func gfsVarint(num protowire.Number, v uint64) []byte {
	return protowire.AppendVarint(protowire.AppendTag(nil, num, protowire.VarintType), v)
}

func gfsBytes(num protowire.Number, v []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), v)
}

// gfsUserField is one RpcMeta.user_fields entry (field 9).
func gfsUserField(k, v string) []byte {
	var e []byte
	e = protowire.AppendTag(e, 1, protowire.BytesType)
	e = protowire.AppendString(e, k)
	e = protowire.AppendTag(e, 2, protowire.BytesType)
	e = protowire.AppendString(e, v)
	return gfsBytes(9, e)
}

func gfsFrame(meta, payload []byte) []byte {
	h := make([]byte, 12, 12+len(meta)+len(payload))
	copy(h, "PRPC")
	binary.BigEndian.PutUint32(h[4:], uint32(len(meta)+len(payload)))
	binary.BigEndian.PutUint32(h[8:], uint32(len(meta)))
	return append(append(h, meta...), payload...)
}

func gfsPayload(s string) []byte {
	b, _ := proto.Marshal(&testpb.EchoRequest{Message: proto.String(s)})
	return b
}

func gfsWrite(c net.Conn, b []byte) {
	c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	c.Write(b) // the server may close first
	c.SetWriteDeadline(time.Time{})
}

// gfsRead reads one frame; nil when the connection closed first.
func gfsRead(t *testing.T, c net.Conn, timeout time.Duration) (*baidustd.Meta, []byte) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(timeout))
	hdr := make([]byte, 12)
	if _, err := io.ReadFull(c, hdr); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("no answer within %v", timeout)
		}
		return nil, nil
	}
	body := make([]byte, binary.BigEndian.Uint32(hdr[4:8]))
	_, err := io.ReadFull(c, body)
	require.NoError(t, err)
	var m baidustd.Meta
	msg, _, err := baidustd.DecodeFrame(append(hdr, body...), &m)
	require.NoError(t, err)
	return &m, msg
}

// gfsExpectClosed checks that the server closes c, and returns what it
// sent before.
func gfsExpectClosed(t *testing.T, c net.Conn) []byte {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server did not close the connection (got %d bytes)", len(got))
	}
	return got
}

// gfsSeen is a service recording what its handler saw.
type gfsSeen struct {
	testpb.UnimplementedEchoServiceServer
	mu   sync.Mutex
	seen map[string]gfsSaw
}

type gfsSaw struct {
	timeoutMs   int64
	hasDeadline bool
	left        time.Duration
	ctxDone     bool
	fields      int
	auth        *auth.Context
}

func (s *gfsSeen) Echo(cntl *controller.Controller, req *testpb.EchoRequest, resp *testpb.EchoResponse, done func()) {
	defer done()
	ctx := cntl.Context()
	dl, ok := ctx.Deadline()
	saw := gfsSaw{timeoutMs: cntl.ServerTimeoutMs(), hasDeadline: ok, ctxDone: ctx.Err() != nil,
		fields: len(cntl.RequestUserFields()), auth: cntl.AuthContext()}
	if ok {
		saw.left = time.Until(dl)
	}
	s.mu.Lock()
	if s.seen == nil {
		s.seen = map[string]gfsSaw{}
	}
	s.seen[req.GetMessage()] = saw
	s.mu.Unlock()
	resp.Message = req.Message
}

func (s *gfsSeen) get(m string) (gfsSaw, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.seen[m]
	return v, ok
}

// ---------------------------------------------------------------------------
// timeout_ms (held).

// The remaining timeout a client delivers, at every edge of its int32:
// negative (sign-extended, 10 bytes on the wire), 0, 1, 2^31-1, a 64-bit
// value (truncated to int32 as protobuf does, as brpc reads it), and
// repeated (the last wins). None panics; each is answered; the handler's
// context has exactly the deadline the value means. The "timeout"
// concurrency limiter takes them too.
func TestGoFaceAttackTimeoutMsEdges(t *testing.T) {
	svc := &gfsSeen{}
	srv := server.New(nil)
	require.NoError(t, testpb.RegisterEchoServiceServer(srv, svc))
	require.NoError(t, srv.MaxConcurrencyOf(gfsService+".Echo").Set("timeout"))
	require.NoError(t, srv.Start("127.0.0.1:0"))
	t.Cleanup(func() { srv.Stop(); srv.Join() })
	c := gfsDial(t, srv)

	neg := func(v int64) uint64 { return uint64(v) }
	cases := []struct {
		name    string
		extra   []byte
		wantMs  int64 // ServerTimeoutMs
		wantDl  bool
		minLeft time.Duration
	}{
		{"negative", gfsVarint(8, neg(-5)), -1, false, 0},
		{"min-int32", gfsVarint(8, neg(math.MinInt32)), -1, false, 0},
		{"zero", gfsVarint(8, 0), -1, false, 0},
		{"one", gfsVarint(8, 1), 1, true, -time.Hour},
		{"max-int32", gfsVarint(8, math.MaxInt32), math.MaxInt32, true, 24 * 24 * time.Hour},
		{"64-bit", gfsVarint(8, 1<<32+7), 7, true, -time.Hour},
		{"max-uint64", gfsVarint(8, math.MaxUint64), -1, false, 0},
		{"repeated", append(gfsVarint(8, 5), gfsVarint(8, 60000)...), 60000, true, 30 * time.Second},
		{"wrong-wire-type", gfsBytes(8, []byte("xyz")), -1, false, 0},
	}
	for i, tc := range cases {
		id := int64(100 + i)
		gfsWrite(c, gfsFrame(gfsMeta(id, tc.extra, nil), gfsPayload(tc.name)))
		m, _ := gfsRead(t, c, 5*time.Second)
		require.NotNil(t, m, "%s: the server closed the connection", tc.name)
		assert.Equal(t, id, m.CorrelationID)
		assert.Zero(t, m.ErrorCode, "%s: %s", tc.name, m.ErrorText)
		saw, ok := svc.get(tc.name)
		require.True(t, ok, tc.name)
		assert.Equal(t, tc.wantMs, saw.timeoutMs, tc.name)
		assert.Equal(t, tc.wantDl, saw.hasDeadline, tc.name)
		if tc.wantDl {
			assert.Greater(t, saw.left, tc.minLeft, tc.name)
		}
	}
}

// ---------------------------------------------------------------------------
// The handler's context.

// gfsCtxProbe checks, in the background, whether the handler's context
// ends once the call has been answered: with the context taken before
// done ("before") or first asked for after done ("after").
type gfsCtxProbe struct {
	testpb.UnimplementedEchoServiceServer
	ended chan string // "<message> ended" or "<message> still live"
}

func (p *gfsCtxProbe) Echo(cntl *controller.Controller, req *testpb.EchoRequest, resp *testpb.EchoResponse, done func()) {
	m := req.GetMessage()
	resp.Message = req.Message
	var ctx context.Context
	if strings.HasPrefix(m, "before") {
		ctx = cntl.Context()
		done()
	} else {
		done()
		ctx = cntl.Context()
	}
	go func() {
		select {
		case <-ctx.Done():
			p.ended <- m + " ended"
		case <-time.After(2 * time.Second):
			p.ended <- m + " still live"
		}
	}()
}

// FINDING 13: the handler's cntl.Context() is not cancelled when the call
// is answered, contrary to Controller.Context's doc and docs/en/go.md
// ("cancelled ... once the call is answered"), in two cases:
//
//   - the client sent no timeout_ms (a client with no deadline, brpc's
//     default client, -baidu_std_protocol_deliver_timeout_ms=false, HTTP
//     is fine: net/http ends it): ctrl.State.ServerContext builds the
//     context with context.WithDeadline only when there is a deadline, so
//     s.cancel stays nil and EndServerContext has nothing to cancel. Work
//     a handler started with it (downstream calls with no deadline of
//     their own) then runs until the client's connection closes, which for
//     a pooled or single connection may be never.
//   - the handler first asks for cntl.Context() after done (e.g. from a
//     goroutine that outlives the answer): EndServerContext already ran,
//     so ServerContext builds a fresh, live context; with a deadline it
//     also registers a child of the connection's context and a timer that
//     stay until the deadline (up to 2^31-1 ms, ~24 days) or the close.
//
// ServerContext should always derive a cancelable context
// (context.WithCancel when there is no deadline), and once the call ended
// return an already-cancelled one.
func TestGoFaceAttackFindingServerContextLiveAfterAnswer(t *testing.T) {
	probe := &gfsCtxProbe{ended: make(chan string, 8)}
	srv := gfsStart(t, nil, probe)
	for _, deliver := range []struct {
		name      string
		timeoutMs int32
	}{{"no-deadline", -1}, {"deadline", 60000}} {
		opts := channel.DefaultOptions()
		opts.TimeoutMs = deliver.timeoutMs
		var ch channel.Channel
		require.NoError(t, ch.Init(srv.ListenAddress().String(), "", &opts))
		client := testpb.NewEchoServiceClient(&ch)
		for _, when := range []string{"before", "after"} {
			m := when + " " + deliver.name
			_, err := client.Echo(context.Background(), &testpb.EchoRequest{Message: proto.String(m)})
			require.NoError(t, err)
			select {
			case got := <-probe.ended:
				assert.Equal(t, m+" ended", got, "the handler's context outlived the answer")
			case <-time.After(5 * time.Second):
				t.Fatal("the probe did not report")
			}
		}
		ch.Close()
	}
}

// The context ends at the delivered deadline even when the handler never
// answers (a stuck interceptor), and when the client's connection
// breaks; it carries the deadline the client sent. Held.
func TestGoFaceAttackServerContextEndsAtDeadlineAndBreak(t *testing.T) {
	held := make(chan func(), 4)
	ctxEnded := make(chan error, 4)
	srv := gfsStart(t, &server.Options{Interceptors: []server.Interceptor{
		func(cntl *controller.Controller, req, resp proto.Message, done func(), next server.Handler) {
			ctx := cntl.Context()
			go func() { <-ctx.Done(); ctxEnded <- ctx.Err() }()
			held <- done // "forgets" to answer; the test answers at the end
		},
	}}, &gfsSeen{})
	c := gfsDial(t, srv)
	gfsWrite(c, gfsFrame(gfsMeta(1, gfsVarint(8, 150), nil), gfsPayload("deadline")))
	select {
	case err := <-ctxEnded:
		assert.ErrorIs(t, err, context.DeadlineExceeded)
	case <-time.After(5 * time.Second):
		t.Fatal("the handler's context did not end at the 150 ms deadline")
	}
	gfsWrite(c, gfsFrame(gfsMeta(2, nil, nil), gfsPayload("break")))
	var dones []func()
	dones = append(dones, <-held, <-held)
	c.Close()
	select {
	case err := <-ctxEnded:
		assert.ErrorIs(t, err, context.Canceled)
	case <-time.After(5 * time.Second):
		t.Fatal("the handler's context did not end when the connection broke")
	}
	for _, d := range dones {
		d()
		d() // twice: ignored
	}
}

// ---------------------------------------------------------------------------
// Trace ids (held).

// Garbage trace ids (all bits set, a span without a trace, a trace
// without a span, 10-byte varints) are taken as they are: served, the
// server span carries them, the handler's downstream call joins that
// trace, /rpcz?trace= finds it. Nothing panics.
func TestGoFaceAttackGarbageTraceIDs(t *testing.T) {
	var mu sync.Mutex
	var spans []rpcz.Span
	rpcz.SetHook(func(s rpcz.Span) { mu.Lock(); spans = append(spans, s); mu.Unlock() })
	t.Cleanup(func() { rpcz.SetHook(nil) })

	leaf := gfsStart(t, nil, &gfsSeen{})
	leafClient := func() testpb.EchoServiceClient {
		opts := channel.DefaultOptions()
		opts.ConnectionGroup = "gfs-trace"
		var ch channel.Channel
		require.NoError(t, ch.Init(leaf.ListenAddress().String(), "", &opts))
		t.Cleanup(func() { ch.Close() })
		return testpb.NewEchoServiceClient(&ch)
	}()
	relay := gfsStart(t, nil, &gfsRelay{next: leafClient})
	c := gfsDial(t, relay)
	cases := []struct {
		name                 string
		trace, span, parent  uint64
		wantTrace, wantChild bool
	}{
		{"all-ones", math.MaxUint64, math.MaxUint64, math.MaxUint64, true, true},
		{"span-no-trace", 0, 12345, 0, true, true}, // a new trace (the hook is on)
		{"trace-no-span", 777, 0, 0, true, true},
		{"negative", uint64(1 << 63), uint64(1<<63 + 1), 1, true, true},
	}
	for i, tc := range cases {
		var extra []byte
		for _, f := range []struct {
			n protowire.Number
			v uint64
		}{{4, tc.trace}, {5, tc.span}, {6, tc.parent}} {
			if f.v != 0 {
				extra = append(extra, gfsVarint(f.n, f.v)...)
			}
		}
		gfsWrite(c, gfsFrame(gfsMeta(int64(i+1), extra, nil), gfsPayload(tc.name)))
		m, _ := gfsRead(t, c, 5*time.Second)
		require.NotNil(t, m, tc.name)
		assert.Zero(t, m.ErrorCode, "%s: %s", tc.name, m.ErrorText)
	}
	// Each relay server span has the trace it was sent (or a new one),
	// and the relay's downstream client span is in that trace.
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(spans) >= 3*len(cases)
	}, 5*time.Second, 5*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	traces := map[int64]int{}
	for _, s := range spans {
		traces[s.TraceID]++
	}
	assert.Equal(t, 3, traces[-1], "all-ones: the relay's server span, its client span and the leaf's server span")
	assert.Equal(t, 3, traces[777])
	assert.Equal(t, 3, traces[math.MinInt64])
	for id, n := range traces {
		assert.Equal(t, 3, n, "trace %x", uint64(id))
	}

	resp, err := http.Get("http://" + relay.ListenAddress().String() + "/rpcz?trace=ffffffffffffffff")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	_ = body // rpcz is off: the page may say so; what matters is no panic
	for _, q := range []string{"zz", "-1", strings.Repeat("f", 100), "%00"} {
		resp, err := http.Get("http://" + relay.ListenAddress().String() + "/rpcz?trace=" + q)
		require.NoError(t, err)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		assert.NotEqual(t, 500, resp.StatusCode, q)
	}
}

type gfsRelay struct {
	testpb.UnimplementedEchoServiceServer
	next testpb.EchoServiceClient
}

func (r *gfsRelay) Echo(cntl *controller.Controller, req *testpb.EchoRequest, resp *testpb.EchoResponse, done func()) {
	defer done()
	out, err := r.next.Echo(cntl.Context(), req)
	if err != nil {
		cntl.SetFailed(controller.EINTERNAL, "downstream: %v", err)
		return
	}
	resp.Message = out.Message
}

// ---------------------------------------------------------------------------
// user_fields (held).

// Many user fields, huge ones, malformed ones and ones of the wrong wire
// type, against a small MaxBodySize: what exceeds it closes the
// connection without an answer; the rest is served with exactly what was
// sent; a malformed entry closes the connection; another connection is
// never disturbed.
func TestGoFaceAttackUserFields(t *testing.T) {
	svc := &gfsSeen{}
	srv := gfsStart(t, &server.Options{MaxBodySize: 64 << 10}, svc)

	// 2000 distinct fields within the limit: all of them reach the handler.
	var many []byte
	for i := range 2000 {
		many = append(many, gfsUserField(fmt.Sprintf("k%d", i), "v")...)
	}
	c := gfsDial(t, srv)
	gfsWrite(c, gfsFrame(gfsMeta(1, nil, many), gfsPayload("many")))
	m, _ := gfsRead(t, c, 5*time.Second)
	require.NotNil(t, m)
	assert.Zero(t, m.ErrorCode, m.ErrorText)
	saw, _ := svc.get("many")
	assert.Equal(t, 2000, saw.fields)

	// Duplicates, empty keys and values, invalid UTF-8, a field 9 of the
	// wrong wire type (skipped), an entry with unknown inner fields.
	var odd []byte
	odd = append(odd, gfsUserField("dup", "1")...)
	odd = append(odd, gfsUserField("dup", "2")...)
	odd = append(odd, gfsUserField("", "")...)
	odd = append(odd, gfsUserField("\xff\xfe", "\x00\x01")...)
	odd = append(odd, gfsVarint(9, 5)...)
	odd = append(odd, gfsBytes(9, append(gfsVarint(3, 1), gfsBytes(1, []byte("k3"))...))...)
	gfsWrite(c, gfsFrame(gfsMeta(2, nil, odd), gfsPayload("odd")))
	m, _ = gfsRead(t, c, 5*time.Second)
	require.NotNil(t, m)
	assert.Zero(t, m.ErrorCode, m.ErrorText)
	saw, _ = svc.get("odd")
	assert.Equal(t, 4, saw.fields, "dup, \"\", the invalid UTF-8 key and k3")

	// Over MaxBodySize: 100000 fields, or one field of 1 MiB.
	other := gfsDial(t, srv)
	for _, big := range [][]byte{
		func() []byte {
			var b []byte
			for i := range 100000 {
				b = append(b, gfsUserField(fmt.Sprintf("k%d", i), "")...)
			}
			return b
		}(),
		gfsUserField("big", strings.Repeat("x", 1<<20)),
	} {
		bc := gfsDial(t, srv)
		gfsWrite(bc, gfsFrame(gfsMeta(3, nil, big), gfsPayload("big")))
		assert.Empty(t, gfsExpectClosed(t, bc), "a frame over MaxBodySize is not answered")
	}
	_, served := svc.get("big")
	assert.False(t, served)

	// A truncated entry: the frame does not parse, the connection closes.
	bad := gfsBytes(9, []byte{0x0a, 0x10, 'k'}) // key claims 16 bytes, has 1
	bc := gfsDial(t, srv)
	gfsWrite(bc, gfsFrame(gfsMeta(4, nil, bad), gfsPayload("bad")))
	gfsExpectClosed(t, bc)

	// Another connection was not disturbed.
	gfsWrite(other, gfsFrame(gfsMeta(5, nil, nil), gfsPayload("after")))
	m, _ = gfsRead(t, other, 5*time.Second)
	require.NotNil(t, m)
	assert.Zero(t, m.ErrorCode, m.ErrorText)
}

// ---------------------------------------------------------------------------
// authentication_data and raw clients against an Authenticator (held).

func TestGoFaceAttackAuthenticationData(t *testing.T) {
	t.Run("10MB-credential", func(t *testing.T) {
		svc := &gfsSeen{}
		srv := gfsStart(t, &server.Options{Auth: &gfsEchoingAuth{}}, svc)
		c := gfsDial(t, srv)
		huge := strings.Repeat("A", 10<<20)
		gfsWrite(c, gfsFrame(gfsMeta(1, nil, gfsBytes(7, []byte(huge))), gfsPayload("x")))
		m, _ := gfsRead(t, c, 10*time.Second)
		require.NotNil(t, m, "no ERPCAUTH answer")
		assert.Equal(t, int32(controller.ERPCAUTH), m.ErrorCode)
		assert.Less(t, len(m.ErrorText), 4096, "the refusal does not echo a 10 MB credential")
		gfsExpectClosed(t, c)
		_, served := svc.get("x")
		assert.False(t, served)
	})
	t.Run("over-MaxBodySize", func(t *testing.T) {
		srv := gfsStart(t, &server.Options{Auth: auth.Token("s3cret"), MaxBodySize: 1 << 20}, &gfsSeen{})
		c := gfsDial(t, srv)
		gfsWrite(c, gfsFrame(gfsMeta(1, nil, gfsBytes(7, make([]byte, 10<<20))), gfsPayload("x")))
		assert.Empty(t, gfsExpectClosed(t, c))
	})
	t.Run("no-Authenticator-ignores-it", func(t *testing.T) {
		svc := &gfsSeen{}
		srv := gfsStart(t, nil, svc)
		c := gfsDial(t, srv)
		gfsWrite(c, gfsFrame(gfsMeta(1, nil, gfsBytes(7, make([]byte, 10<<20))), gfsPayload("x")))
		m, _ := gfsRead(t, c, 10*time.Second)
		require.NotNil(t, m)
		assert.Zero(t, m.ErrorCode, m.ErrorText)
		saw, _ := svc.get("x")
		assert.Nil(t, saw.auth)
	})
}

// gfsEchoingAuth refuses every credential with an error quoting it whole:
// the server must clip it.
type gfsEchoingAuth struct{}

func (gfsEchoingAuth) GenerateCredential() (string, error) { return "", errors.New("server side only") }
func (gfsEchoingAuth) VerifyCredential(c string, _ net.Addr) (*auth.Context, error) {
	return nil, errors.New("bad credential " + c)
}

func TestGoFaceAttackRawClientsAgainstAuth(t *testing.T) {
	svc := &gfsSeen{}
	srv := gfsStart(t, &server.Options{Auth: auth.Token("s3cret")}, svc)
	cred := gfsBytes(7, []byte("s3cret"))

	t.Run("garbage-before-auth", func(t *testing.T) {
		c := gfsDial(t, srv)
		gfsWrite(c, []byte("GARBAGE GARBAGE GARBAGE\r\n\r\n"))
		gfsExpectClosed(t, c)
	})
	t.Run("response-meta-first", func(t *testing.T) {
		c := gfsDial(t, srv)
		m := baidustd.Meta{HasResponse: true, CorrelationID: 1}
		f, err := baidustd.AppendFrame(nil, &m, nil, nil)
		require.NoError(t, err)
		gfsWrite(c, f)
		gfsExpectClosed(t, c)
	})
	t.Run("garbage-after-auth", func(t *testing.T) {
		c := gfsDial(t, srv)
		gfsWrite(c, gfsFrame(gfsMeta(1, nil, cred), gfsPayload("authed")))
		m, _ := gfsRead(t, c, 5*time.Second)
		require.NotNil(t, m)
		assert.Zero(t, m.ErrorCode, m.ErrorText)
		saw, _ := svc.get("authed")
		require.NotNil(t, saw.auth)
		assert.Equal(t, "token", saw.auth.User)
		// Later requests need no credential; a wrong one is not re-checked
		// (as brpc); then garbage closes the connection.
		gfsWrite(c, gfsFrame(gfsMeta(2, nil, gfsBytes(7, []byte("wrong"))), gfsPayload("second")))
		m, _ = gfsRead(t, c, 5*time.Second)
		require.NotNil(t, m)
		assert.Zero(t, m.ErrorCode, m.ErrorText)
		gfsWrite(c, []byte("PRPC\xff\xff\xff\xff\x00\x00\x00\x00"))
		gfsExpectClosed(t, c)
	})
	t.Run("flood-after-refusal", func(t *testing.T) {
		c := gfsDial(t, srv)
		var flood []byte
		flood = append(flood, gfsFrame(gfsMeta(1, nil, gfsBytes(7, []byte("wrong"))), gfsPayload("refused-0"))...)
		for i := 1; i < 500; i++ {
			flood = append(flood, gfsFrame(gfsMeta(int64(i+1), nil, cred), gfsPayload(fmt.Sprintf("refused-%d", i)))...)
		}
		gfsWrite(c, flood)
		all := gfsExpectClosed(t, c)
		// Every request read before the close is answered ERPCAUTH (none
		// gets an EOF a client would retry), and none is served.
		for len(all) > 0 {
			n, err := baidustd.Cut(all, 1<<20)
			require.NoError(t, err)
			var m baidustd.Meta
			_, _, err = baidustd.DecodeFrame(all[:n], &m)
			require.NoError(t, err)
			assert.Equal(t, int32(1004), m.ErrorCode)
			all = all[n:]
		}
		for i := range 500 {
			_, served := svc.get(fmt.Sprintf("refused-%d", i))
			assert.False(t, served, i)
		}
	})
	t.Run("many-connections-at-once", func(t *testing.T) {
		var wg sync.WaitGroup
		var bad atomic.Int64
		for i := range 40 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := net.DialTimeout("tcp", srv.ListenAddress().String(), 5*time.Second)
				if err != nil {
					bad.Add(1)
					return
				}
				defer c.Close()
				good := i%2 == 0
				extra := gfsBytes(7, []byte("nope"))
				if good {
					extra = cred
				}
				gfsWrite(c, gfsFrame(gfsMeta(int64(i), nil, extra), gfsPayload(fmt.Sprintf("conn-%d", i))))
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				hdr := make([]byte, 12)
				if _, err := io.ReadFull(c, hdr); err != nil {
					bad.Add(1)
					return
				}
				body := make([]byte, binary.BigEndian.Uint32(hdr[4:]))
				if _, err := io.ReadFull(c, body); err != nil {
					bad.Add(1)
					return
				}
				var m baidustd.Meta
				if _, _, err := baidustd.DecodeFrame(append(hdr, body...), &m); err != nil {
					bad.Add(1)
					return
				}
				if good != (m.ErrorCode == 0) || (!good && m.ErrorCode != int32(controller.ERPCAUTH)) {
					bad.Add(1)
				}
			}()
		}
		wg.Wait()
		assert.Zero(t, bad.Load())
	})
	t.Run("http-authorization", func(t *testing.T) {
		base := "http://" + srv.ListenAddress().String() + "/" + gfsService + "/Echo"
		for _, h := range []string{"", "wrong", "Bearer s3cret", "s3cret\x00", strings.Repeat("s", 64<<10)} {
			req, err := http.NewRequest("POST", base, strings.NewReader(`{"message":"http"}`))
			require.NoError(t, err)
			if h != "" {
				req.Header.Set("Authorization", h)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				continue // the client refused to send it (a NUL byte)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			assert.Contains(t, []int{401, 403, 431}, resp.StatusCode, "%.20q", h)
		}
		req, _ := http.NewRequest("POST", base, strings.NewReader(`{"message":"http-ok"}`))
		req.Header.Set("Authorization", "s3cret")
		req.Header.Set("x-bd-trace-id", "-1")
		req.Header.Set("x-bd-span-id", strings.Repeat("9", 40))
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		assert.Equal(t, 200, resp.StatusCode)
	})
}

// ---------------------------------------------------------------------------
// Server interceptors (held).

// Interceptors that call done twice, call next and done, call next twice,
// answer later from another goroutine, reject with code 0, panic before
// next, panic after done, or panic in the done they hand to next: one
// answer each, with the right code, over baidu_std and HTTP; the server
// stays up and Stop+Join returns.
func TestGoFaceAttackServerInterceptors(t *testing.T) {
	var handled atomic.Int64
	ic := func(cntl *controller.Controller, req, resp proto.Message, done func(), next server.Handler) {
		switch req.(*testpb.EchoRequest).GetMessage() {
		case "done-twice":
			next(cntl, req, resp, func() { done(); done() })
		case "next-and-done":
			next(cntl, req, resp, done)
			done()
		case "next-twice":
			next(cntl, req, resp, done)
			next(cntl, req, resp, done)
		case "later":
			go func() {
				time.Sleep(20 * time.Millisecond)
				next(cntl, req, resp, done)
			}()
		case "reject-0":
			cntl.SetFailed(0, "zero")
			done()
		case "panic-before":
			panic("before next")
		case "panic-after":
			next(cntl, req, resp, done)
			panic("after done")
		case "panic-in-done":
			next(cntl, req, resp, func() { panic("in done") })
		default:
			next(cntl, req, resp, done)
		}
	}
	counting := &gfsCounting{n: &handled}
	srv := gfsStart(t, &server.Options{Interceptors: []server.Interceptor{ic}}, counting)
	opts := channel.DefaultOptions()
	opts.MaxRetry = 0
	opts.TimeoutMs = 5000
	var ch channel.Channel
	require.NoError(t, ch.Init(srv.ListenAddress().String(), "", &opts))
	defer ch.Close()
	client := testpb.NewEchoServiceClient(&ch)
	for _, tc := range []struct {
		m    string
		code controller.Errno
	}{
		{"done-twice", 0}, {"next-and-done", 0}, {"next-twice", 0}, {"later", 0},
		{"reject-0", controller.EINTERNAL}, {"panic-before", controller.EINTERNAL},
		{"panic-after", 0}, {"panic-in-done", controller.EINTERNAL}, {"plain", 0},
	} {
		_, err := client.Echo(context.Background(), &testpb.EchoRequest{Message: proto.String(tc.m)})
		assert.Equal(t, tc.code, controller.Errno(errCode(err)), "%s: %v", tc.m, err)
		// HTTP too.
		resp, err := http.Post("http://"+srv.ListenAddress().String()+"/"+gfsService+"/Echo",
			"application/json", strings.NewReader(`{"message":"`+tc.m+`"}`))
		require.NoError(t, err, tc.m)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		assert.Equal(t, tc.code.HTTPStatus(), resp.StatusCode, tc.m)
	}
	_, err := client.Echo(context.Background(), &testpb.EchoRequest{Message: proto.String("still-up")})
	require.NoError(t, err)
}

func errCode(err error) int32 {
	var e *controller.Error
	if errors.As(err, &e) {
		return int32(e.Code)
	}
	if err != nil {
		return -1
	}
	return 0
}

type gfsCounting struct {
	testpb.UnimplementedEchoServiceServer
	n *atomic.Int64
}

func (s *gfsCounting) Echo(cntl *controller.Controller, req *testpb.EchoRequest, resp *testpb.EchoResponse, done func()) {
	s.n.Add(1)
	resp.Message = req.Message
	done()
}
