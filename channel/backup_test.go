package channel_test

import (
	"strconv"
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
	"github.com/gobrpc/gobrpc/rpcz"
	"github.com/gobrpc/gobrpc/testsupport/testpb"
)

// countingPolicy records what the channel asks of a backup policy.
type countingPolicy struct {
	ms       int32
	allow    bool
	asked    atomic.Int32
	rpcEnded atomic.Int32
}

func (p *countingPolicy) GetBackupRequestMs(*controller.Controller) int32 { return p.ms }
func (p *countingPolicy) DoBackup(*controller.Controller) bool {
	p.asked.Add(1)
	return p.allow
}
func (p *countingPolicy) OnRPCEnd(*controller.Controller) { p.rpcEnded.Add(1) }

// The backup fires near backup_request_ms and wins against the sleeping
// first attempt; a single-server channel backs up to the same server.
func TestBackupWinsOnSingleServer(t *testing.T) {
	c := startCluster(t, 1)
	svc := c.svcs[0]
	svc.Delay.Store(int64(300 * time.Millisecond))
	svc.DelayEveryOther.Store(true) // the 0th, 2nd ... request sleeps
	ch := clusterChannel(t, c.addrs[0], "", func(o *channel.Options) { o.BackupRequestMs = 20; o.TimeoutMs = 1000 })
	stub := testpb.NewEchoServiceStub(ch)
	for range 3 {
		cntl := controller.New()
		resp := echo(stub, cntl, "hi")
		require.NoError(t, cntl.Err())
		assert.Equal(t, "hi", resp.GetMessage())
		assert.True(t, cntl.HasBackupRequest())
		assert.Equal(t, 1, cntl.RetriedCount(), "the backup counts as a retry")
		assert.GreaterOrEqual(t, cntl.LatencyUs(), int64(20_000))
		assert.Less(t, cntl.LatencyUs(), int64(250_000), "answered by the backup, not the sleeper")
	}
	assert.Equal(t, int64(6), svc.Calls.Load(), "every call reached the server twice")
}

// The backup goes to another server than the first attempt.
func TestBackupAvoidsTheFirstServer(t *testing.T) {
	c := startCluster(t, 2)
	c.svcs[0].Delay.Store(int64(300 * time.Millisecond)) // server 0 is slow
	ch := clusterChannel(t, c.listURL(), "rr", func(o *channel.Options) { o.BackupRequestMs = 10; o.TimeoutMs = 1000 })
	stub := testpb.NewEchoServiceStub(ch)
	backedUp := 0
	for range 10 {
		cntl := controller.New()
		echo(stub, cntl, "hi")
		require.NoError(t, cntl.Err())
		assert.Equal(t, c.addrs[1], cntl.RemoteSide().String(), "the fast server answers")
		if cntl.HasBackupRequest() {
			backedUp++
			assert.Less(t, cntl.LatencyUs(), int64(250_000))
		}
	}
	// rr alternates over first attempts and backups alike, so most calls
	// start on the slow server; each of those is backed up to the other.
	assert.GreaterOrEqual(t, backedUp, 5)
	assert.Equal(t, int64(backedUp), c.svcs[0].Calls.Load(), "every backed-up call started on the slow server")
	v, _ := bvar.Describe(ch.BackupVarPrefix() + "_backup_won")
	assert.Equal(t, strconv.Itoa(backedUp), v)
}

// Every backup sent records how late it left in <prefix>_backup_lateness
// (a LatencyRecorder): one sample per backup, never negative (a backup
// never leaves early).
func TestBackupLatenessRecorded(t *testing.T) {
	c := startCluster(t, 2)
	c.svcs[0].Delay.Store(int64(200 * time.Millisecond))
	ch := clusterChannel(t, c.listURL(), "rr", func(o *channel.Options) { o.BackupRequestMs = 10; o.TimeoutMs = 1000 })
	stub := testpb.NewEchoServiceStub(ch)
	_, ok := bvar.Describe(ch.BackupVarPrefix() + "_backup_lateness_latency")
	assert.False(t, ok, "made with the first backup")
	backups := 0
	for range 6 {
		cntl := controller.New()
		echo(stub, cntl, "hi")
		require.NoError(t, cntl.Err())
		if cntl.HasBackupRequest() {
			backups++
		}
	}
	require.Positive(t, backups)
	// Recorded once the backup is written, on the timer goroutine: its
	// answer may end the call a moment before.
	var count string
	require.Eventually(t, func() bool {
		count, _ = bvar.Describe(ch.BackupVarPrefix() + "_backup_lateness_count")
		return count == strconv.Itoa(backups)
	}, 5*time.Second, time.Millisecond, "backups %d, lateness samples %s", backups, count)
	maxLate, _ := bvar.Describe(ch.BackupVarPrefix() + "_backup_lateness_max_latency")
	n, err := strconv.Atoi(maxLate)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, n, 0)
	require.NoError(t, ch.Close())
	_, ok = bvar.Describe(ch.BackupVarPrefix() + "_backup_lateness_latency")
	assert.False(t, ok, "hidden with the channel")
}

// A veto sends nothing and the call still ends at TimeoutMs.
func TestBackupVetoKeepsTheDeadline(t *testing.T) {
	c := startCluster(t, 2)
	for _, s := range c.svcs {
		s.Delay.Store(int64(2 * time.Second))
	}
	policy := &countingPolicy{ms: 10, allow: false}
	ch := clusterChannel(t, c.listURL(), "rr", func(o *channel.Options) {
		o.TimeoutMs = 100
		o.BackupRequestPolicy = policy
	})
	cntl := controller.New()
	echo(testpb.NewEchoServiceStub(ch), cntl, "hi")
	assert.Equal(t, controller.ERPCTIMEDOUT, cntl.ErrorCode())
	assert.False(t, cntl.HasBackupRequest())
	assert.Equal(t, int32(1), policy.asked.Load())
	assert.Equal(t, int32(1), policy.rpcEnded.Load())
	assert.Equal(t, int64(1), c.svcs[0].Calls.Load()+c.svcs[1].Calls.Load(), "nothing sent after the veto")
	assert.Less(t, cntl.LatencyUs(), int64(1_000_000))
}

// max_retry = 0: no backup, and the call succeeds late instead of failing.
func TestBackupNeedsARetryLeft(t *testing.T) {
	c := startCluster(t, 2)
	for _, s := range c.svcs {
		s.Delay.Store(int64(60 * time.Millisecond))
	}
	ch := clusterChannel(t, c.listURL(), "rr", func(o *channel.Options) {
		o.BackupRequestMs = 10
		o.MaxRetry = 0
	})
	cntl := controller.New()
	resp := echo(testpb.NewEchoServiceStub(ch), cntl, "late")
	require.NoError(t, cntl.Err())
	assert.Equal(t, "late", resp.GetMessage())
	assert.False(t, cntl.HasBackupRequest())
	assert.Equal(t, int64(1), c.svcs[0].Calls.Load()+c.svcs[1].Calls.Load())
}

// Priority: the Controller beats the channel; a policy's -1 inherits the
// delay; another negative value disables; a delay >= timeout never fires.
func TestBackupSettingsPriority(t *testing.T) {
	c := startCluster(t, 1)
	c.svcs[0].Delay.Store(int64(80 * time.Millisecond))
	c.svcs[0].DelayEveryOther.Store(true)
	cases := []struct {
		name       string
		opts       func(*channel.Options)
		cntl       func(*controller.Controller)
		wantBackup bool
	}{
		{"channel ms", func(o *channel.Options) { o.BackupRequestMs = 10 }, nil, true},
		{"controller disables", func(o *channel.Options) { o.BackupRequestMs = 10 }, func(c *controller.Controller) { c.SetBackupRequestMs(-1) }, false},
		{"controller enables", nil, func(c *controller.Controller) { c.SetBackupRequestMs(10) }, true},
		{"policy -1 inherits", func(o *channel.Options) {
			o.BackupRequestMs = 10
			o.BackupRequestPolicy = &countingPolicy{ms: -1, allow: true}
		}, nil, true},
		{"policy -2 disables", func(o *channel.Options) {
			o.BackupRequestMs = 10
			o.BackupRequestPolicy = &countingPolicy{ms: -2, allow: true}
		}, nil, false},
		{"policy ms wins", func(o *channel.Options) { o.BackupRequestPolicy = &countingPolicy{ms: 10, allow: true} }, nil, true},
		{"controller policy beats channel", func(o *channel.Options) { o.BackupRequestMs = 10 },
			func(c *controller.Controller) { c.SetBackupRequestPolicy(&countingPolicy{ms: 10, allow: false}) }, false},
		{"delay >= timeout", func(o *channel.Options) { o.BackupRequestMs = 500; o.TimeoutMs = 500 }, nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c.svcs[0].Calls.Store(0) // the next request is even: it sleeps
			ch := clusterChannel(t, c.addrs[0], "", tc.opts)
			cntl := controller.New()
			if tc.cntl != nil {
				tc.cntl(cntl)
			}
			echo(testpb.NewEchoServiceStub(ch), cntl, "x")
			require.NoError(t, cntl.Err())
			assert.Equal(t, tc.wantBackup, cntl.HasBackupRequest())
		})
	}
}

// OnRPCEnd runs exactly once per RPC: sync, async, Channel and
// SelectiveChannel.
func TestOnRPCEndOncePerRPC(t *testing.T) {
	c := startCluster(t, 2)
	c.svcs[0].Delay.Store(int64(50 * time.Millisecond))
	policy := &countingPolicy{ms: 5, allow: true}
	ch := clusterChannel(t, c.listURL(), "rr", func(o *channel.Options) { o.BackupRequestPolicy = policy })
	stub := testpb.NewEchoServiceStub(ch)
	for range 4 {
		echo(stub, controller.New(), "sync")
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		cntl := controller.New()
		stub.Echo(cntl, &testpb.EchoRequest{Message: proto.String("async")}, &testpb.EchoResponse{}, wg.Done)
	}
	wg.Wait()
	assert.Equal(t, int32(8), policy.rpcEnded.Load())

	schPolicy := &countingPolicy{ms: 5, allow: true}
	var sch channel.SelectiveChannel
	require.NoError(t, sch.Init("rr", &channel.Options{BackupRequestPolicy: schPolicy, MaxRetry: 3}))
	defer sch.Close()
	for _, addr := range c.addrs {
		sub := &channel.Channel{}
		require.NoError(t, sub.Init(addr, "", nil))
		_, err := sch.AddChannel(sub, "")
		require.NoError(t, err)
	}
	sstub := testpb.NewEchoServiceStub(&sch)
	for range 4 {
		cntl := controller.New()
		resp := echo(sstub, cntl, "schan")
		require.NoError(t, cntl.Err())
		assert.Equal(t, "schan", resp.GetMessage())
	}
	for range 4 {
		wg.Add(1)
		stub := sstub
		stub.Echo(controller.New(), &testpb.EchoRequest{Message: proto.String("async")}, &testpb.EchoResponse{}, wg.Done)
	}
	wg.Wait()
	assert.Equal(t, int32(8), schPolicy.rpcEnded.Load(), "once per SelectiveChannel RPC")
	assert.Positive(t, schPolicy.asked.Load(), "the slow sub-channel was backed up")
}

// A SelectiveChannel's backup goes to another sub-channel and only the
// winner's response reaches the caller.
func TestSelectiveChannelBackupAcrossSubChannels(t *testing.T) {
	c := startCluster(t, 2)
	c.svcs[0].Delay.Store(int64(300 * time.Millisecond))
	var sch channel.SelectiveChannel
	opts := channel.DefaultOptions()
	opts.BackupRequestMs = 10
	opts.TimeoutMs = 1000
	require.NoError(t, sch.Init("rr", &opts))
	defer sch.Close()
	for _, addr := range c.addrs {
		sub := &channel.Channel{}
		require.NoError(t, sub.Init(addr, "", nil))
		_, err := sch.AddChannel(sub, "")
		require.NoError(t, err)
	}
	stub := testpb.NewEchoServiceStub(&sch)
	for i := range 6 {
		cntl := controller.New()
		cntl.RequestAttachment().WriteString("att")
		msg := string(rune('a' + i))
		resp := echo(stub, cntl, msg)
		require.NoError(t, cntl.Err())
		assert.Equal(t, msg, resp.GetMessage())
		assert.Equal(t, "att", cntl.ResponseAttachment().String(), "one attachment, not two")
		assert.Equal(t, c.addrs[1], cntl.RemoteSide().String())
		assert.Less(t, cntl.LatencyUs(), int64(250_000))
	}
}

func TestBackupMaxRatioOption(t *testing.T) {
	c := startCluster(t, 1)
	var ch channel.Channel
	opts := channel.DefaultOptions()
	opts.BackupRequestMaxRatio = 1.5
	assert.Error(t, ch.Init(c.addrs[0], "", &opts))
	opts.BackupRequestMaxRatio = -0.5
	assert.Error(t, ch.Init(c.addrs[0], "", &opts))

	opts.BackupRequestMaxRatio = 0.05
	opts.BackupRequestMs = 5
	require.NoError(t, ch.Init(c.addrs[0], "", &opts))
	_, ok := bvar.Describe(ch.BackupVarPrefix() + "_backup_ratio")
	assert.True(t, ok, "the channel's own policy exposes its ratio")
	ch.Close()
	_, ok = bvar.Describe(ch.BackupVarPrefix() + "_backup_ratio")
	assert.False(t, ok, "Close releases the policy")

	// The flag applies to channels initialized afterwards.
	require.NoError(t, backup.MaxRatioFlag.SetValue(0.2))
	defer backup.MaxRatioFlag.SetValue(-1)
	var fromFlag channel.Channel
	require.NoError(t, fromFlag.Init(c.addrs[0], "", nil))
	defer fromFlag.Close()
	_, ok = bvar.Describe(fromFlag.BackupVarPrefix() + "_backup_ratio")
	assert.True(t, ok)
}

// With rpcz on, a backed-up call shows two attempts: the backup sent at
// backup_request_ms to another server.
func TestRpczShowsTheBackupAttempt(t *testing.T) {
	require.NoError(t, rpcz.Enabled.SetValue(true))
	defer rpcz.Enabled.SetValue(false)
	rpcz.Reset()
	c := startCluster(t, 2)
	c.svcs[0].Delay.Store(int64(300 * time.Millisecond))
	ch := clusterChannel(t, c.listURL(), "rr", func(o *channel.Options) { o.BackupRequestMs = 20; o.TimeoutMs = 1000 })
	stub := testpb.NewEchoServiceStub(ch)
	for range 4 {
		cntl := controller.New()
		echo(stub, cntl, "x")
		require.NoError(t, cntl.Err())
		if cntl.HasBackupRequest() {
			break
		}
	}
	var span *rpcz.Span
	for _, s := range rpcz.Recent(100) {
		if !s.Server && len(s.Attempts) == 2 {
			span = &s
			break
		}
	}
	require.NotNil(t, span, "a client span with two attempts")
	first, backup := span.Attempts[0], span.Attempts[1]
	assert.Equal(t, c.addrs[0], first.Server)
	assert.True(t, first.Abandoned)
	assert.True(t, backup.Backup)
	assert.True(t, backup.Won)
	assert.Equal(t, c.addrs[1], backup.Server)
	offset := backup.Start.Sub(span.Start)
	assert.GreaterOrEqual(t, offset, 20*time.Millisecond)
	assert.Less(t, offset, 200*time.Millisecond)
	var b strings.Builder
	rpcz.Write(&b, []rpcz.Span{*span})
	assert.Contains(t, b.String(), "backup  1 -> "+c.addrs[1])
}
