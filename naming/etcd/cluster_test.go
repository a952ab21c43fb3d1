package etcdnaming

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gobrpc/gobrpc/channel"
	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/server"
	"github.com/gobrpc/gobrpc/testsupport/echotest"
	"github.com/gobrpc/gobrpc/testsupport/testpb"
)

const (
	childEnv = "GOBRPC_ETCDNAMING_CHILD" // "endpoint prefix": run as a registered server
	childTTL = 2 * time.Second
)

// runChildServer is the child side of startChild: this test binary,
// started again with childEnv set, serves echo on a free port, registers
// itself, prints "ready ADDR", and on SIGTERM stops gracefully (OnStop
// deletes the key first).
func runChildServer() bool {
	spec := os.Getenv(childEnv)
	if spec == "" {
		return false
	}
	endpoint, prefix, _ := strings.Cut(spec, " ")
	fail := func(err error) {
		fmt.Println("error", err)
		os.Exit(1)
	}
	srv := server.New(nil)
	if err := testpb.RegisterEchoServiceServer(srv, &echotest.Service{}); err != nil {
		fail(err)
	}
	if err := srv.Start("127.0.0.1:0"); err != nil {
		fail(err)
	}
	addr := srv.ListenAddress().String()
	reg, err := Register(context.Background(), []string{endpoint}, prefix, addr, "", childTTL)
	if err != nil {
		fail(err)
	}
	srv.OnStop(func() { reg.Close() })
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	fmt.Println("ready", addr)
	<-sig
	srv.Stop()
	srv.Join()
	return true
}

// child is a server in another process, registered in etcd.
type child struct {
	cmd          *exec.Cmd
	addr         string
	registeredAt time.Time // when it said it was registered
	exited       chan struct{}
}

func startChild(t *testing.T, e *etcdServer, prefix string) *child {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+e.Endpoint+" "+prefix)
	cmd.Stderr = os.Stderr
	dieWithTest(cmd)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	c := &child{cmd: cmd, exited: make(chan struct{})}
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			line <- sc.Text()
		}
		close(line)
		for sc.Scan() {
		}
		cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(func() { c.kill() })
	select {
	case l := <-line:
		addr, ok := strings.CutPrefix(l, "ready ")
		require.True(t, ok, "child said %q", l)
		c.addr, c.registeredAt = addr, time.Now()
	case <-time.After(10 * time.Second):
		t.Fatal("child server not ready in 10 s")
	}
	return c
}

func (c *child) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-c.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("child did not stop in 10 s")
	}
}

func (c *child) kill() {
	c.cmd.Process.Kill()
	<-c.exited
}

// load is 16 closed-loop callers through one channel, counting failures
// and the calls each server answered.
type load struct {
	ch       *channel.Channel
	stopping atomic.Bool
	wg       sync.WaitGroup
	mu       sync.Mutex
	failures []string
	served   map[string]int
	first    map[string]time.Time // first answer from each server
}

func startLoad(t *testing.T, url string, callers int) *load {
	t.Helper()
	ch := &channel.Channel{}
	opts := channel.DefaultOptions()
	opts.TimeoutMs = 1000
	opts.MaxRetry = 3
	require.NoError(t, ch.Init(url, "rr", &opts))
	l := &load{ch: ch, served: map[string]int{}, first: map[string]time.Time{}}
	stub := testpb.NewEchoServiceStub(ch)
	for range callers {
		l.wg.Go(func() {
			for !l.stopping.Load() {
				var cntl controller.Controller
				stub.Echo(&cntl, &testpb.EchoRequest{Message: new("hi")}, &testpb.EchoResponse{}, nil)
				l.mu.Lock()
				if cntl.Failed() {
					l.failures = append(l.failures, cntl.ErrorText())
				} else {
					addr := cntl.RemoteSide().String()
					if l.served[addr] == 0 {
						l.first[addr] = time.Now()
					}
					l.served[addr]++
				}
				l.mu.Unlock()
			}
		})
	}
	t.Cleanup(l.stop)
	return l
}

func (l *load) stop() {
	if l.stopping.Swap(true) {
		return
	}
	l.wg.Wait()
	l.ch.Close()
}

func (l *load) snapshot() (failures []string, served map[string]int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	served = make(map[string]int, len(l.served))
	for k, v := range l.served {
		served[k] = v
	}
	return append([]string(nil), l.failures...), served
}

func (l *load) firstAnswer(addr string) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	at, ok := l.first[addr]
	return at, ok
}

// waitServed waits until every server in addrs has answered calls.
func (l *load) waitServed(t *testing.T, addrs ...string) {
	t.Helper()
	require.Eventually(t, func() bool {
		_, served := l.snapshot()
		for _, a := range addrs {
			if served[a] == 0 {
				return false
			}
		}
		return true
	}, 5*time.Second, 5*time.Millisecond, "servers %v", addrs)
}

func keyExists(t *testing.T, cli *clientv3.Client, key string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, key)
	require.NoError(t, err)
	return len(resp.Kvs) > 0
}

// Three self-registered servers under 16 callers: one stops gracefully,
// one is killed, a new one starts; no call fails, the killed server's key
// goes away after its TTL and the new server gets traffic within 1 s.
func TestClusterFollowsSelfRegisteredServers(t *testing.T) {
	e := startEtcd(t)
	cli := e.clientv3()
	const prefix = "/services/echo"
	a, b, c := startChild(t, e, prefix), startChild(t, e, prefix), startChild(t, e, prefix)
	l := startLoad(t, e.url(prefix), 16)
	l.waitServed(t, a.addr, b.addr, c.addr)

	// Graceful stop: the key goes first, then the server; nothing fails.
	a.stop(t)
	assert.False(t, keyExists(t, cli, prefix+"/"+a.addr), "a graceful stop deletes the key")
	time.Sleep(500 * time.Millisecond)
	failures, _ := l.snapshot()
	require.Empty(t, failures, "calls failed around a graceful stop")

	// SIGKILL: calls fail over; the key stays until its lease expires.
	b.kill()
	killed := time.Now()
	assert.True(t, keyExists(t, cli, prefix+"/"+b.addr), "a crashed server's key outlives it until the TTL")
	require.Eventually(t, func() bool { return !keyExists(t, cli, prefix+"/"+b.addr) },
		childTTL+3*time.Second, 50*time.Millisecond, "the killed server's key did not expire")
	t.Logf("killed server's key gone %v after the kill (TTL %v)", time.Since(killed).Round(time.Millisecond), childTTL)
	failures, _ = l.snapshot()
	require.Empty(t, failures, "calls failed after a server was killed (MaxRetry 3)")

	// A new server gets traffic within 1 s of registering.
	d := startChild(t, e, prefix)
	l.waitServed(t, d.addr)
	first, _ := l.firstAnswer(d.addr)
	t.Logf("new server answered its first call %v after registering", first.Sub(d.registeredAt).Round(time.Millisecond))
	assert.Less(t, first.Sub(d.registeredAt), time.Second)

	_, before := l.snapshot()
	time.Sleep(time.Second)
	l.stop()
	failures, served := l.snapshot()
	assert.Empty(t, failures)
	t.Logf("calls answered per server: %v; in the last second: %s %d, %s (new) %d", served,
		c.addr, served[c.addr]-before[c.addr], d.addr, served[d.addr]-before[d.addr])
}

// etcd stops for longer than the servers' TTL and comes back, under load:
// no call fails, every registration comes back, and a server registered
// right after etcd returns (before the channel's watch reconnected) gets
// traffic.
func TestClusterSurvivesEtcdRestart(t *testing.T) {
	e := startEtcd(t)
	cli := e.clientv3()
	const prefix = "/services/echo"
	var addrs []string
	for range 3 {
		srv, _ := echotest.StartServer(t, nil)
		addr := srv.ListenAddress().String()
		reg, err := Register(context.Background(), []string{e.Endpoint}, prefix, addr, "", childTTL)
		require.NoError(t, err)
		t.Cleanup(func() { reg.Close() })
		addrs = append(addrs, addr)
	}
	l := startLoad(t, e.url(prefix), 16)
	l.waitServed(t, addrs...)

	e.stop()
	time.Sleep(childTTL + time.Second) // the leases' keep-alives time out meanwhile
	failures, _ := l.snapshot()
	require.Empty(t, failures, "calls failed while etcd was down")
	e.start()

	srv, _ := echotest.StartServer(t, nil)
	late := srv.ListenAddress().String()
	reg, err := Register(context.Background(), []string{e.Endpoint}, prefix, late, "", childTTL)
	require.NoError(t, err)
	t.Cleanup(func() { reg.Close() })
	l.waitServed(t, late)

	for _, a := range addrs {
		require.Eventually(t, func() bool { return keyExists(t, cli, prefix+"/"+a) }, 5*time.Second, 50*time.Millisecond,
			"the registration of %s did not come back", a)
	}
	// The old leases expire after etcd's restart: the keys must survive it.
	time.Sleep(childTTL + time.Second)
	for _, a := range addrs {
		assert.True(t, keyExists(t, cli, prefix+"/"+a), "key of %s lost after its old lease expired", a)
	}
	l.stop()
	failures, served := l.snapshot()
	assert.Empty(t, failures)
	t.Logf("calls answered per server: %v", served)
}
