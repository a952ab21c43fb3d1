package channel_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/gobrpc/gobrpc/bvar"
	"github.com/gobrpc/gobrpc/channel"
	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/internal/transport"
	"github.com/gobrpc/gobrpc/naming"
	"github.com/gobrpc/gobrpc/server"
	"github.com/gobrpc/gobrpc/testsupport/echotest"
	"github.com/gobrpc/gobrpc/testsupport/testpb"
)

// cluster is n echo servers on loopback that a test can stop and restart
// on the same port.
type cluster struct {
	t     *testing.T
	addrs []string
	srvs  []*server.Server
	svcs  []*echotest.Service
}

func startCluster(t *testing.T, n int) *cluster {
	c := &cluster{t: t, srvs: make([]*server.Server, n), svcs: make([]*echotest.Service, n)}
	for i := range n {
		srv, svc := echotest.StartServer(t, nil)
		c.srvs[i], c.svcs[i] = srv, svc
		c.addrs = append(c.addrs, srv.ListenAddress().String())
	}
	return c
}

func (c *cluster) stop(i int) {
	c.srvs[i].Stop()
	c.srvs[i].Join()
}

func (c *cluster) restart(i int) {
	srv := server.New(nil)
	svc := &echotest.Service{Canceled: make(chan bool, 1)}
	require.NoError(c.t, testpb.RegisterEchoServiceServer(srv, svc))
	var err error
	for range 50 { // the port may linger briefly
		if err = srv.Start(c.addrs[i]); err == nil {
			break
		}
		srv = server.New(nil)
		require.NoError(c.t, testpb.RegisterEchoServiceServer(srv, svc))
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(c.t, err)
	c.srvs[i], c.svcs[i] = srv, svc
	c.t.Cleanup(func() { srv.Stop(); srv.Join() })
}

func (c *cluster) listURL() string { return "list://" + strings.Join(c.addrs, ",") }

func clusterChannel(t *testing.T, url, lb string, mutate func(*channel.Options)) *channel.Channel {
	opts := channel.DefaultOptions()
	if mutate != nil {
		mutate(&opts)
	}
	ch := &channel.Channel{}
	require.NoError(t, ch.Init(url, lb, &opts))
	t.Cleanup(func() { ch.Close() })
	return ch
}

// setHealthCheckInterval shortens the health check for one test.
func setHealthCheckInterval(t *testing.T, s int32) {
	old := transport.HealthCheckInterval.Get()
	require.NoError(t, transport.HealthCheckInterval.SetValue(s))
	t.Cleanup(func() { transport.HealthCheckInterval.SetValue(old) })
}

func TestClusterSpreadsCalls(t *testing.T) {
	c := startCluster(t, 3)
	ch := clusterChannel(t, c.listURL(), "rr", nil)
	stub := testpb.NewEchoServiceStub(ch)
	for range 300 {
		cntl := controller.New()
		echo(stub, cntl, "x")
		require.NoError(t, cntl.Err())
	}
	for i, svc := range c.svcs {
		assert.InDelta(t, 100, svc.Calls.Load(), 5, "server %d", i)
	}
	// The channel's per-server counters.
	var total int64
	for _, name := range bvar.List() {
		if strings.HasPrefix(name, "rpc_channel_") && strings.HasSuffix(name, "_selected") {
			v, _ := bvar.Describe(name)
			n, err := strconv.ParseInt(v, 10, 64)
			require.NoError(t, err)
			total += n
		}
	}
	assert.Equal(t, int64(300), total)
	ch.Close()
	for _, name := range bvar.List() {
		assert.False(t, strings.HasPrefix(name, "rpc_channel_"), "Close hides %s", name)
	}
}

// Stop one of three servers under load: every call still succeeds; after
// a restart it is revived by the health check and gets traffic again.
func TestClusterSurvivesServerStopAndRevivesIt(t *testing.T) {
	setHealthCheckInterval(t, 1)
	c := startCluster(t, 3)
	ch := clusterChannel(t, c.listURL(), "rr", func(o *channel.Options) { o.MaxRetry = 3; o.TimeoutMs = 2000 })
	stub := testpb.NewEchoServiceStub(ch)

	var failed, total atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				cntl := controller.New()
				echo(stub, cntl, "sleep:2ms")
				total.Add(1)
				if cntl.Failed() {
					failed.Add(1)
					t.Log(cntl.ErrorText())
				}
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	c.stop(1)
	time.Sleep(500 * time.Millisecond)
	before := c.svcs[1].Calls.Load()
	c.restart(1)
	require.Eventually(t, func() bool { return c.svcs[1].Calls.Load() > before },
		3*time.Second, 20*time.Millisecond, "the restarted server must get traffic within health_check_interval + 1 s")
	close(stop)
	wg.Wait()
	assert.Zero(t, failed.Load(), "of %d calls", total.Load())
	assert.Greater(t, total.Load(), int64(100))
}

// A server that accepts connections but never answers: calls to it time
// out at TimeoutMs, the others keep serving.
func TestClusterWithASilentServer(t *testing.T) {
	c := startCluster(t, 2)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var conns sync.WaitGroup
	accepted := make(chan net.Conn, 100)
	conns.Add(1)
	go func() {
		defer conns.Done()
		for {
			cn, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- cn // hold it open, never answer
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		conns.Wait()
		close(accepted)
		for cn := range accepted {
			cn.Close()
		}
	})
	url := "list://" + strings.Join(append(c.addrs, ln.Addr().String()), ",")
	ch := clusterChannel(t, url, "rr", func(o *channel.Options) { o.TimeoutMs = 100 })
	stub := testpb.NewEchoServiceStub(ch)
	var ok, timedOut int
	for range 30 {
		cntl := controller.New()
		echo(stub, cntl, "x")
		switch cntl.ErrorCode() {
		case 0:
			ok++
		case controller.ERPCTIMEDOUT:
			timedOut++
		default:
			t.Fatalf("unexpected error %s", cntl.ErrorText())
		}
	}
	assert.InDelta(t, 10, timedOut, 1, "every third call went to the silent server")
	assert.InDelta(t, 20, ok, 1)
}

// The naming file is rewritten while calls run: no call fails.
func TestClusterNamingFileRewrittenUnderLoad(t *testing.T) {
	c := startCluster(t, 4)
	path := filepath.Join(t.TempDir(), "servers")
	write := func(addrs ...string) {
		tmp := path + ".tmp"
		require.NoError(t, os.WriteFile(tmp, []byte(strings.Join(addrs, "\n")+"\n"), 0o644))
		require.NoError(t, os.Rename(tmp, path))
	}
	write(c.addrs[0], c.addrs[1])
	ch := clusterChannel(t, "file://"+path, "rr", nil)
	stub := testpb.NewEchoServiceStub(ch)
	var failed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				cntl := controller.New()
				echo(stub, cntl, "x")
				if cntl.Failed() {
					failed.Add(1)
					t.Log(cntl.ErrorText())
				}
			}
		}()
	}
	for i := range 6 {
		time.Sleep(150 * time.Millisecond)
		write(c.addrs[(i+2)%4], c.addrs[(i+3)%4])
	}
	require.Eventually(t, func() bool { return c.svcs[2].Calls.Load() > 0 && c.svcs[3].Calls.Load() > 0 },
		3*time.Second, 20*time.Millisecond)
	close(stop)
	wg.Wait()
	assert.Zero(t, failed.Load())
}

func TestClusterWithoutServers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "empty")
	require.NoError(t, os.WriteFile(path, nil, 0o644))
	ch := clusterChannel(t, "file://"+path, "rr", func(o *channel.Options) { o.MaxRetry = 0 })
	cntl := controller.New()
	echo(testpb.NewEchoServiceStub(ch), cntl, "x")
	assert.Equal(t, controller.ENODATA, cntl.ErrorCode(), cntl.ErrorText())

	var strict channel.Channel
	opts := channel.DefaultOptions()
	opts.SucceedWithoutServer = false
	assert.Error(t, strict.Init("file://"+path, "rr", &opts))

	var bad channel.Channel
	assert.Error(t, bad.Init("list://127.0.0.1:1", "", nil), "a naming URL needs a balancer")
	assert.Error(t, bad.Init("nosuch://x", "rr", nil))
	assert.Error(t, bad.Init("list://127.0.0.1:1", "nosuch", nil))
}

func TestNamingServiceFilter(t *testing.T) {
	c := startCluster(t, 2)
	ch := clusterChannel(t, c.listURL(), "rr", func(o *channel.Options) {
		o.NamingServiceFilter = naming.FilterFunc(func(n naming.Node) bool { return n.Addr == c.addrs[1] })
	})
	stub := testpb.NewEchoServiceStub(ch)
	for range 10 {
		cntl := controller.New()
		echo(stub, cntl, "x")
		require.NoError(t, cntl.Err())
		assert.Equal(t, c.addrs[1], cntl.RemoteSide().String())
	}
	assert.Zero(t, c.svcs[0].Calls.Load())
}

// Retries go to servers not tried yet.
func TestRetryAvoidsTriedServer(t *testing.T) {
	c := startCluster(t, 2)
	ch := clusterChannel(t, c.listURL(), "rr", func(o *channel.Options) { o.MaxRetry = 1 })
	stub := testpb.NewEchoServiceStub(ch)
	for range 10 {
		c.svcs[0].Calls.Store(0)
		c.svcs[1].Calls.Store(0)
		cntl := controller.New()
		echo(stub, cntl, "fail:ELIMIT")
		assert.Equal(t, controller.ELIMIT, cntl.ErrorCode())
		assert.Equal(t, int64(1), c.svcs[0].Calls.Load(), "each server tried once")
		assert.Equal(t, int64(1), c.svcs[1].Calls.Load())
	}
}

func TestSelectiveChannel(t *testing.T) {
	c := startCluster(t, 4)
	var sch channel.SelectiveChannel
	opts := channel.DefaultOptions()
	require.NoError(t, sch.Init("rr", &opts))
	defer sch.Close()

	list := &channel.Channel{}
	require.NoError(t, list.Init("list://"+c.addrs[0]+","+c.addrs[1], "rr", nil))
	single := &channel.Channel{}
	require.NoError(t, single.Init(c.addrs[2], "", nil))
	var nested channel.SelectiveChannel
	require.NoError(t, nested.Init("rr", nil))
	inner := &channel.Channel{}
	require.NoError(t, inner.Init(c.addrs[3], "", nil))
	_, err := nested.AddChannel(inner, "")
	require.NoError(t, err)

	_, err = sch.AddChannel(list, "")
	require.NoError(t, err)
	hSingle, err := sch.AddChannel(single, "")
	require.NoError(t, err)
	_, err = sch.AddChannel(&nested, "")
	require.NoError(t, err)
	_, err = sch.AddChannel(single, "")
	assert.Error(t, err, "a sub-channel is added once")

	stub := testpb.NewEchoServiceStub(&sch)
	for range 60 {
		cntl := controller.New()
		cntl.RequestAttachment().WriteString("att")
		resp := echo(stub, cntl, "via schan")
		require.NoError(t, cntl.Err())
		assert.Equal(t, "via schan", resp.GetMessage())
		assert.Equal(t, "att", cntl.ResponseAttachment().String())
	}
	for i, svc := range c.svcs {
		assert.Positive(t, svc.Calls.Load(), "server %d", i)
	}
	assert.InDelta(t, 20, c.svcs[2].Calls.Load(), 2, "rr over three sub-channels")

	// Removing a sub-channel stops its traffic.
	sch.RemoveAndDestroyChannel(hSingle)
	before := c.svcs[2].Calls.Load()
	for range 20 {
		cntl := controller.New()
		echo(stub, cntl, "x")
		require.NoError(t, cntl.Err())
	}
	assert.Equal(t, before, c.svcs[2].Calls.Load())
}

// A sub-channel that cannot select a server is skipped; the deadline
// belongs to the SelectiveChannel.
func TestSelectiveChannelSkipsDeadSubChannelAndOwnsDeadline(t *testing.T) {
	c := startCluster(t, 1)
	empty := filepath.Join(t.TempDir(), "empty")
	require.NoError(t, os.WriteFile(empty, nil, 0o644))

	var sch channel.SelectiveChannel
	opts := channel.DefaultOptions()
	opts.TimeoutMs = 100
	require.NoError(t, sch.Init("rr", &opts))
	defer sch.Close()
	dead := &channel.Channel{}
	require.NoError(t, dead.Init("file://"+empty, "rr", nil))
	live := &channel.Channel{}
	liveOpts := channel.DefaultOptions()
	liveOpts.TimeoutMs = 5000 // the SelectiveChannel's 100 ms must win
	require.NoError(t, live.Init(c.addrs[0], "", &liveOpts))
	_, err := sch.AddChannel(dead, "")
	require.NoError(t, err)
	_, err = sch.AddChannel(live, "")
	require.NoError(t, err)

	stub := testpb.NewEchoServiceStub(&sch)
	for range 10 {
		cntl := controller.New()
		echo(stub, cntl, "x")
		require.NoError(t, cntl.Err())
	}
	cntl := controller.New()
	echo(stub, cntl, "sleep:1s")
	assert.Equal(t, controller.ERPCTIMEDOUT, cntl.ErrorCode())
	assert.Less(t, cntl.LatencyUs(), int64(900_000))
}

func TestSelectiveChannelErrors(t *testing.T) {
	var sch channel.SelectiveChannel
	_, err := sch.AddChannel(&channel.Channel{}, "")
	assert.Error(t, err, "not initialized")
	assert.Error(t, sch.Init("nosuch", nil))
	require.NoError(t, sch.Init("rr", nil))
	_, err = sch.AddChannel(nil, "")
	assert.Error(t, err)
	cntl := controller.New()
	echo(testpb.NewEchoServiceStub(&sch), cntl, "x")
	assert.Equal(t, controller.ENODATA, cntl.ErrorCode(), "no sub-channel")
	sch.Close()
	cntl = controller.New()
	echo(testpb.NewEchoServiceStub(&sch), cntl, "x")
	assert.Equal(t, controller.EINVAL, cntl.ErrorCode())
	_ = fmt.Sprint()
	_ = proto.String
}
