package server

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Requests run one after the other reuse one worker, and stop ends it.
func TestWorkerPoolReusesAndStops(t *testing.T) {
	var p workerPool
	before := runtime.NumGoroutine()
	var wg sync.WaitGroup
	for range 100 {
		wg.Add(1)
		p.run(funcTask(wg.Done))
		wg.Wait()
		waitIdle(t, &p, 1)
	}
	assert.LessOrEqual(t, runtime.NumGoroutine(), before+1, "one worker serves them all")
	p.stop()
	for deadline := time.Now().Add(2 * time.Second); runtime.NumGoroutine() > before; time.Sleep(time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "the idle worker is still there after stop")
	}

	ran := make(chan struct{})
	p.run(funcTask(func() { close(ran) })) // after stop: still runs
	<-ran
}

func waitIdle(t *testing.T, p *workerPool, n int) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(10 * time.Microsecond) {
		p.mu.Lock()
		idle := len(p.idle)
		p.mu.Unlock()
		if idle == n {
			return
		}
		require.True(t, time.Now().Before(deadline), "%d idle workers, want %d", idle, n)
	}
}

type funcTask func()

func (f funcTask) Run() { f() }
