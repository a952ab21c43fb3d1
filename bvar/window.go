package bvar

import (
	"errors"
	"fmt"
	"reflect"
	"sync/atomic"
)

// MaxWindowSize is the largest window, in seconds, as in brpc.
const MaxWindowSize = 3600

// Reducer is a variable a Window or PerSecond can be built on: *Adder,
// *Maxer, *Miner and *IntRecorder.
type Reducer[T Number] interface {
	Variable
	Get() T
	series() *series[T]
}

func checkWindowArgs[T Number](r Reducer[T], seconds int) error {
	if r == nil || reflect.ValueOf(r).IsNil() {
		return errors.New("bvar: a window needs a reducer, got nil")
	}
	if seconds < 1 || seconds > MaxWindowSize {
		return fmt.Errorf("bvar: window size %d out of range [1, %d]", seconds, MaxWindowSize)
	}
	return nil
}

// Window is a reducer over the last N seconds: brpc's bvar::Window. For
// an Adder it is the sum added in the window; for an IntRecorder the
// average recorded in it; for a Maxer or Miner the extremum. It reads 0
// until two samples (one second) exist.
type Window[T Number] struct {
	exposed
	s      *series[T]
	size   int
	closed atomic.Bool
}

// NewWindow builds a window of seconds (1..3600) over r, exposed as name
// ("" for not exposed). Close it when done: it stops sampling r.
func NewWindow[T Number](name string, r Reducer[T], seconds int) (*Window[T], error) {
	if err := checkWindowArgs(r, seconds); err != nil {
		return nil, err
	}
	w := &Window[T]{s: r.series(), size: seconds}
	if name != "" {
		if err := w.expose(w, "", name); err != nil {
			return nil, err
		}
	}
	w.s.addUser(seconds)
	return w, nil
}

// Expose exposes the window as name, or returns why it cannot.
func (w *Window[T]) Expose(name string) error { return w.expose(w, "", name) }

// ExposeAs exposes the window as prefix_name.
func (w *Window[T]) ExposeAs(prefix, name string) error { return w.expose(w, prefix, name) }

// Get returns the reducer's value over the window.
func (w *Window[T]) Get() T {
	v, _ := w.s.window(w.size)
	return v
}

// Size is the window's length in seconds.
func (w *Window[T]) Size() int { return w.size }

// Describe formats the value.
func (w *Window[T]) Describe() string { return formatNumber(w.Get()) }

// Series returns the per-second values of the last n seconds, oldest
// first, for plotting.
func (w *Window[T]) Series(n int) []T { return w.s.values(n) }

// Close hides the window and stops sampling for it.
func (w *Window[T]) Close() {
	if w.closed.Swap(true) {
		return
	}
	w.Hide()
	w.s.removeUser()
}

// PerSecond is a reducer's window value divided by the seconds the window
// spans: brpc's bvar::PerSecond, e.g. the QPS of an Adder of requests.
type PerSecond[T Number] struct {
	Window[T]
}

// NewPerSecond builds a per-second rate over the last seconds of r (an
// Adder), exposed as name ("" for not exposed).
func NewPerSecond[T Number](name string, r Reducer[T], seconds int) (*PerSecond[T], error) {
	if err := checkWindowArgs(r, seconds); err != nil {
		return nil, err
	}
	s := r.series()
	if s.kind != kindReversible {
		return nil, errors.New("bvar: PerSecond needs an Adder")
	}
	p := &PerSecond[T]{Window[T]{s: s, size: seconds}}
	if name != "" {
		if err := p.expose(p, "", name); err != nil {
			return nil, err
		}
	}
	s.addUser(seconds)
	return p, nil
}

// Expose exposes the rate as name, or returns why it cannot.
func (p *PerSecond[T]) Expose(name string) error { return p.expose(p, "", name) }

// ExposeAs exposes the rate as prefix_name.
func (p *PerSecond[T]) ExposeAs(prefix, name string) error { return p.expose(p, prefix, name) }

// Get returns the rate per second over the window.
func (p *PerSecond[T]) Get() T {
	v, span := p.s.window(p.size)
	if span <= 0 {
		var zero T
		return zero
	}
	return T(float64(v) * 1e9 / float64(span))
}

// Describe formats the rate.
func (p *PerSecond[T]) Describe() string { return formatNumber(p.Get()) }
