package timerq

import (
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// The timer goroutine ends once idle: no test leaves it behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestFiresOnceAfterItsDelay(t *testing.T) {
	var tm Timer
	fired := make(chan time.Time, 2)
	start := time.Now()
	tm.Start(2*time.Millisecond, 0, false, func(arg any) { arg.(chan time.Time) <- time.Now() }, fired)
	at := <-fired
	assert.GreaterOrEqual(t, at.Sub(start), 2*time.Millisecond, "never early")
	assert.False(t, tm.Stop(), "a fired timer is not pending")
	select {
	case <-fired:
		t.Fatal("fired twice")
	case <-time.After(20 * time.Millisecond):
	}
}

func TestStopBeforeItFires(t *testing.T) {
	var tm Timer
	var ran atomic.Bool
	tm.Start(20*time.Millisecond, 0, true, func(any) { ran.Store(true) }, nil)
	assert.Len(t, Pending(), 1)
	assert.True(t, tm.Stop())
	assert.Empty(t, Pending(), "a stopped timer leaves the queue")
	assert.False(t, tm.Stop(), "stopped already")
	time.Sleep(40 * time.Millisecond)
	assert.False(t, ran.Load())
}

func TestRestartMovesIt(t *testing.T) {
	var tm Timer
	fired := make(chan int, 4)
	tm.Start(time.Hour, 0, true, func(arg any) { fired <- arg.(int) }, 1)
	tm.Start(time.Millisecond, 0, true, func(arg any) { fired <- arg.(int) }, 2) // re-arms, not a second timer
	assert.Equal(t, 2, <-fired)
	tm.Start(time.Millisecond, 0, true, func(arg any) { fired <- arg.(int) }, 3) // again, once fired
	assert.Equal(t, 3, <-fired)
	select {
	case v := <-fired:
		t.Fatalf("fired %d too", v)
	case <-time.After(20 * time.Millisecond):
	}
}

// Timers fire in due order, whatever order they were started in, and a
// timer armed sooner than the one the goroutine sleeps for wakes it.
func TestDueOrder(t *testing.T) {
	const n = 50
	timers := make([]Timer, n)
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	wg.Add(n)
	when := make([]int64, n)      // when each is due: starting them takes time too
	for i := n - 1; i >= 0; i-- { // the latest first
		timers[i].Start(time.Duration(i)*time.Millisecond+5*time.Millisecond, 0, true, func(arg any) {
			mu.Lock()
			order = append(order, arg.(int))
			mu.Unlock()
			wg.Done()
		}, i)
		queue.mu.Lock()
		when[i] = timers[i].when
		queue.mu.Unlock()
	}
	wg.Wait()
	assert.True(t, sort.SliceIsSorted(order, func(a, b int) bool { return when[order[a]] < when[order[b]] }), "%v", order)
}

// Many goroutines arm, re-arm and stop timers at once (run with -race);
// every timer not stopped fires exactly once.
func TestConcurrentStartStop(t *testing.T) {
	const workers, each = 8, 200
	var fired, expected atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			timers := make([]Timer, each)
			for i := range timers {
				timers[i].Start(time.Duration(i%7)*100*time.Microsecond, time.Duration(i%3)*time.Millisecond, i%2 == 0,
					func(any) { fired.Add(1) }, nil)
				if i%3 == 0 && timers[i].Stop() {
					continue
				}
				expected.Add(1)
			}
		}()
	}
	wg.Wait()
	require.Eventually(t, func() bool { return fired.Load() == expected.Load() }, 5*time.Second, time.Millisecond)
	time.Sleep(10 * time.Millisecond)
	assert.Equal(t, expected.Load(), fired.Load())
}

// BenchmarkLateness reports how late timers fire (the backup request's
// lateness comes from here): p50 and p99 over b.N timers of 1-3 ms,
// armed one after another as a caller's backups are.
func BenchmarkLateness(b *testing.B) {
	late := make([]time.Duration, 0, b.N)
	var tm Timer
	done := make(chan time.Time, 1)
	for i := 0; i < b.N; i++ {
		d := time.Duration(1+i%3) * time.Millisecond
		due := time.Now().Add(d)
		tm.Start(d, 0, true, func(any) { done <- time.Now() }, nil)
		late = append(late, (<-done).Sub(due))
	}
	sort.Slice(late, func(i, j int) bool { return late[i] < late[j] })
	b.ReportMetric(float64(late[len(late)/2].Microseconds()), "p50-late-µs")
	b.ReportMetric(float64(late[len(late)*99/100].Microseconds()), "p99-late-µs")
}

// BenchmarkRuntimeTimerLateness is the same with Go's time.AfterFunc.
func BenchmarkRuntimeTimerLateness(b *testing.B) {
	late := make([]time.Duration, 0, b.N)
	done := make(chan time.Time, 1)
	for i := 0; i < b.N; i++ {
		d := time.Duration(1+i%3) * time.Millisecond
		due := time.Now().Add(d)
		time.AfterFunc(d, func() { done <- time.Now() })
		late = append(late, (<-done).Sub(due))
	}
	sort.Slice(late, func(i, j int) bool { return late[i] < late[j] })
	b.ReportMetric(float64(late[len(late)/2].Microseconds()), "p50-late-µs")
	b.ReportMetric(float64(late[len(late)*99/100].Microseconds()), "p99-late-µs")
}

// BenchmarkStartStop is the per-call cost of a deadline that does not
// fire: arm, then stop.
func BenchmarkStartStop(b *testing.B) {
	b.RunParallel(func(pb *testing.PB) {
		var tm Timer
		for pb.Next() {
			tm.Start(500*time.Millisecond, time.Millisecond, false, func(any) {}, nil)
			tm.Stop()
		}
	})
}

func BenchmarkRuntimeTimerStartStop(b *testing.B) {
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			time.AfterFunc(500*time.Millisecond, func() {}).Stop()
		}
	})
}
