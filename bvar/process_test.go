package bvar

import (
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func describeFloat(t *testing.T, name string) float64 {
	t.Helper()
	d, ok := Describe(name)
	require.True(t, ok, "%s is not exposed", name)
	v, err := strconv.ParseFloat(d, 64)
	require.NoError(t, err, "%s = %q", name, d)
	return v
}

func TestProcessVariables(t *testing.T) {
	ExposeProcessVariables()
	ExposeProcessVariables() // twice is fine

	linux := runtime.GOOS == "linux"
	assert.GreaterOrEqual(t, describeFloat(t, "process_uptime"), 0.0)
	assert.GreaterOrEqual(t, describeFloat(t, "process_cpu_usage"), 0.0)
	assert.GreaterOrEqual(t, describeFloat(t, "process_cpu_usage_user"), 0.0)
	assert.GreaterOrEqual(t, describeFloat(t, "process_cpu_usage_system"), 0.0)
	if linux {
		assert.Greater(t, describeFloat(t, "process_memory_resident"), 0.0)
		assert.Greater(t, describeFloat(t, "process_memory_virtual"), describeFloat(t, "process_memory_resident"))
		assert.Greater(t, describeFloat(t, "process_fd_count"), 0.0)
		assert.Greater(t, describeFloat(t, "process_thread_count"), 0.0)
	}
	assert.Greater(t, describeFloat(t, "system_core_count"), 0.0)
	assert.Greater(t, describeFloat(t, "go_goroutines"), 0.0)
	assert.Equal(t, float64(runtime.GOMAXPROCS(0)), describeFloat(t, "go_gomaxprocs"))
	assert.Greater(t, describeFloat(t, "go_heap_alloc_bytes"), 0.0)
	assert.Greater(t, describeFloat(t, "go_heap_goal_bytes"), 0.0)
	assert.Greater(t, describeFloat(t, "go_memory_total_bytes"), describeFloat(t, "go_heap_alloc_bytes")/2)

	runtime.GC()
	assert.Greater(t, describeFloat(t, "go_gc_count"), 0.0)
	assert.Greater(t, describeFloat(t, "go_gc_pause_total_ns"), 0.0)
	assert.Greater(t, describeFloat(t, "go_gc_pause_last_ns"), 0.0)
	assert.LessOrEqual(t, describeFloat(t, "go_gc_pause_last_ns"), describeFloat(t, "go_gc_pause_total_ns"))

	v, ok := Describe("go_version")
	assert.True(t, ok)
	assert.Equal(t, strconv.Quote(runtime.Version()), v)

	// brpc's formats: "%.3f" for CPU usage, microseconds for the uptime.
	d, _ := Describe("process_cpu_usage")
	assert.Regexp(t, `^\d+\.\d{3}$`, d)
	d, _ = Describe("process_uptime")
	assert.Regexp(t, `^\d+\.\d{6}$`, d)

	// Reading concurrently is safe (run under -race).
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, name := range []string{"process_cpu_usage", "process_cpu_usage_user", "process_fd_count", "go_gc_pause_last_ns"} {
				Describe(name)
			}
		}()
	}
	wg.Wait()
}

func TestProcessFDCountSeesNewFiles(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc/self/fd is Linux's")
	}
	before := procFDCount()
	f, err := os.Open(os.DevNull)
	require.NoError(t, err)
	defer f.Close()
	assert.Equal(t, before+1, procFDCount())
}

func TestCPUMeterRateBetweenReadings(t *testing.T) {
	now := processStart.Add(10 * time.Second)
	var user, sys time.Duration = 2 * time.Second, time.Second
	ok := true
	m := newCPUMeter(func() time.Time { return now },
		func() (time.Duration, time.Duration, bool) { return user, sys, ok })

	// First read: the average since start.
	u, s := m.read()
	assert.InDelta(t, 0.2, u, 1e-9)
	assert.InDelta(t, 0.1, s, 1e-9)

	// Less than a second later: the same numbers, not a noisy short rate.
	now = now.Add(500 * time.Millisecond)
	user += 5 * time.Second
	u, s = m.read()
	assert.InDelta(t, 0.2, u, 1e-9)
	assert.InDelta(t, 0.1, s, 1e-9)

	// Two seconds after the last computation: the rate over those two.
	now = now.Add(1500 * time.Millisecond)
	user += time.Second // 6 s of user time in 2 s
	sys += time.Second  // 1 s of system time in 2 s
	u, s = m.read()
	assert.InDelta(t, 3.0, u, 1e-9)
	assert.InDelta(t, 0.5, s, 1e-9)

	// A failed reading keeps the last numbers.
	now = now.Add(5 * time.Second)
	ok = false
	u, s = m.read()
	assert.InDelta(t, 3.0, u, 1e-9)
	assert.InDelta(t, 0.5, s, 1e-9)
}
