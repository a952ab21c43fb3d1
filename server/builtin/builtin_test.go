package builtin

import (
	"bytes"
	"compress/gzip"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/gobrpc/gobrpc/bvar"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeServer is what a real server reports, set by each test.
type fakeServer struct {
	version  string
	health   string
	start    time.Time
	services []ServiceStatus
	conns    []ConnectionStatus
}

func (s *fakeServer) Version() string { return s.version }
func (s *fakeServer) ListenAddress() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8000}
}
func (s *fakeServer) StartTime() time.Time            { return s.start }
func (s *fakeServer) Services() []ServiceStatus       { return s.services }
func (s *fakeServer) Connections() []ConnectionStatus { return s.conns }
func (s *fakeServer) Health() string                  { return s.health }

// User-Agents.
const (
	curlUA    = "curl/8.5.0"
	browserUA = "Mozilla/5.0 (X11; Linux x86_64) Firefox/130.0"
	noUA      = "" // the Go client then sends no User-Agent
)

// harness is the pages of a fake server behind a real HTTP server.
type harness struct {
	t     *testing.T
	srv   *fakeServer
	pages *Pages
	ts    *httptest.Server
}

func newHarness(t *testing.T, opts Options) *harness {
	t.Helper()
	srv := &fakeServer{start: time.Now().Add(-time.Minute)}
	pages := New(srv, opts)
	ts := httptest.NewServer(pages)
	t.Cleanup(func() {
		ts.Close()
		pages.Close()
	})
	return &harness{t: t, srv: srv, pages: pages, ts: ts}
}

type response struct {
	status int
	header http.Header
	body   string
}

// get fetches path with that User-Agent and extra headers (name, value
// pairs). The body is returned as sent (no transparent gunzip).
func (h *harness) get(path, ua string, headers ...string) response {
	h.t.Helper()
	req, err := http.NewRequest(http.MethodGet, h.ts.URL+path, nil)
	require.NoError(h.t, err)
	req.Header.Set("User-Agent", ua) // "" sends none
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	if req.Header.Get("Accept-Encoding") == "" {
		req.Header.Set("Accept-Encoding", "identity") // no transparent gzip
	}
	resp, err := h.ts.Client().Do(req)
	require.NoError(h.t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(h.t, err)
	return response{resp.StatusCode, resp.Header, string(body)}
}

// manualSampling switches bvar to manual sampling for the test and returns
// a start time for SampleAt.
func manualSampling(t *testing.T) time.Time {
	bvar.SetManualSampling(true)
	t.Cleanup(func() { bvar.SetManualSampling(false) })
	return time.Unix(1_700_000_000, 0)
}

func TestIsBuiltinPath(t *testing.T) {
	for path, want := range map[string]bool{
		"/": true, "/index": true, "/status": true, "/vars": true, "/vars/": true, "/vars/a*;b$c": true,
		"/brpc_metrics": true, "/flags": true, "/flags/x": true, "/connections": true, "/protobufs": true,
		"/protobufs/example.EchoRequest": true, "/rpcz": true, "/rpcz/stats": true, "/pprof": true, "/pprof/": true,
		"/pprof/heap": true, "/health": true, "/version": true,
		"": false, "vars": false, "/varsx": false, "/example.EchoService/Echo": false, "/EchoService/Echo": false,
		"/favicon.ico": false, "/debug/pprof/": false,
	} {
		assert.Equal(t, want, IsBuiltinPath(path), path)
	}
}

func TestUseHTMLRule(t *testing.T) {
	cases := []struct {
		name, query string
		ua          []string // nil: no header
		html        bool
	}{
		{"no user-agent", "", nil, false},
		{"curl", "", []string{"curl/7.12.1 (x86_64-redhat-linux-gnu) libcurl/7.12.1"}, false},
		{"browser", "", []string{browserUA}, true},
		{"Go client", "", []string{"Go-http-client/1.1"}, true},
		{"empty user-agent", "", []string{""}, true},
		{"console=1 in a browser", "console=1", []string{browserUA}, false},
		{"console=0 with curl", "console=0", []string{curlUA}, true},
		{"bare console", "console", []string{curlUA}, true}, // atoi("") == 0, as in brpc
		{"console=2", "console=2", nil, false},
	}
	for _, c := range cases {
		r := httptest.NewRequest(http.MethodGet, "/vars?"+c.query, nil)
		if c.ua != nil {
			r.Header["User-Agent"] = c.ua
		}
		assert.Equal(t, c.html, useHTML(r), c.name)
	}
}

func TestUnknownPath(t *testing.T) {
	h := newHarness(t, Options{})
	r := h.get("/nothing_here", curlUA)
	assert.Equal(t, http.StatusNotFound, r.status)
	assert.Equal(t, "1002", r.header.Get("x-bd-error-code"))
	assert.Equal(t, "[E1002]Fail to find builtin page `/nothing_here'", r.body)
}

func TestIndex(t *testing.T) {
	h := newHarness(t, Options{})
	text := h.get("/", curlUA)
	assert.Equal(t, http.StatusOK, text.status)
	assert.True(t, strings.HasPrefix(text.header.Get("Content-Type"), "text/plain"))
	for _, p := range []string{"/status :", "/vars :", "/flags :", "/brpc_metrics :", "/connections :",
		"/protobufs :", "/rpcz :", "/pprof/ :", "/health :", "/version :", "127.0.0.1:8000/ServiceName/MethodName"} {
		assert.Contains(t, text.body, p)
	}
	page := h.get("/", browserUA)
	assert.True(t, strings.HasPrefix(page.header.Get("Content-Type"), "text/html"))
	for _, p := range []string{"/status", "/vars", "/flags", "/brpc_metrics", "/connections", "/protobufs", "/rpcz", "/pprof/", "/health", "/version"} {
		assert.Contains(t, page.body, `<a href="`+p+`">`)
	}
	assert.Equal(t, text.body, h.get("/index", curlUA).body)
}

func echoService(t *testing.T) ServiceStatus {
	return ServiceStatus{
		Descriptor: echoFile(t).Services().ByName("EchoService"),
		Methods: []MethodStatus{{
			FullName: "example.EchoService.Echo", Count: 12, Errors: 2, LatencyUs: 120, MaxLatencyUs: 900,
			QPS: 3.5, Concurrency: 1, MaxConcurrency: "", VarPrefix: "bt_status_echo",
		}},
	}
}

func TestStatus(t *testing.T) {
	now := manualSampling(t)
	h := newHarness(t, Options{})
	h.srv.version = "1.2.3"
	h.srv.services = []ServiceStatus{echoService(t)}
	h.srv.conns = []ConnectionStatus{{}, {}}
	p80 := bvar.NewStatus[int64]("bt_status_echo_latency_80", 150)
	defer p80.Hide()
	qps := bvar.NewStatus[int64]("bt_status_echo_qps", 3)
	defer qps.Hide()
	bvar.SampleAt(now)
	bvar.SampleAt(now.Add(time.Second))

	text := h.get("/status", curlUA)
	assert.Equal(t, http.StatusOK, text.status)
	assert.Contains(t, text.body, "version: 1.2.3\n")
	assert.Contains(t, text.body, "connection_count: 2\nconcurrency: 1\n")
	assert.Contains(t, text.body, "\n[example.EchoService]\n\nEcho (EchoRequest) returns (EchoResponse)\n"+
		"count: 12\nqps: 3.5\nerror: 2\nlatency: 120\nlatency_80: 150\nmax_latency: 900\nconcurrency: 1\nmax_concurrency: unlimited\n")

	page := h.get("/status", browserUA)
	assert.True(t, strings.HasPrefix(page.header.Get("Content-Type"), "text/html"))
	assert.Contains(t, page.body, `<a href="/protobufs/example.EchoService">example.EchoService</a>`)
	assert.Contains(t, page.body, `Echo (<a href="/protobufs/example.EchoRequest">EchoRequest</a>) returns`)
	assert.Contains(t, page.body, `<td class="num">12</td><td class="num">2</td><td class="num">3.5</td>`)
	assert.Contains(t, page.body, `<a href="/vars/bt_status_echo_*">[vars]</a>`)
	assert.NotContains(t, page.body, "[latency cdf]", "bt_status_echo has no LatencyRecorder")
	assert.Contains(t, page.body, "<svg", "the qps sparkline")
}

func TestHealthAndVersion(t *testing.T) {
	h := newHarness(t, Options{})
	assert.Equal(t, "OK", h.get("/health", browserUA).body)
	assert.Equal(t, "unknown", h.get("/version", curlUA).body)
	h.srv.health = "degraded: disk full"
	h.srv.version = "v9"
	r := h.get("/health", curlUA)
	assert.Equal(t, "degraded: disk full", r.body)
	assert.True(t, strings.HasPrefix(r.header.Get("Content-Type"), "text/plain"))
	assert.Equal(t, "v9", h.get("/version", curlUA).body)
}

func TestConnections(t *testing.T) {
	h := newHarness(t, Options{})
	created := time.Date(2025, 1, 2, 15, 4, 5, 123456000, time.Local)
	h.srv.conns = []ConnectionStatus{{
		Remote:   &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 53412},
		Local:    &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8000},
		Protocol: "baidu_std", Created: created, InFlight: 3,
	}}
	text := h.get("/connections", curlUA)
	assert.Equal(t, "CreatedTime               |RemoteSide         |LocalSide          |Protocol    |InFlight\n"+
		"2025/01/02-15:04:05.123456|10.0.0.1:53412     |127.0.0.1:8000     |baidu_std   |3\n", text.body)
	page := h.get("/connections", browserUA)
	assert.Contains(t, page.body, "<td>10.0.0.1:53412</td><td>127.0.0.1:8000</td><td>baidu_std</td><td class=\"num\">3</td>")
}

func TestBrpcMetrics(t *testing.T) {
	h := newHarness(t, Options{})
	a := bvar.NewAdder[int64]("bt_metrics_requests")
	defer a.Hide()
	a.Add(42)
	r := h.get("/brpc_metrics", browserUA)
	assert.Equal(t, http.StatusOK, r.status)
	assert.Equal(t, bvar.PrometheusContentType, r.header.Get("Content-Type"))
	assert.Contains(t, r.body, "# HELP bt_metrics_requests\n# TYPE bt_metrics_requests gauge\nbt_metrics_requests 42\n")
}

func TestRpcz(t *testing.T) {
	h := newHarness(t, Options{})
	r := h.get("/rpcz", curlUA)
	assert.Equal(t, http.StatusServiceUnavailable, r.status)
	assert.Equal(t, "rpcz is not enabled (set -enable_rpcz)", r.body)

	RpczHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "spans of "+r.URL.Path) })
	defer func() { RpczHandler = nil }()
	r = h.get("/rpcz/stats", curlUA)
	assert.Equal(t, http.StatusOK, r.status)
	assert.Equal(t, "spans of /rpcz/stats", r.body)
}

func TestGzip(t *testing.T) {
	h := newHarness(t, Options{})
	v := bvar.NewStatus[int64]("bt_gzip_value", 7)
	defer v.Hide()
	plain := h.get("/vars/bt_gzip_*", curlUA)
	assert.Empty(t, plain.header.Get("Content-Encoding"))
	assert.Equal(t, "bt_gzip_value : 7\r\n", plain.body)

	for _, path := range []string{"/vars/bt_gzip_*", "/flags", "/status"} {
		z := h.get(path, curlUA, "Accept-Encoding", "deflate, gzip;q=0.8")
		assert.Equal(t, "gzip", z.header.Get("Content-Encoding"), path)
		zr, err := gzip.NewReader(bytes.NewReader([]byte(z.body)))
		require.NoError(t, err, path)
		got, err := io.ReadAll(zr)
		require.NoError(t, err)
		assert.Equal(t, h.get(path, curlUA).body, string(got), path)
	}
	refused := h.get("/vars/bt_gzip_*", curlUA, "Accept-Encoding", "gzip;q=0")
	assert.Empty(t, refused.header.Get("Content-Encoding"))
}

// TestCloseStopsSampling checks that the history hook is the only thing
// keeping bvar's sampler goroutine alive, and Close ends it.
func TestCloseStopsSampling(t *testing.T) {
	p1 := New(&fakeServer{}, Options{})
	p2 := New(&fakeServer{}, Options{}) // shares the hook
	assert.Same(t, p1.hist, p2.hist)
	p1.Close()
	p1.Close() // idempotent
	assert.NotNil(t, shared.h, "p2 still uses it")
	p2.Close()
	assert.Nil(t, shared.h)
	goleak.VerifyNone(t)
}
