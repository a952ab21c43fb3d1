package builtin

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"
)

func TestPprofIndex(t *testing.T) {
	h := newHarness(t, Options{})
	page := h.get("/pprof/", browserUA)
	assert.Equal(t, http.StatusOK, page.status)
	assert.True(t, strings.HasPrefix(page.header.Get("Content-Type"), "text/html"))
	for _, link := range []string{"heap?debug=1", "goroutine?debug=1", "goroutine?debug=2", "allocs?debug=1",
		"cmdline", "profile", "symbol", "trace"} {
		assert.Contains(t, page.body, `href='`+link+`'`, "relative links, valid under /pprof/")
	}

	text := h.get("/pprof/", curlUA)
	assert.Equal(t, http.StatusOK, text.status)
	assert.True(t, strings.HasPrefix(text.header.Get("Content-Type"), "text/plain"))
	for _, name := range []string{" heap : ", " goroutine : ", " profile : ", " trace : ", " cmdline : ", " symbol : "} {
		assert.Contains(t, text.body, name)
	}

	// /pprof redirects to /pprof/ so that the index's relative links work.
	req, _ := http.NewRequest(http.MethodGet, h.ts.URL+"/pprof", nil)
	resp, err := h.ts.Client().Transport.RoundTrip(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusMovedPermanently, resp.StatusCode)
	assert.Equal(t, "/pprof/", resp.Header.Get("Location"))
}

// profileStrings checks that b is a gzip'ed profile.proto and returns its
// string table (Profile field 6).
func profileStrings(t *testing.T, b []byte) []string {
	t.Helper()
	require.Greater(t, len(b), 2)
	require.Equal(t, []byte{0x1f, 0x8b}, b[:2], "the gzip magic")
	zr, err := gzip.NewReader(bytes.NewReader(b))
	require.NoError(t, err)
	raw, err := io.ReadAll(zr)
	require.NoError(t, err)
	var strs []string
	for len(raw) > 0 {
		num, typ, n := protowire.ConsumeTag(raw)
		require.GreaterOrEqual(t, n, 0, "a protobuf tag")
		raw = raw[n:]
		if num == 6 && typ == protowire.BytesType {
			s, n := protowire.ConsumeString(raw)
			require.GreaterOrEqual(t, n, 0)
			strs = append(strs, s)
			raw = raw[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, raw)
		require.GreaterOrEqual(t, n, 0, "a protobuf field")
		raw = raw[n:]
	}
	return strs
}

func TestPprofNamedProfiles(t *testing.T) {
	h := newHarness(t, Options{})
	heap := h.get("/pprof/heap", curlUA)
	assert.Equal(t, http.StatusOK, heap.status)
	assert.Equal(t, "application/octet-stream", heap.header.Get("Content-Type"))
	assert.Equal(t, `attachment; filename="heap"`, heap.header.Get("Content-Disposition"))
	assert.Contains(t, profileStrings(t, []byte(heap.body)), "inuse_space")

	text := h.get("/pprof/heap?debug=1", curlUA)
	assert.Equal(t, http.StatusOK, text.status)
	assert.True(t, strings.HasPrefix(text.header.Get("Content-Type"), "text/plain"))
	assert.Empty(t, text.header.Get("Content-Disposition"))
	assert.Contains(t, text.body, "heap profile:")

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	assert.Equal(t, http.StatusOK, h.get("/pprof/heap?gc=1", curlUA).status)
	runtime.ReadMemStats(&after)
	assert.Greater(t, after.NumGC, before.NumGC, "gc=1 collects first")

	g := h.get("/pprof/goroutine?debug=1", curlUA)
	assert.Contains(t, g.body, "goroutine profile:")
	g = h.get("/pprof/goroutine?debug=2", curlUA)
	assert.Equal(t, http.StatusOK, g.status)
	assert.Contains(t, g.body, "goroutine ")
	assert.Contains(t, g.body, "[running]:", "panic-style stacks")
	assert.Contains(t, profileStrings(t, []byte(h.get("/pprof/goroutine", curlUA).body)), "goroutine")
	assert.Equal(t, http.StatusOK, h.get("/pprof/allocs", curlUA).status)

	unknown := h.get("/pprof/no_such_profile", curlUA)
	assert.Equal(t, http.StatusNotFound, unknown.status)
	assert.Equal(t, "Unknown profile\n", unknown.body)
	assert.Equal(t, "1", unknown.header.Get("X-Go-Pprof"), "go tool pprof shows the text")

	delta := h.get("/pprof/heap?seconds=1", curlUA)
	assert.Equal(t, http.StatusBadRequest, delta.status)
	assert.Contains(t, delta.body, "not supported")
}

func TestPprofSymbol(t *testing.T) {
	h := newHarness(t, Options{})
	r := h.get("/pprof/symbol", curlUA)
	assert.Equal(t, http.StatusOK, r.status)
	assert.Equal(t, "num_symbols: 1\n", r.body)

	pc1 := reflect.ValueOf(TestPprofSymbol).Pointer()
	pc2 := reflect.ValueOf(serveSymbol).Pointer()
	hex := func(pc uintptr) string { return "0x" + strconv.FormatUint(uint64(pc), 16) }
	want := "num_symbols: 1\n" + hex(pc1) + " github.com/gobrpc/gobrpc/server/builtin.TestPprofSymbol\n" +
		hex(pc2) + " github.com/gobrpc/gobrpc/server/builtin.serveSymbol\n"
	assert.Equal(t, want, h.get("/pprof/symbol?"+hex(pc1)+"+"+hex(pc2), curlUA).body)

	resp, err := h.ts.Client().Post(h.ts.URL+"/pprof/symbol", "text/plain", strings.NewReader(hex(pc1)+"+"+hex(pc2)))
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, want, string(body))
}

// inWaitProfile reports whether a profile or trace has started and waits.
func inWaitProfile() bool {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return bytes.Contains(buf[:n], []byte("builtin.waitProfile("))
		}
		buf = make([]byte, 2*len(buf))
	}
}

func TestPprofCPUProfile(t *testing.T) {
	h := newHarness(t, Options{})
	r := h.get("/pprof/profile?seconds=1", curlUA)
	require.Equal(t, http.StatusOK, r.status, r.body)
	assert.Equal(t, "application/octet-stream", r.header.Get("Content-Type"))
	assert.Equal(t, `attachment; filename="profile"`, r.header.Get("Content-Disposition"))
	assert.Contains(t, profileStrings(t, []byte(r.body)), "cpu")

	tooLong := h.get("/pprof/profile?seconds=3601", curlUA)
	assert.Equal(t, http.StatusBadRequest, tooLong.status)
	assert.Contains(t, tooLong.body, "seconds must be at most 3600")

	// A second profile while one runs: the process has one CPU profiler.
	type result struct {
		status int
		body   []byte
		err    error
	}
	first := make(chan result, 1)
	go func() {
		resp, err := h.ts.Client().Get(h.ts.URL + "/pprof/profile?seconds=2")
		if err != nil {
			first <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		first <- result{resp.StatusCode, b, err}
	}()
	require.Eventually(t, inWaitProfile, 10*time.Second, 5*time.Millisecond, "the first profile started")
	second := h.get("/pprof/profile?seconds=1", curlUA)
	assert.Equal(t, http.StatusInternalServerError, second.status)
	assert.Contains(t, second.body, "Could not enable CPU profiling")
	assert.Equal(t, "1", second.header.Get("X-Go-Pprof"))
	assert.Empty(t, second.header.Get("Content-Disposition"))
	res := <-first
	require.NoError(t, res.err)
	assert.Equal(t, http.StatusOK, res.status)
	profileStrings(t, res.body)
}

// A client that goes away ends its profile at once, freeing the profiler.
func TestPprofCPUProfileClientLeaves(t *testing.T) {
	h := newHarness(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, h.ts.URL+"/pprof/profile?seconds=600", nil)
		if resp, err := h.ts.Client().Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	require.Eventually(t, inWaitProfile, 10*time.Second, 5*time.Millisecond, "the profile started")
	cancel()
	<-done
	require.Eventually(t, func() bool { return !inWaitProfile() }, 10*time.Second, 5*time.Millisecond, "the profile ended")
	// The profiler is free again (StopCPUProfile runs right after the wait).
	require.Eventually(t, func() bool { return h.get("/pprof/profile?seconds=0.1", curlUA).status == http.StatusOK },
		10*time.Second, 10*time.Millisecond)
}

// A profile longer than the http.Server's WriteTimeout still arrives: the
// handler moves the write deadline past it.
func TestPprofOutlivesWriteTimeout(t *testing.T) {
	pages := New(&fakeServer{}, Options{})
	ts := httptest.NewUnstartedServer(pages)
	ts.Config.WriteTimeout = 200 * time.Millisecond
	ts.Start()
	defer func() {
		ts.Close()
		pages.Close()
	}()
	for _, path := range []string{"/pprof/profile?seconds=1", "/pprof/trace?seconds=1"} {
		resp, err := ts.Client().Get(ts.URL + path)
		require.NoError(t, err, path)
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err, path)
		assert.Equal(t, http.StatusOK, resp.StatusCode, path)
		assert.NotEmpty(t, b, path)
	}
}

func TestPprofTrace(t *testing.T) {
	h := newHarness(t, Options{})
	r := h.get("/pprof/trace?seconds=1", curlUA)
	require.Equal(t, http.StatusOK, r.status, r.body)
	assert.Equal(t, "application/octet-stream", r.header.Get("Content-Type"))
	assert.Equal(t, `attachment; filename="trace"`, r.header.Get("Content-Disposition"))
	assert.True(t, strings.HasPrefix(r.body, "go 1."), "a runtime/trace header, got %q", r.body[:min(len(r.body), 16)])
}

// The pages add nothing to http.DefaultServeMux: this test binary links
// the whole package, so net/http/pprof's init would have run.
func TestPprofLeavesDefaultServeMux(t *testing.T) {
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/profile", "/debug/pprof/cmdline"} {
		_, pattern := http.DefaultServeMux.Handler(httptest.NewRequest(http.MethodGet, path, nil))
		assert.Empty(t, pattern, path)
	}
}

func TestPprofDoesNotImportNetHTTPPprof(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		if root := os.Getenv("GOROOT"); root != "" {
			goBin, err = exec.LookPath(filepath.Join(root, "bin", "go"))
		}
	}
	if err != nil {
		t.Skip("no go tool:", err)
	}
	root, err := exec.Command(goBin, "env", "GOROOT").Output()
	require.NoError(t, err)
	goBin = filepath.Join(strings.TrimSpace(string(root)), "bin", "go")
	out, err := exec.Command(goBin, "list", "-deps", "github.com/gobrpc/gobrpc/server/builtin").CombinedOutput()
	require.NoError(t, err, "%s", out)
	deps := strings.Fields(string(out))
	assert.Contains(t, deps, "runtime/pprof")
	assert.NotContains(t, deps, "net/http/pprof")
}
