package builtin

import (
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gobrpc/gobrpc/bvar"
)

// The history behind the /vars charts: for every exposed variable whose
// value is a number, the last 60 one-second values and the last 60
// one-minute values (each the average of that minute's seconds), as brpc's
// bvar Series keeps them (brpc also keeps 24 hours and 30 days).
//
// One bvar.SampleHook fills it once a second, after the sampler has moved
// every window. It is shared by every Pages in the process (two servers
// do not sample twice) and lives while at least one Pages is open.

const historyLen = 60

// ring holds up to historyLen values, oldest first when read.
type ring struct {
	v    [historyLen]float64
	n    int // values held
	next int // where the next value goes
}

func (r *ring) push(v float64) {
	r.v[r.next] = v
	r.next = (r.next + 1) % historyLen
	if r.n < historyLen {
		r.n++
	}
}

// values returns the values held, oldest first.
func (r *ring) values() []float64 {
	out := make([]float64, r.n)
	start := (r.next - r.n + historyLen) % historyLen
	for i := range out {
		out[i] = r.v[(start+i)%historyLen]
	}
	return out
}

// varHistory is one variable's rings.
type varHistory struct {
	sec, min ring
	minSum   float64 // seconds of the minute in progress
	minN     int
	gen      uint64 // the pass that last saw the variable
}

func (h *varHistory) add(v float64) {
	h.sec.push(v)
	h.minSum += v
	h.minN++
	if h.minN == 60 { // every 60 seconds recorded, as brpc's Series does
		h.min.push(h.minSum / 60)
		h.minSum, h.minN = 0, 0
	}
}

// series is a copy of one variable's history.
type series struct {
	Seconds []float64 // up to 60, oldest first, one a second
	Minutes []float64 // up to 60, oldest first, one a minute
}

// history is the shared store.
type history struct {
	hook *bvar.SampleHook

	mu   sync.Mutex
	vars map[string]*varHistory
	gen  uint64
	last time.Time // the last pass

	// The pass's scratch, reused (only the hook goroutine touches it).
	scratch []namedValue
}

type namedValue struct {
	name string
	v    float64
}

var shared struct {
	mu   sync.Mutex
	refs int
	h    *history
}

// acquireHistory returns the shared history, starting its hook on first
// use.
func acquireHistory() *history {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.refs == 0 {
		h := &history{vars: map[string]*varHistory{}}
		h.hook = bvar.NewSampleHook(h.sample)
		shared.h = h
	}
	shared.refs++
	return shared.h
}

// releaseHistory drops one reference; the last one stops the hook and
// forgets everything.
func releaseHistory() {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	shared.refs--
	if shared.refs == 0 {
		shared.h.hook.Close()
		shared.h = nil
	}
}

// parseNumber reads a Describe value as a finite number; strings (quoted),
// vectors, JSON, booleans and the like are not numbers.
func parseNumber(s string) (float64, bool) {
	if s == "" {
		return 0, false
	}
	switch c := s[0]; {
	case c >= '0' && c <= '9', c == '-', c == '+', c == '.':
	default:
		return 0, false
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return float64(n), true
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, false
	}
	return f, true
}

// isCDF reports whether a Describe value is a LatencyRecorder's CDF chart
// data (see bvar's cdfVar).
func isCDF(desc string) bool { return strings.HasPrefix(desc, `{"label":"cdf","data":[`) }

// sample is the hook: one pass over every exposed variable. Values are
// read without the history's lock (Describe may compute), then stored
// under it in one go.
func (h *history) sample(now time.Time) {
	vals := h.scratch[:0]
	for _, name := range bvar.List() {
		if strings.HasSuffix(name, "_latency_cdf") || strings.HasSuffix(name, "_latency_percentiles") {
			continue // a LatencyRecorder's chart data and vector: never numbers, skip computing them
		}
		v, ok := bvar.Find(name)
		if !ok {
			continue
		}
		f, ok := parseNumber(v.Describe())
		if !ok {
			continue
		}
		vals = append(vals, namedValue{name, f})
	}
	h.mu.Lock()
	h.gen++
	for _, nv := range vals {
		e := h.vars[nv.name]
		if e == nil {
			e = &varHistory{}
			h.vars[nv.name] = e
		}
		e.add(nv.v)
		e.gen = h.gen
	}
	if len(h.vars) != len(vals) { // some variable disappeared (or turned non-numeric)
		for name, e := range h.vars {
			if e.gen != h.gen {
				delete(h.vars, name)
			}
		}
	}
	h.last = now
	h.mu.Unlock()
	clear(vals) // drop the names until the next pass
	h.scratch = vals[:0]
}

// get returns a copy of a variable's history.
func (h *history) get(name string) (series, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.vars[name]
	if e == nil {
		return series{}, false
	}
	return series{Seconds: e.sec.values(), Minutes: e.min.values()}, true
}

// getAll returns copies of the histories of names (missing ones absent),
// under one lock.
func (h *history) getAll(names []string) map[string]series {
	out := make(map[string]series, len(names))
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, n := range names {
		if e := h.vars[n]; e != nil {
			out[n] = series{Seconds: e.sec.values(), Minutes: e.min.values()}
		}
	}
	return out
}
