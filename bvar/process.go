package bvar

import (
	"bytes"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"sync"
	"time"
)

// Process variables: brpc's process_* family (src/bvar/default_variables.cpp)
// plus the Go runtime's own numbers. Every one is computed when read (a
// PassiveStatus or alike): no goroutine, nothing sampled in the
// background, nothing costs anything until /vars or /brpc_metrics asks.
//
//	process_cpu_usage          CPU cores used (user+system), "0.123"
//	process_cpu_usage_user     the user part
//	process_cpu_usage_system   the system part
//	process_memory_resident    resident set size, bytes (Linux; 0 elsewhere)
//	process_memory_virtual     virtual size, bytes (Linux; 0 elsewhere)
//	process_uptime             seconds since the process started, "12.000345"
//	process_fd_count           open file descriptors (Linux; 0 elsewhere)
//	process_thread_count       OS threads (Linux; 0 elsewhere)
//	system_core_count          logical CPUs
//	go_version                 the Go release, a string
//	go_goroutines              live goroutines
//	go_gomaxprocs              GOMAXPROCS
//	go_gc_count                completed GC cycles
//	go_gc_pause_total_ns       total stop-the-world GC pause, ns
//	go_gc_pause_last_ns        the last GC pause, ns
//	go_heap_alloc_bytes        bytes of heap objects (runtime.MemStats.HeapAlloc)
//	go_heap_goal_bytes         the heap size the next GC aims at
//	go_memory_total_bytes      memory mapped by the Go runtime (MemStats.Sys)
//
// CPU usage is a rate between two readings of getrusage at least one
// second apart, both taken on read: a read less than a second after the
// previous computation returns that computation again, so it is the usage
// over the interval between scrapes (brpc averages over a 10 s window kept
// by its sampler thread). The first read gives the average since start.

// processStart approximates the process start: package initialization
// runs before main.
var processStart = time.Now()

var processOnce sync.Once

// ExposeProcessVariables exposes the process and Go runtime variables
// listed above, once; later calls do nothing. A name already taken is
// logged and skipped, like any refused exposure. The server calls it at
// Start.
func ExposeProcessVariables() { processOnce.Do(exposeProcessVariables) }

func exposeProcessVariables() {
	cpu := newCPUMeter(time.Now, cpuTimes)
	gauges := []struct {
		name     string
		decimals int
		fn       func() float64
	}{
		{"process_cpu_usage", 3, func() float64 { u, s := cpu.read(); return u + s }},
		{"process_cpu_usage_user", 3, func() float64 { u, _ := cpu.read(); return u }},
		{"process_cpu_usage_system", 3, func() float64 { _, s := cpu.read(); return s }},
		{"process_uptime", 6, func() float64 { return time.Since(processStart).Seconds() }},
	}
	for _, g := range gauges {
		exposeProcessVar(&floatGauge{decimals: g.decimals, fn: g.fn}, g.name)
	}
	ints := []struct {
		name string
		fn   func() int64
	}{
		{"process_memory_resident", func() int64 { _, rss := procStatm(); return rss }},
		{"process_memory_virtual", func() int64 { vsz, _ := procStatm(); return vsz }},
		{"process_fd_count", procFDCount},
		{"process_thread_count", procThreadCount},
		{"system_core_count", func() int64 { return int64(runtime.NumCPU()) }},
		{"go_goroutines", func() int64 { return int64(runtime.NumGoroutine()) }},
		{"go_gomaxprocs", func() int64 { return int64(runtime.GOMAXPROCS(0)) }},
		{"go_gc_count", runtimeMetric("/gc/cycles/total:gc-cycles")},
		{"go_gc_pause_total_ns", func() int64 { total, _ := gcPauses(); return total }},
		{"go_gc_pause_last_ns", func() int64 { _, last := gcPauses(); return last }},
		{"go_heap_alloc_bytes", runtimeMetric("/memory/classes/heap/objects:bytes")},
		{"go_heap_goal_bytes", runtimeMetric("/gc/heap/goal:bytes")},
		{"go_memory_total_bytes", runtimeMetric("/memory/classes/total:bytes")},
	}
	for _, v := range ints {
		p, _ := NewPassiveStatus("", v.fn) // fn is never nil
		exposeProcessVar(p, v.name)
	}
	exposeProcessVar(NewStatus("", runtime.Version()), "go_version")
}

func exposeProcessVar(v interface{ Expose(string) error }, name string) {
	if err := v.Expose(name); err != nil {
		slog.Error(err.Error())
	}
}

// floatGauge is a float computed on read and printed with a fixed number
// of decimals, as brpc prints process_uptime ("%ld.%06ld") and
// process_cpu_usage ("%.3f").
type floatGauge struct {
	exposed
	decimals int
	fn       func() float64
}

func (g *floatGauge) Expose(name string) error { return g.expose(g, "", name) }

// Get computes the value.
func (g *floatGauge) Get() float64 { return g.fn() }

// Describe formats the value with the gauge's decimals.
func (g *floatGauge) Describe() string { return strconv.FormatFloat(g.fn(), 'f', g.decimals, 64) }

// cpuMeter turns cumulative CPU times into cores used, between readings
// at least a second apart.
type cpuMeter struct {
	now   func() time.Time
	times func() (user, sys time.Duration, ok bool)

	mu                sync.Mutex
	last              time.Time
	lastUser, lastSys time.Duration
	user, sys         float64 // cores, as last computed
	computed          bool
}

func newCPUMeter(now func() time.Time, times func() (user, sys time.Duration, ok bool)) *cpuMeter {
	// The baseline is the process start with no CPU used yet.
	return &cpuMeter{now: now, times: times, last: processStart}
}

// read returns user and system cores used since the previous computation,
// recomputing when that is at least a second old.
func (m *cpuMeter) read() (user, sys float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	dt := now.Sub(m.last)
	if m.computed && dt < time.Second {
		return m.user, m.sys
	}
	u, s, ok := m.times()
	if !ok {
		return m.user, m.sys
	}
	if dt > 0 {
		m.user = max(0, (u-m.lastUser).Seconds()/dt.Seconds())
		m.sys = max(0, (s-m.lastSys).Seconds()/dt.Seconds())
	}
	m.last, m.lastUser, m.lastSys, m.computed = now, u, s, true
	return m.user, m.sys
}

// procStatm returns the virtual and resident sizes from /proc/self/statm,
// in bytes; zeros where there is no such file.
func procStatm() (vsz, rss int64) {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, 0
	}
	f := bytes.Fields(b)
	if len(f) < 2 {
		return 0, 0
	}
	page := int64(os.Getpagesize())
	size, _ := strconv.ParseInt(string(f[0]), 10, 64)
	res, _ := strconv.ParseInt(string(f[1]), 10, 64)
	return size * page, res * page
}

// procFDCount counts the entries of /proc/self/fd, less the one reading
// it; 0 where there is no such directory.
func procFDCount() int64 {
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return 0
	}
	defer d.Close()
	var n int64
	for {
		names, err := d.Readdirnames(1024)
		n += int64(len(names))
		if err != nil || len(names) == 0 {
			break
		}
	}
	return max(0, n-1)
}

// procThreadCount reads num_threads, field 20 of /proc/self/stat; 0 where
// there is no such file.
func procThreadCount() int64 {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	if i := bytes.LastIndexByte(b, ')'); i >= 0 {
		b = b[i+1:]
	}
	f := bytes.Fields(b) // f[0] is field 3
	if len(f) < 18 {
		return 0
	}
	n, _ := strconv.ParseInt(string(f[17]), 10, 64)
	return n
}

// runtimeMetric reads one runtime/metrics value: cheap, no stop-the-world.
func runtimeMetric(name string) func() int64 {
	return func() int64 {
		s := []metrics.Sample{{Name: name}}
		metrics.Read(s)
		switch s[0].Value.Kind() {
		case metrics.KindUint64:
			return int64(s[0].Value.Uint64())
		case metrics.KindFloat64:
			return int64(s[0].Value.Float64())
		}
		return 0
	}
}

// gcPauses returns the total and the last GC pause in ns. debug.ReadGCStats
// takes the heap lock, not a stop-the-world as runtime.ReadMemStats does.
func gcPauses() (total, last int64) {
	var s debug.GCStats
	debug.ReadGCStats(&s)
	if len(s.Pause) > 0 {
		last = int64(s.Pause[0])
	}
	return int64(s.PauseTotal), last
}
