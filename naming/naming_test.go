package naming

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder is a Watcher that keeps every list it was given.
type recorder struct {
	mu    sync.Mutex
	lists [][]Node
}

func (r *recorder) Update(nodes []Node) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lists = append(r.lists, slices.Clone(nodes))
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.lists)
}

func (r *recorder) last() []Node {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.lists) == 0 {
		return nil
	}
	return r.lists[len(r.lists)-1]
}

// eventuallyLast waits until the last list equals want (as a set).
func (r *recorder) eventuallyLast(t *testing.T, want []Node) {
	t.Helper()
	require.Eventually(t, func() bool {
		return slices.Equal(sortedNodes(r.last()), sortedNodes(want))
	}, 2*time.Second, 5*time.Millisecond, "want %v, last %v", want, r.last())
}

// fakeDNS replaces lookupHost for one test.
type fakeDNS struct {
	mu    sync.Mutex
	hosts map[string][]string
	errs  map[string]error
	calls int
}

func useFakeDNS(t *testing.T) *fakeDNS {
	f := &fakeDNS{hosts: map[string][]string{}, errs: map[string]error{}}
	old := lookupHost
	lookupHost = f.lookup
	t.Cleanup(func() { lookupHost = old })
	return f
}

func (f *fakeDNS) lookup(_ context.Context, host string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if err := f.errs[host]; err != nil {
		return nil, err
	}
	if a, ok := f.hosts[host]; ok {
		return slices.Clone(a), nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func (f *fakeDNS) set(host string, addrs ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.errs, host)
	f.hosts[host] = addrs
}

func (f *fakeDNS) fail(host string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errs[host] = err
}

func (f *fakeDNS) numCalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// syncBuffer collects slog output written from naming goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) count(sub string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Count(b.buf.String(), sub)
}

// captureLogs redirects slog for one test. Register it before starting
// naming services so their Close (a later Cleanup) runs first.
func captureLogs(t *testing.T) *syncBuffer {
	b := &syncBuffer{}
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(b, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })
	return b
}

func start(t *testing.T, url string) (*recorder, NamingService) {
	t.Helper()
	r := &recorder{}
	ns, err := Start(url, r)
	require.NoError(t, err)
	t.Cleanup(ns.Close)
	require.Equal(t, 1, r.count(), "Build must deliver the first list")
	return r, ns
}

func TestParseTarget(t *testing.T) {
	tests := []struct {
		name, url string
		want      Target
		wantErr   bool
	}{
		{"list", "list://a:1,b:2", Target{Scheme: "list", Name: "a:1,b:2", URL: "list://a:1,b:2"}, false},
		{"file absolute", "file:///etc/servers", Target{Scheme: "file", Name: "/etc/servers", URL: "file:///etc/servers"}, false},
		{"scheme lowered", "HTTP://Host", Target{Scheme: "http", Name: "Host", URL: "HTTP://Host"}, false},
		{"empty name", "dns://", Target{Scheme: "dns", Name: "", URL: "dns://"}, false},
		{"plain address", "127.0.0.1:8000", Target{}, true},
		{"no scheme", "://x", Target{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseTarget(tc.url)
			if tc.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestStartUnknownScheme(t *testing.T) {
	_, err := Start("nope://x", &recorder{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"nope"`)
	for _, s := range []string{"dns", "file", "http", "https", "list"} {
		assert.Contains(t, err.Error(), s)
	}
	assert.Subset(t, Schemes(), []string{"dns", "file", "http", "https", "list"})
}

func TestRegisterCustomScheme(t *testing.T) {
	Register("Test-Static", builderFunc(func(tg Target, w Watcher) (NamingService, error) {
		w.Update([]Node{{Addr: tg.Name}})
		return staticService{}, nil
	}))
	t.Cleanup(func() {
		registry.Lock()
		delete(registry.m, "test-static")
		registry.Unlock()
	})
	r, _ := start(t, "test-static://1.2.3.4:5")
	assert.Equal(t, []Node{{Addr: "1.2.3.4:5"}}, r.last())
}

type builderFunc func(Target, Watcher) (NamingService, error)

func (f builderFunc) Build(t Target, w Watcher) (NamingService, error) { return f(t, w) }

func TestAccessIntervalFlag(t *testing.T) {
	assert.Equal(t, int32(5), nsAccessInterval.Get())
	assert.Equal(t, 5*time.Second, flagInterval())
	require.Error(t, nsAccessInterval.SetValue(0))
	require.NoError(t, nsAccessInterval.SetValue(2))
	t.Cleanup(func() { _ = nsAccessInterval.SetValue(5) })
	assert.Equal(t, 2*time.Second, flagInterval())
	assert.True(t, nsAccessInterval.Reloadable())
}
