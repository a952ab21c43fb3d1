package channel_test

// attack16: outside-attacker tests of adaptive backup requests
// (backup.AdaptivePolicy on channels).

import (
	"context"
	"flag"
	"math"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/gobrpc/gobrpc/backup"
	"github.com/gobrpc/gobrpc/bvar"
	"github.com/gobrpc/gobrpc/channel"
	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/testsupport/testpb"
)

// a16Trained is an adaptive policy whose delay is already trusted: n
// successful calls of 0 µs each went through it.
func a16Trained(t *testing.T, o backup.AdaptiveOptions, n int) *backup.AdaptivePolicy {
	t.Helper()
	p, err := backup.NewAdaptivePolicy(o)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	ch := controller.New()
	for range n {
		p.OnRPCEnd(ch)
	}
	_, ok := p.Delay()
	require.True(t, ok)
	return p
}

// a16Counter wraps a policy and counts what the channel did with it.
type a16Counter struct {
	inner     *backup.AdaptivePolicy
	allowed   atomic.Int64
	refused   atomic.Int64
	completed atomic.Int64
}

func (c *a16Counter) GetBackupRequestMs(cntl *controller.Controller) int32 {
	return c.inner.GetBackupRequestMs(cntl)
}
func (c *a16Counter) BackupRequestDelay(cntl *controller.Controller) (time.Duration, bool) {
	return c.inner.BackupRequestDelay(cntl)
}
func (c *a16Counter) DoBackup(cntl *controller.Controller) bool {
	ok := c.inner.DoBackup(cntl)
	if ok {
		c.allowed.Add(1)
	} else {
		c.refused.Add(1)
	}
	return ok
}
func (c *a16Counter) OnRPCEnd(cntl *controller.Controller) {
	c.completed.Add(1)
	c.inner.OnRPCEnd(cntl)
}

var _ controller.BackupDelayPolicy = (*a16Counter)(nil)

// Bad BackupRequestMaxExtraLoad values and bad flag values are errors
// naming the setting, never a panic; a rejected flag keeps its value.
func TestAttack16ExtraLoadValidation(t *testing.T) {
	c := startCluster(t, 1)
	opts := channel.DefaultOptions()
	for _, bad := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), 2, -0.5, -2, 1.0000001} {
		opts.BackupRequestMaxExtraLoad = bad
		var ch channel.Channel
		var err error
		require.NotPanics(t, func() { err = ch.Init(c.addrs[0], "", &opts) })
		if assert.Error(t, err, "%v", bad) {
			assert.Contains(t, err.Error(), "BackupRequestMaxExtraLoad")
		}
		var sch channel.SelectiveChannel
		require.NotPanics(t, func() { err = sch.Init("rr", &opts) })
		if assert.Error(t, err, "SelectiveChannel %v", bad) {
			assert.Contains(t, err.Error(), "BackupRequestMaxExtraLoad")
		}
	}
	// Both set (a ratio and an extra load), in every combination.
	opts.BackupRequestMaxExtraLoad, opts.BackupRequestMaxRatio = 1, 1
	var ch channel.Channel
	assert.Error(t, ch.Init(c.addrs[0], "", &opts))
	var sch channel.SelectiveChannel
	assert.Error(t, sch.Init("rr", &opts))

	for _, bad := range []float64{math.NaN(), math.Inf(1), 0, 2, -0.5, math.Copysign(0, -1)} {
		assert.Error(t, backup.MaxExtraLoadFlag.SetValue(bad), "SetValue(%v)", bad)
		assert.Equal(t, -1.0, backup.MaxExtraLoadFlag.Get())
	}
	for _, bad := range []string{"NaN", "nan", "Inf", "+Inf", "-Inf", "0", "2", "-0.5", "", "abc", "1e400", "-1e-400"} {
		assert.Error(t, flag.CommandLine.Set("backup_request_max_extra_load", bad), "Set(%q)", bad)
		assert.Equal(t, -1.0, backup.MaxExtraLoadFlag.Get(), "after Set(%q)", bad)
	}
	require.NoError(t, flag.CommandLine.Set("backup_request_max_extra_load", "0.5"))
	defer backup.MaxExtraLoadFlag.SetValue(-1)
	var fromFlag channel.Channel
	require.NoError(t, fromFlag.Init(c.addrs[0], "", nil))
	defer fromFlag.Close()
	_, ok := bvar.Describe(fromFlag.BackupVarPrefix() + "_backup_delay_us")
	assert.True(t, ok)
}

// A stall: every server gets slow, every call reaches the (learned, tiny)
// delay and asks for a backup. The budget must hold the backups to
// MaxExtraLoad × completed calls, plus less than one per second.
func TestAttack16StallBudgetHolds(t *testing.T) {
	c := startCluster(t, 2)
	p, err := backup.NewAdaptivePolicy(backup.AdaptiveOptions{MaxExtraLoad: 0.05, MinSamples: 20})
	require.NoError(t, err)
	defer p.Close()
	cp := &a16Counter{inner: p}
	ch := clusterChannel(t, c.listURL(), "rr", func(o *channel.Options) {
		o.BackupRequestPolicy = cp
		o.TimeoutMs = 3000
	})
	stub := testpb.NewEchoServiceStub(ch)
	for range 100 { // warm-up: fast calls teach a sub-ms delay
		cntl := controller.New()
		echo(stub, cntl, "x")
		require.NoError(t, cntl.Err())
	}
	d, ok := p.Delay()
	require.True(t, ok)
	require.Less(t, d, 50*time.Millisecond)

	for _, svc := range c.svcs {
		svc.Delay.Store(int64(100 * time.Millisecond))
	}
	allowed0, completed0 := cp.allowed.Load(), cp.completed.Load()
	start := time.Now()
	const runFor = 3 * time.Second
	var wg sync.WaitGroup
	for range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(start) < runFor {
				cntl := controller.New()
				echo(stub, cntl, "x")
			}
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	allowed, completed := cp.allowed.Load()-allowed0, cp.completed.Load()-completed0
	limit := 0.05*float64(completed) + math.Ceil(secs) + 2
	t.Logf("stall: %d calls completed, %d backups allowed, %d refused, %.1f s, delay now %v",
		completed, allowed, cp.refused.Load(), secs, func() time.Duration { d, _ := p.Delay(); return d }())
	assert.Positive(t, completed)
	assert.LessOrEqual(t, float64(allowed), limit, "backups beyond MaxExtraLoad × completed + 1 per second")
}

// The cold start: with no BackupRequestMs on the channel, no backup goes
// out before MinSamples calls succeeded; failures (server errors and
// timeouts) are no samples.
func TestAttack16ColdStartAndFailures(t *testing.T) {
	c := startCluster(t, 2)
	p, err := backup.NewAdaptivePolicy(backup.AdaptiveOptions{MaxExtraLoad: 1, MinSamples: 30})
	require.NoError(t, err)
	defer p.Close()
	ch := clusterChannel(t, c.listURL(), "rr", func(o *channel.Options) {
		o.BackupRequestPolicy = p
		o.TimeoutMs = 150
		o.MaxRetry = 1
	})
	stub := testpb.NewEchoServiceStub(ch)
	for i := range 40 { // failures only: server errors and timeouts
		cntl := controller.New()
		msg := "fail:2001"
		if i%4 == 0 {
			msg = "sleep:400ms"
		}
		echo(stub, cntl, msg)
		require.Error(t, cntl.Err())
		assert.False(t, cntl.HasBackupRequest(), "call %d: a backup during the cold start", i)
	}
	_, ok := p.Delay()
	require.False(t, ok, "failures are no samples")
	successes := 0
	for successes < 29 {
		cntl := controller.New()
		echo(stub, cntl, "x")
		require.NoError(t, cntl.Err())
		assert.False(t, cntl.HasBackupRequest(), "success %d: a backup during the cold start", successes)
		successes++
	}
	_, ok = p.Delay()
	assert.False(t, ok, "29 successes are not 30")
}

// A delay at or beyond the call's timeout (a MinBackupMs floor, or a
// context deadline) never fires; the call ends at its deadline.
func TestAttack16DelayAtOrBeyondTimeoutNeverFires(t *testing.T) {
	c := startCluster(t, 2)
	c.svcs[0].Delay.Store(int64(2 * time.Second))
	c.svcs[1].Delay.Store(int64(2 * time.Second))
	for _, minMs := range []int32{100, 101, 5000} {
		p := a16Trained(t, backup.AdaptiveOptions{MaxExtraLoad: 1, MinSamples: 1, MinBackupMs: minMs}, 10)
		cp := &a16Counter{inner: p}
		ch := clusterChannel(t, c.listURL(), "rr", func(o *channel.Options) {
			o.BackupRequestPolicy = cp
			o.TimeoutMs = 100
		})
		stub := testpb.NewEchoServiceStub(ch)
		cntl := controller.New()
		start := time.Now()
		echo(stub, cntl, "x")
		took := time.Since(start)
		assert.EqualValues(t, controller.ERPCTIMEDOUT, cntl.ErrorCode(), "MinBackupMs %d", minMs)
		assert.False(t, cntl.HasBackupRequest(), "MinBackupMs %d >= timeout 100 ms: no backup", minMs)
		assert.Zero(t, cp.allowed.Load()+cp.refused.Load(), "MinBackupMs %d: the policy was asked", minMs)
		assert.Less(t, took, 100*time.Millisecond+malSlack)
	}
	// A context deadline shorter than the delay.
	p := a16Trained(t, backup.AdaptiveOptions{MaxExtraLoad: 1, MinSamples: 1, MinBackupMs: 300}, 10)
	cp := &a16Counter{inner: p}
	ch := clusterChannel(t, c.listURL(), "rr", func(o *channel.Options) {
		o.BackupRequestPolicy = cp
		o.TimeoutMs = -1
	})
	stub := testpb.NewEchoServiceStub(ch)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	cntl := controller.New()
	cntl.SetContext(ctx)
	start := time.Now()
	echo(stub, cntl, "x")
	assert.True(t, cntl.Failed())
	assert.False(t, cntl.HasBackupRequest(), "the context's deadline is before the delay")
	assert.Less(t, time.Since(start), 200*time.Millisecond+malSlack)
}

// A 0 delay (every success took 0 µs) backs up at once, within the
// budget, and every call still ends at or before its deadline.
func TestAttack16ZeroDelay(t *testing.T) {
	c := startCluster(t, 2)
	c.svcs[0].Delay.Store(int64(300 * time.Millisecond))
	p := a16Trained(t, backup.AdaptiveOptions{MaxExtraLoad: 1, MinSamples: 1}, 50)
	d, _ := p.Delay()
	require.Equal(t, time.Duration(0), d)
	ch := clusterChannel(t, c.listURL(), "rr", func(o *channel.Options) {
		o.BackupRequestPolicy = p
		o.TimeoutMs = 1000
	})
	stub := testpb.NewEchoServiceStub(ch)
	for range 20 {
		cntl := controller.New()
		start := time.Now()
		echo(stub, cntl, "x")
		require.NoError(t, cntl.Err())
		assert.Less(t, time.Since(start), time.Second+malSlack)
	}
}

// Many goroutines call through channels sharing an adaptive policy, an
// owned one, a SelectiveChannel's and per-call ones, with async calls
// whose done Resets and reuses its Controller, while the policy, then
// the channels, are closed and the flag flips. Run with -race: no race,
// no panic, every call ends, done runs once per call.
func TestAttack16ConcurrentChaos(t *testing.T) {
	c := startCluster(t, 2)
	c.svcs[0].Delay.Store(int64(3 * time.Millisecond))
	c.svcs[0].DelayEveryOther.Store(true)
	shared, err := backup.NewAdaptivePolicy(backup.AdaptiveOptions{MaxExtraLoad: 0.5, MinSamples: 5, Name: "a16_chaos_shared"})
	require.NoError(t, err)
	perCall, err := backup.NewAdaptivePolicy(backup.AdaptiveOptions{MaxExtraLoad: 1, MinSamples: 1})
	require.NoError(t, err)
	defer perCall.Close()

	mk := func(edit func(o *channel.Options)) *channel.Channel {
		opts := channel.DefaultOptions()
		opts.TimeoutMs = 2000
		edit(&opts)
		ch := &channel.Channel{}
		require.NoError(t, ch.Init(c.listURL(), "rr", &opts))
		return ch
	}
	chA := mk(func(o *channel.Options) { o.BackupRequestPolicy = shared })
	chB := mk(func(o *channel.Options) { o.BackupRequestPolicy = shared; o.BackupRequestMs = 1 })
	chC := mk(func(o *channel.Options) { o.BackupRequestMaxExtraLoad = 0.3 })
	sch := &channel.SelectiveChannel{}
	sopts := channel.DefaultOptions()
	sopts.TimeoutMs = 2000
	sopts.BackupRequestMaxExtraLoad = 0.5
	require.NoError(t, sch.Init("rr", &sopts))
	for _, addr := range c.addrs {
		sub := &channel.Channel{}
		require.NoError(t, sub.Init(addr, "", nil))
		_, err := sch.AddChannel(sub, "")
		require.NoError(t, err)
	}
	callers := []channel.Caller{chA, chB, chC, sch}

	var calls, dones atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	// Async chains: done Resets the Controller and starts the next call.
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stub := testpb.NewEchoServiceStub(callers[g%len(callers)])
			cntl := controller.New()
			req := &testpb.EchoRequest{Message: proto.String("chain")}
			resp := &testpb.EchoResponse{}
			finished := make(chan struct{})
			var step func()
			n := 0
			step = func() {
				dones.Add(1)
				n++
				select {
				case <-stop:
					close(finished)
					return
				default:
				}
				if n > 400 {
					close(finished)
					return
				}
				cntl.Reset()
				if n%3 == 0 {
					cntl.SetBackupRequestPolicy(perCall)
				}
				calls.Add(1)
				stub.Echo(cntl, req, resp, step)
			}
			calls.Add(1)
			stub.Echo(cntl, req, resp, step)
			select {
			case <-finished:
			case <-time.After(60 * time.Second):
				t.Errorf("HANG: an async chain did not finish")
			}
		}()
	}
	// Sync callers with per-call policies and reused Controllers.
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stub := testpb.NewEchoServiceStub(callers[(g+1)%len(callers)])
			cntl := controller.New()
			for i := 0; i < 300; i++ {
				select {
				case <-stop:
					return
				default:
				}
				cntl.Reset()
				if i%2 == 0 {
					cntl.SetBackupRequestPolicy(perCall)
				}
				calls.Add(1)
				_, _, ok := malTryCall(t, stub, cntl, "sync", 10*time.Second)
				dones.Add(1)
				if !ok {
					return
				}
			}
		}()
	}
	// The flag flips while channels are initialized and closed.
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer backup.MaxExtraLoadFlag.SetValue(-1)
		for i := 0; i < 50; i++ {
			select {
			case <-stop:
				return
			default:
			}
			v := -1.0
			if i%2 == 0 {
				v = 0.05 + float64(i%10)/20
			}
			backup.MaxExtraLoadFlag.SetValue(v)
			ch := &channel.Channel{}
			if err := ch.Init(c.addrs[i%2], "", nil); err == nil {
				cntl := controller.New()
				echo(testpb.NewEchoServiceStub(ch), cntl, "flag")
				ch.Close()
			}
		}
	}()
	time.Sleep(300 * time.Millisecond)
	shared.Close() // still used by chA and chB
	shared.Close()
	time.Sleep(300 * time.Millisecond)
	chC.Close() // its own policy goes with it, calls in flight
	time.Sleep(300 * time.Millisecond)
	close(stop)
	waited := make(chan struct{})
	go func() { wg.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(90 * time.Second):
		t.Fatal("HANG: the callers did not finish")
	}
	chA.Close()
	chB.Close()
	sch.Close()
	assert.Equal(t, calls.Load(), dones.Load(), "done once per call")
	_, ok := bvar.Describe("a16_chaos_shared_backup_delay_us")
	assert.False(t, ok)
	_, ok = bvar.Describe(chC.BackupVarPrefix() + "_backup_delay_us")
	assert.False(t, ok)
}

// Hostile servers (garbage, resets, silence, a truncated frame) next to a
// good one, with an adaptive policy whose delay is 0: every call backs
// up at once, to whatever server. No call waits past its deadline, the
// process does not panic, and no goroutine is left.
func TestAttack16HostileServersWithAdaptiveBackups(t *testing.T) {
	malLeakCheck(t)
	good := startCluster(t, 1)
	garbage := startMalServer(t, malServe(func(s *malServer, c net.Conn, r *malRequest) bool {
		c.Write([]byte("HTTP/1.1 200 OK\r\ngarbage garbage garbage\r\n\r\n"))
		return true
	}))
	reset := startMalServer(t, malServe(func(s *malServer, c net.Conn, r *malRequest) bool {
		malReset(c)
		return false
	}))
	silent := startMalServer(t, func(s *malServer, c net.Conn) { s.holdOpen(c) })
	truncated := startMalServer(t, malServe(func(s *malServer, c net.Conn, r *malRequest) bool {
		f := malReply(r.meta.CorrelationID, r.msg)
		c.Write(f[:len(f)/2])
		return true
	}))
	wrongID := startMalServer(t, malServe(func(s *malServer, c net.Conn, r *malRequest) bool {
		c.Write(malReply(r.meta.CorrelationID+1000, r.msg))
		return true
	}))
	p := a16Trained(t, backup.AdaptiveOptions{MaxExtraLoad: 1, MinSamples: 1}, 50)
	for _, bad := range []*malServer{garbage, reset, silent, truncated, wrongID} {
		for _, ct := range malConnTypes {
			url := "list://" + bad.addr() + "," + good.addrs[0]
			_, stub := malChannel(t, url, "rr", func(o *channel.Options) {
				o.BackupRequestPolicy = p
				o.TimeoutMs = 300
				o.ConnectionType = ct
			})
			for i := range 6 {
				cntl := controller.New()
				_, took := malCall(t, stub, cntl, "x", 300*time.Millisecond+malSlack)
				assert.Less(t, took, 300*time.Millisecond+malSlack, "%s %s call %d", bad.addr(), ct, i)
				if i%2 == 1 {
					wait, _ := malAsync(t, stub, controller.New(), "y", 300*time.Millisecond)
					assert.Equal(t, int32(1), wait(300*time.Millisecond+malSlack))
				}
			}
		}
	}
	// The policy learned nothing from the failures.
	d, ok := p.Delay()
	assert.True(t, ok)
	assert.Less(t, d, 300*time.Millisecond)
}

// Channel-owned policies across many Init/Close cycles (and failed
// Inits): each cycle's variables go away with it, no goroutine is left
// (TestMain's goleak), names never collide.
func TestAttack16OwnedPolicyInitCloseCycles(t *testing.T) {
	c := startCluster(t, 1)
	opts := channel.DefaultOptions()
	opts.BackupRequestMaxExtraLoad = 0.05
	var prefixes []string
	for i := range 200 {
		ch := &channel.Channel{}
		require.NoError(t, ch.Init(c.addrs[0], "", &opts), "cycle %d", i)
		prefixes = append(prefixes, ch.BackupVarPrefix())
		if i%20 == 0 {
			cntl := controller.New()
			echo(testpb.NewEchoServiceStub(ch), cntl, "x")
			require.NoError(t, cntl.Err())
		}
		ch.Close()
		ch.Close()

		sch := &channel.SelectiveChannel{}
		require.NoError(t, sch.Init("rr", &opts))
		prefixes = append(prefixes, sch.BackupVarPrefix())
		sch.Close()

		// Init fails after the policy was built: nothing stays exposed,
		// and the channel can be initialized again.
		bad := &channel.Channel{}
		require.Error(t, bad.Init("list://"+c.addrs[0], "no_such_lb", &opts))
		prefixes = append(prefixes, bad.BackupVarPrefix())
		require.NoError(t, bad.Init(c.addrs[0], "", &opts))
		prefixes = append(prefixes, bad.BackupVarPrefix())
		bad.Close()
	}
	seen := map[string]bool{}
	for _, p := range prefixes {
		if p == "" {
			continue
		}
		assert.False(t, seen[p], "prefix %s reused", p)
		seen[p] = true
		for _, suffix := range []string{"_backup_delay_us", "_backup_budget", "_backup_sent"} {
			_, ok := bvar.Describe(p + suffix)
			assert.False(t, ok, "%s%s still exposed after Close", p, suffix)
		}
	}
	for _, name := range bvar.List() {
		if strings.HasSuffix(name, "_backup_delay_us") && strings.HasPrefix(name, "rpc_channel_") {
			t.Errorf("left exposed: %s", name)
		}
	}
}

// A policy shared by two channels: closing one channel leaves the
// caller's policy alone and the other channel keeps backing up.
func TestAttack16SharedPolicySurvivesChannelClose(t *testing.T) {
	c := startCluster(t, 2)
	c.svcs[0].Delay.Store(int64(200 * time.Millisecond))
	p := a16Trained(t, backup.AdaptiveOptions{MaxExtraLoad: 1, MinSamples: 1, MinBackupMs: 5, Name: "a16_shared2"}, 30)
	chA := clusterChannel(t, c.listURL(), "rr", func(o *channel.Options) { o.BackupRequestPolicy = p; o.TimeoutMs = 2000 })
	chB := clusterChannel(t, c.listURL(), "rr", func(o *channel.Options) { o.BackupRequestPolicy = p; o.TimeoutMs = 2000 })
	chA.Close()
	_, ok := bvar.Describe("a16_shared2_backup_delay_us")
	assert.True(t, ok, "closing a channel must not close the caller's policy")
	stub := testpb.NewEchoServiceStub(chB)
	won := 0
	for range 10 {
		cntl := controller.New()
		echo(stub, cntl, "x")
		require.NoError(t, cntl.Err())
		if cntl.BackupWon() {
			won++
		}
	}
	assert.Positive(t, won)
}

// Found by the attack: a tiny BackupRequestMaxExtraLoad (the flag set to
// "0x1p-1074", then accepted as in (0, 1]) built a policy whose default
// MinSamples overflowed negative: the first sampler tick trusted a delay of
// 0 with no sample at all. Such values are now refused, by the flag and by
// Init; a channel keeps its own BackupRequestMs.
func TestAttack16TinyExtraLoadIsRefused(t *testing.T) {
	c := startCluster(t, 1)
	assert.Error(t, flag.CommandLine.Set("backup_request_max_extra_load", "0x1p-1074"))
	assert.Equal(t, -1.0, backup.MaxExtraLoadFlag.Get(), "the flag keeps its value")
	opts := channel.DefaultOptions()
	opts.BackupRequestMaxExtraLoad = 1e-19
	ch := &channel.Channel{}
	err := ch.Init(c.addrs[0], "", &opts)
	if assert.Error(t, err) {
		assert.Contains(t, err.Error(), "BackupRequestMaxExtraLoad")
	}
}
