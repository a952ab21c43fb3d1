package bvar

import (
	"sync"
	"time"
)

// One goroutine samples every windowed variable once a second, in one
// pass, as brpc's SamplerCollector thread does. It starts with the first
// Window or PerSecond and exits when the last one is closed, so a process
// (or a test) that closes its windows leaves no goroutine behind.

// sampleSource is anything the sampler samples: a reducer's series, a
// latency recorder's percentile histogram.
type sampleSource interface {
	takeSample(nowNs int64)
}

var collector = struct {
	mu      sync.Mutex
	sources []sampleSource
	hooks   []sampleSource // run after every source, see SampleHook
	index   map[sampleSource]int
	stop    chan struct{} // non-nil while the goroutine runs
	manual  bool
}{index: map[sampleSource]int{}}

// addSource registers s and takes its first sample now, as brpc's
// ReducerSampler does on creation.
func addSource(s sampleSource) {
	collector.mu.Lock()
	if _, ok := collector.index[s]; !ok {
		collector.index[s] = len(collector.sources)
		collector.sources = append(collector.sources, s)
	}
	collector.mu.Unlock()
	startSampler()
	if !isManual() {
		s.takeSample(time.Now().UnixNano())
	}
}

// addHook registers a hook, sampled after every source.
func addHook(h sampleSource) {
	collector.mu.Lock()
	collector.hooks = append(collector.hooks, h)
	collector.mu.Unlock()
	startSampler()
}

func isManual() bool {
	collector.mu.Lock()
	defer collector.mu.Unlock()
	return collector.manual
}

func startSampler() {
	collector.mu.Lock()
	defer collector.mu.Unlock()
	start := !collector.manual && collector.stop == nil
	if start {
		collector.stop = make(chan struct{})
		go runSampler(collector.stop)
	}
}

func removeSource(s sampleSource) {
	collector.mu.Lock()
	defer collector.mu.Unlock()
	if i, ok := collector.index[s]; ok {
		last := len(collector.sources) - 1
		collector.sources[i] = collector.sources[last]
		collector.index[collector.sources[i]] = i
		collector.sources[last] = nil
		collector.sources = collector.sources[:last]
		delete(collector.index, s)
	}
	for i, h := range collector.hooks {
		if h == s {
			collector.hooks = append(collector.hooks[:i], collector.hooks[i+1:]...)
			break
		}
	}
	if len(collector.sources) == 0 && len(collector.hooks) == 0 && collector.stop != nil {
		close(collector.stop)
		collector.stop = nil
	}
}

// runSampler starts each round one second after the previous round
// started, whatever the round cost.
func runSampler(stop chan struct{}) {
	next := time.Now().Add(time.Second)
	t := time.NewTimer(time.Until(next))
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		samplePass(time.Now().UnixNano())
		next = next.Add(time.Second)
		if d := time.Until(next); d > 0 {
			t.Reset(d)
		} else { // fell behind (a stalled process): restart the schedule
			next = time.Now().Add(time.Second)
			t.Reset(time.Second)
		}
	}
}

func samplePass(nowNs int64) {
	collector.mu.Lock()
	sources := append([]sampleSource(nil), collector.sources...)
	hooks := append([]sampleSource(nil), collector.hooks...)
	collector.mu.Unlock()
	for _, s := range sources {
		s.takeSample(nowNs)
	}
	for _, h := range hooks {
		h.takeSample(nowNs)
	}
}

// SetManualSampling switches the sampler between the background goroutine
// (false, the default) and manual mode (true), where nothing is sampled
// until SampleAt is called. Tests use manual mode to drive windows with a
// fake clock, exactly and fast.
func SetManualSampling(manual bool) {
	collector.mu.Lock()
	defer collector.mu.Unlock()
	collector.manual = manual
	if manual && collector.stop != nil {
		close(collector.stop)
		collector.stop = nil
	}
	if !manual && collector.stop == nil && len(collector.sources)+len(collector.hooks) > 0 {
		collector.stop = make(chan struct{})
		go runSampler(collector.stop)
	}
}

// SampleAt takes one sample of every windowed variable as of now, on the
// calling goroutine. Meant for manual mode (see SetManualSampling).
func SampleAt(now time.Time) { samplePass(now.UnixNano()) }
