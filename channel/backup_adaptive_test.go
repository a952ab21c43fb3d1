package channel_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gobrpc/gobrpc/backup"
	"github.com/gobrpc/gobrpc/bvar"
	"github.com/gobrpc/gobrpc/channel"
	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/testsupport/testpb"
)

func TestBackupMaxExtraLoadOption(t *testing.T) {
	c := startCluster(t, 1)
	var ch channel.Channel
	opts := channel.DefaultOptions()
	for _, bad := range []float64{1.5, -0.5} {
		opts.BackupRequestMaxExtraLoad = bad
		err := ch.Init(c.addrs[0], "", &opts)
		if assert.Error(t, err) {
			assert.Contains(t, err.Error(), "BackupRequestMaxExtraLoad")
		}
	}
	opts.BackupRequestMaxExtraLoad, opts.BackupRequestMaxRatio = 0.05, 0.05
	err := ch.Init(c.addrs[0], "", &opts)
	if assert.Error(t, err, "a ratio and an extra load are two policies") {
		assert.Contains(t, err.Error(), "both set")
	}

	opts.BackupRequestMaxRatio = -1
	require.NoError(t, ch.Init(c.addrs[0], "", &opts), "no backup_request_ms needed")
	_, ok := bvar.Describe(ch.BackupVarPrefix() + "_backup_delay_us")
	assert.True(t, ok, "the channel's own adaptive policy exposes its delay")
	ch.Close()
	_, ok = bvar.Describe(ch.BackupVarPrefix() + "_backup_delay_us")
	assert.False(t, ok, "Close releases the policy")

	// The flag turns it on for channels initialized afterwards; an option
	// beats both flags, and two flags at once are an error.
	require.NoError(t, backup.MaxExtraLoadFlag.SetValue(0.1))
	defer backup.MaxExtraLoadFlag.SetValue(-1)
	var fromFlag channel.Channel
	require.NoError(t, fromFlag.Init(c.addrs[0], "", nil))
	_, ok = bvar.Describe(fromFlag.BackupVarPrefix() + "_backup_delay_us")
	assert.True(t, ok)
	fromFlag.Close()

	ratioOpts := channel.DefaultOptions()
	ratioOpts.BackupRequestMaxRatio = 0.05
	var ratio channel.Channel
	require.NoError(t, ratio.Init(c.addrs[0], "", &ratioOpts), "the option beats the other flag")
	_, ok = bvar.Describe(ratio.BackupVarPrefix() + "_backup_ratio")
	assert.True(t, ok)
	ratio.Close()

	require.NoError(t, backup.MaxRatioFlag.SetValue(0.2))
	defer backup.MaxRatioFlag.SetValue(-1)
	var both channel.Channel
	err = both.Init(c.addrs[0], "", nil)
	if assert.Error(t, err) {
		assert.Contains(t, err.Error(), "backup_request_max_extra_load")
	}
}

// Real time: an adaptive policy with no delay configured learns one from
// the first calls, then backs up the slow ones to the other server.
func TestAdaptiveBackupRescuesSlowCalls(t *testing.T) {
	c := startCluster(t, 2)
	c.svcs[0].Delay.Store(int64(100 * time.Millisecond))
	c.svcs[0].DelayEveryOther.Store(true) // a quarter of all calls sleep
	p, err := backup.NewAdaptivePolicy(backup.AdaptiveOptions{MaxExtraLoad: 0.5, MinSamples: 20})
	require.NoError(t, err)
	defer p.Close()
	ch := clusterChannel(t, c.listURL(), "rr", func(o *channel.Options) {
		o.BackupRequestPolicy = p
		o.TimeoutMs = 2000
	})
	stub := testpb.NewEchoServiceStub(ch)
	rescued := 0
	for i := 0; i < 200 && rescued < 3; i++ {
		cntl := controller.New()
		echo(stub, cntl, "x")
		require.NoError(t, cntl.Err())
		if _, ok := p.Delay(); !ok {
			assert.False(t, cntl.HasBackupRequest(), "no delay, no channel backup_request_ms: no backup")
			continue
		}
		if cntl.HasBackupRequest() && cntl.BackupWon() {
			rescued++
			assert.Less(t, cntl.LatencyUs(), int64(90_000), "answered by the backup, not the sleeper")
		}
	}
	d, ok := p.Delay()
	require.True(t, ok)
	assert.Less(t, d, 50*time.Millisecond, "the p50 is a fast call's latency")
	assert.Equal(t, 3, rescued)
}

// On a SelectiveChannel (the flag-free option form) the adaptive policy's
// backups go to the other sub-channel; a Controller can carry one too.
func TestAdaptiveBackupOnSelectiveChannelAndController(t *testing.T) {
	c := startCluster(t, 2)
	c.svcs[0].Delay.Store(int64(100 * time.Millisecond))
	c.svcs[0].DelayEveryOther.Store(true)
	var sch channel.SelectiveChannel
	opts := channel.DefaultOptions()
	opts.TimeoutMs = 2000
	opts.BackupRequestMaxExtraLoad = 0.5
	require.NoError(t, sch.Init("rr", &opts))
	defer sch.Close()
	_, ok := bvar.Describe(sch.BackupVarPrefix() + "_backup_delay_us")
	assert.True(t, ok, "the SelectiveChannel's own adaptive policy")
	for _, addr := range c.addrs {
		sub := &channel.Channel{}
		require.NoError(t, sub.Init(addr, "", nil))
		_, err := sch.AddChannel(sub, "")
		require.NoError(t, err)
	}
	stub := testpb.NewEchoServiceStub(&sch)
	// The default MinSamples (100) first; then slow calls are rescued.
	rescued := 0
	for i := 0; i < 400 && rescued < 2; i++ {
		cntl := controller.New()
		echo(stub, cntl, "x")
		require.NoError(t, cntl.Err())
		if cntl.BackupWon() {
			rescued++
			assert.Equal(t, c.addrs[1], cntl.RemoteSide().String())
			assert.Less(t, cntl.LatencyUs(), int64(90_000))
		}
	}
	assert.Equal(t, 2, rescued)

	// Per call, on a plain channel with no backup settings.
	p, err := backup.NewAdaptivePolicy(backup.AdaptiveOptions{MaxExtraLoad: 1, MinSamples: 1})
	require.NoError(t, err)
	defer p.Close()
	p.OnRPCEnd(controller.New())           // one success of 0 µs: the delay is 0
	c.svcs[0].DelayEveryOther.Store(false) // every call sleeps: the backup always leaves first
	ch := clusterChannel(t, c.addrs[0], "", func(o *channel.Options) { o.TimeoutMs = 2000 })
	plain := testpb.NewEchoServiceStub(ch)
	backedUp := 0
	for range 6 {
		cntl := controller.New()
		cntl.SetBackupRequestPolicy(p)
		echo(plain, cntl, "y")
		require.NoError(t, cntl.Err())
		if cntl.HasBackupRequest() {
			backedUp++
		}
	}
	// A 0 delay backs up every call the budget allows: each ended call
	// earns one, and a new second (at most one in 0.6 s) keeps less than
	// one of what is unspent.
	assert.GreaterOrEqual(t, backedUp, 4)
	assert.Equal(t, int64(backedUp), p.Backups())
}

// multiPolicy allows every backup after ms, up to n per call.
type multiPolicy struct {
	ms    int32
	n     int
	asked atomic.Int32
}

func (p *multiPolicy) GetBackupRequestMs(*controller.Controller) int32 { return p.ms }
func (p *multiPolicy) DoBackup(*controller.Controller) bool {
	p.asked.Add(1)
	return true
}
func (p *multiPolicy) OnRPCEnd(*controller.Controller)              {}
func (p *multiPolicy) MaxBackupRequests(*controller.Controller) int { return p.n }

// With two backups allowed, a call whose first attempt and first backup
// both hit slow servers is answered by a third server one delay later.
func TestSecondBackupGoesToAThirdServer(t *testing.T) {
	c := startCluster(t, 3)
	c.svcs[0].Delay.Store(int64(400 * time.Millisecond))
	c.svcs[1].Delay.Store(int64(400 * time.Millisecond))
	p := &multiPolicy{ms: 20, n: 2}
	ch := clusterChannel(t, c.listURL(), "rr", func(o *channel.Options) {
		o.BackupRequestPolicy = p
		o.TimeoutMs = 2000
	})
	stub := testpb.NewEchoServiceStub(ch)
	twice := 0
	for range 6 {
		cntl := controller.New()
		echo(stub, cntl, "x")
		require.NoError(t, cntl.Err())
		assert.Equal(t, c.addrs[2], cntl.RemoteSide().String(), "only the fast server answers in time")
		assert.Less(t, cntl.LatencyUs(), int64(300_000))
		if cntl.RetriedCount() == 2 {
			twice++
			assert.True(t, cntl.HasBackupRequest())
			assert.True(t, cntl.BackupWon())
			assert.GreaterOrEqual(t, cntl.LatencyUs(), int64(40_000), "the second backup is due two delays after the start")
		}
	}
	assert.Positive(t, twice, "rr starts on each server in turn: some calls needed the second backup")

	// One backup only (the default): a first attempt and a backup that
	// both hit slow servers wait for them.
	one := &multiPolicy{ms: 20, n: 1}
	ch1 := clusterChannel(t, c.listURL(), "rr", func(o *channel.Options) {
		o.BackupRequestPolicy = one
		o.TimeoutMs = 2000
	})
	stub1 := testpb.NewEchoServiceStub(ch1)
	for range 6 {
		cntl := controller.New()
		echo(stub1, cntl, "x")
		require.NoError(t, cntl.Err())
		assert.LessOrEqual(t, cntl.RetriedCount(), 1)
	}
}
