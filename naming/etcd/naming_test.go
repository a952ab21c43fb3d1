package etcdnaming

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/gobrpc/gobrpc/channel"
	"github.com/gobrpc/gobrpc/naming"
	"github.com/gobrpc/gobrpc/testsupport/echotest"
)

func TestMain(m *testing.M) {
	if runChildServer() {
		return
	}
	goleak.VerifyTestMain(m, append(echotest.LeakOptions(),
		// grpc-go's process-wide goroutines, started by the etcd client
		goleak.IgnoreTopFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/resolver/dns.(*dnsResolver).watcher"),
	)...)
}

// recorder is a naming.Watcher that keeps every list it gets.
type recorder struct {
	mu    sync.Mutex
	lists [][]naming.Node
}

func (r *recorder) Update(nodes []naming.Node) {
	r.mu.Lock()
	r.lists = append(r.lists, append([]naming.Node(nil), nodes...))
	r.mu.Unlock()
}

func (r *recorder) last() []naming.Node {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.lists) == 0 {
		return nil
	}
	return r.lists[len(r.lists)-1]
}

// waitFor waits until the last list is want.
func (r *recorder) waitFor(t *testing.T, want []naming.Node) {
	t.Helper()
	require.Eventually(t, func() bool {
		got := r.last()
		if len(got) == 0 && len(want) == 0 {
			return true
		}
		return assert.ObjectsAreEqual(want, got)
	}, 5*time.Second, 5*time.Millisecond, "want %v, last list %v", want, r.last())
}

func TestTargetErrors(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"etcd://", "no prefix"},
		{"etcd://127.0.0.1:2379", "no prefix"},
		{"etcd://127.0.0.1:2379/", "empty prefix"},
		{"etcd://127.0.0.1:2379///", "empty prefix"},
		{"etcd:///services/echo", "no etcd endpoint"},
		{"etcd://127.0.0.1/services/echo", "not host:port"},
		{"etcd://127.0.0.1:0/services/echo", "port must be 1-65535"},
		{"etcd://127.0.0.1:2379,,127.0.0.1:2380/services/echo", "not host:port"},
	} {
		_, err := naming.Start(tc.url, &recorder{})
		if assert.Error(t, err, tc.url) {
			assert.Contains(t, err.Error(), tc.want, tc.url)
		}
		var ch channel.Channel
		assert.Error(t, ch.Init(tc.url, "rr", nil), tc.url)
	}
	endpoints, prefix, err := parseTarget("127.0.0.1:2379,localhost:2380/services/echo/")
	require.NoError(t, err)
	assert.Equal(t, []string{"127.0.0.1:2379", "localhost:2380"}, endpoints)
	assert.Equal(t, "/services/echo", prefix)
}

func TestRegisterErrors(t *testing.T) {
	ctx := context.Background()
	eps := []string{"127.0.0.1:2379"}
	for _, tc := range []struct {
		name    string
		eps     []string
		prefix  string
		addr    string
		ttl     time.Duration
		wantErr string
	}{
		{"no endpoint", nil, "/s", "127.0.0.1:8000", time.Second, "no etcd endpoint"},
		{"bad endpoint", []string{"nope"}, "/s", "127.0.0.1:8000", time.Second, "not host:port"},
		{"empty prefix", eps, "/", "127.0.0.1:8000", time.Second, "empty prefix"},
		{"no port", eps, "/s", "127.0.0.1", time.Second, "server address"},
		{"blank in address", eps, "/s", "127.0.0.1:8000 x", time.Second, "server address"},
		{"ttl", eps, "/s", "127.0.0.1:8000", 500 * time.Millisecond, "ttl"},
	} {
		_, err := Register(ctx, tc.eps, tc.prefix, tc.addr, "", tc.ttl)
		if assert.Error(t, err, tc.name) {
			assert.Contains(t, err.Error(), tc.wantErr, tc.name)
		}
	}
}

// The list follows puts and deletes under the prefix, and only under it;
// a key that is not an address is skipped with one log line.
func TestNamingFollowsThePrefix(t *testing.T) {
	e := startEtcd(t)
	cli := e.clientv3()
	ctx := context.Background()
	_, err := cli.Put(ctx, "/services/echo/127.0.0.1:8001", "")
	require.NoError(t, err)
	_, err = cli.Put(ctx, "/services/echo/127.0.0.1:8002", " 20 ")
	require.NoError(t, err)
	_, err = cli.Put(ctx, "/services/echo2/127.0.0.1:9999", "") // another service
	require.NoError(t, err)
	_, err = cli.Put(ctx, "/services/echo", "") // the prefix itself
	require.NoError(t, err)

	logs := &lockedWriter{}
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(logs, nil)))
	defer slog.SetDefault(old)

	rec := &recorder{}
	ns, err := naming.Start(e.url("/services/echo"), rec)
	require.NoError(t, err)
	defer ns.Close()
	require.NotEmpty(t, rec.lists, "the first list is delivered before Start returns")
	assert.Equal(t, []naming.Node{{Addr: "127.0.0.1:8001"}, {Addr: "127.0.0.1:8002", Tag: "20"}}, rec.last())

	_, err = cli.Put(ctx, "/services/echo/127.0.0.1:8003", "5")
	require.NoError(t, err)
	rec.waitFor(t, []naming.Node{{Addr: "127.0.0.1:8001"}, {Addr: "127.0.0.1:8002", Tag: "20"}, {Addr: "127.0.0.1:8003", Tag: "5"}})

	_, err = cli.Delete(ctx, "/services/echo/127.0.0.1:8001")
	require.NoError(t, err)
	_, err = cli.Put(ctx, "/services/echo/127.0.0.1:8002", "30") // a new tag
	require.NoError(t, err)
	rec.waitFor(t, []naming.Node{{Addr: "127.0.0.1:8002", Tag: "30"}, {Addr: "127.0.0.1:8003", Tag: "5"}})

	for range 3 { // a bad key, written three times: one log line
		_, err = cli.Put(ctx, "/services/echo/not-an-address", "")
		require.NoError(t, err)
	}
	_, err = cli.Put(ctx, "/services/echo/127.0.0.1:8004", "")
	require.NoError(t, err)
	rec.waitFor(t, []naming.Node{{Addr: "127.0.0.1:8002", Tag: "30"}, {Addr: "127.0.0.1:8003", Tag: "5"}, {Addr: "127.0.0.1:8004"}})
	assert.Equal(t, 1, strings.Count(logs.String(), "skipped a key"), "one log line for the bad key:\n%s", logs.String())

	_, err = cli.Delete(ctx, "/services/echo/", clientv3.WithPrefix())
	require.NoError(t, err)
	rec.waitFor(t, nil)
}

// With etcd down, the naming service keeps the last list; a change made
// after etcd is back, before the watch has reconnected, is not missed.
func TestNamingSurvivesEtcdRestart(t *testing.T) {
	e := startEtcd(t)
	cli := e.clientv3()
	ctx := context.Background()
	_, err := cli.Put(ctx, "/s/127.0.0.1:8001", "")
	require.NoError(t, err)
	rec := &recorder{}
	ns, err := naming.Start(e.url("/s"), rec)
	require.NoError(t, err)
	defer ns.Close()
	rec.waitFor(t, []naming.Node{{Addr: "127.0.0.1:8001"}})

	e.stop()
	time.Sleep(1500 * time.Millisecond)
	assert.Equal(t, []naming.Node{{Addr: "127.0.0.1:8001"}}, rec.last(), "etcd down: the last list stays")
	e.start()
	_, err = cli.Put(ctx, "/s/127.0.0.1:8002", "")
	require.NoError(t, err)
	_, err = cli.Delete(ctx, "/s/127.0.0.1:8001")
	require.NoError(t, err)
	rec.waitFor(t, []naming.Node{{Addr: "127.0.0.1:8002"}})
}

// Starting against an etcd nobody answers gives an empty list (as brpc's
// naming services start), then the servers once etcd is up.
func TestNamingStartsWithoutEtcd(t *testing.T) {
	e := startEtcd(t)
	cli := e.clientv3()
	_, err := cli.Put(context.Background(), "/s/127.0.0.1:8001", "")
	require.NoError(t, err)
	e.stop()

	old := dialTimeoutMs.Get()
	require.NoError(t, dialTimeoutMs.SetValue(300))
	defer dialTimeoutMs.SetValue(old)
	rec := &recorder{}
	ns, err := naming.Start(e.url("/s"), rec)
	require.NoError(t, err)
	defer ns.Close()
	assert.Empty(t, rec.last())
	e.start()
	rec.waitFor(t, []naming.Node{{Addr: "127.0.0.1:8001"}})
}

// lockedWriter collects log output written from other goroutines.
type lockedWriter struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
