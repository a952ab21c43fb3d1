package channel_test

import (
	"fmt"
	"sync"
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

// stallRun drives closed-loop callers through a normal phase and then a
// stall where every server is slow, and returns, for each second of the
// stall, backups sent and calls completed. Seconds are the sampler's
// (measured in a bvar.SampleHook right after the policy set its budget),
// so each one holds exactly one budget period.
func stallRun(t *testing.T, strict bool, normal, stall time.Duration) (backups, calls []int64) {
	c := startCluster(t, 3)
	require.NoError(t, backup.StrictFlag.SetValue(strict))
	defer backup.StrictFlag.SetValue(false)
	ch := clusterChannel(t, c.listURL(), "rr", func(o *channel.Options) {
		o.BackupRequestMs = 5
		o.BackupRequestMaxRatio = 0.05
		o.TimeoutMs = 1000
	})
	stub := testpb.NewEchoServiceStub(ch)
	sent, _ := bvar.Find(ch.BackupVarPrefix() + "_backup_sent")

	var completed atomic.Int64
	var stalled atomic.Bool
	var mu sync.Mutex
	var lastSent, lastCalls int64
	hook := bvar.NewSampleHook(func(time.Time) {
		var s int64
		fmt.Sscan(sent.Describe(), &s)
		n := completed.Load()
		mu.Lock()
		if stalled.Load() {
			backups = append(backups, s-lastSent)
			calls = append(calls, n-lastCalls)
		}
		lastSent, lastCalls = s, n
		mu.Unlock()
	})
	defer hook.Close()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 16 {
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
				completed.Add(1)
			}
		}()
	}
	time.Sleep(normal)
	for _, s := range c.svcs {
		s.Delay.Store(int64(20 * time.Millisecond))
	}
	stalled.Store(true)
	time.Sleep(stall)
	close(stop)
	wg.Wait()
	hook.Close()
	mu.Lock()
	defer mu.Unlock()
	return append([]int64(nil), backups...), append([]int64(nil), calls...)
}

// After normal traffic every server turns slow for 4 s: in strict mode,
// with a max ratio of 0.05, backups stay within 0.07 of calls in every
// second of the stall after its first. (Best-effort mode is measured,
// not asserted: it backs up nearly every call.)
func TestStrictModeBoundsBackupsDuringAStall(t *testing.T) {
	if testing.Short() {
		t.Skip("real-time test")
	}
	backups, calls := stallRun(t, true, 2*time.Second, 4500*time.Millisecond)
	t.Logf("strict: backups per second %v, calls per second %v", backups, calls)
	require.GreaterOrEqual(t, len(backups), 4)
	for i := 1; i < len(backups); i++ {
		if calls[i] == 0 {
			continue
		}
		ratio := float64(backups[i]) / float64(calls[i])
		assert.LessOrEqual(t, ratio, 0.07, "second %d of the stall: %d backups / %d calls", i, backups[i], calls[i])
	}

	b, n := stallRun(t, false, 2*time.Second, 4500*time.Millisecond)
	t.Logf("best effort: backups per second %v, calls per second %v", b, n)
}
