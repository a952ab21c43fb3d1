package bvar

import (
	"fmt"
	"strconv"
	"sync/atomic"
)

// Status holds a value set explicitly: brpc's bvar::Status.
type Status[T any] struct {
	exposed
	v atomic.Pointer[T]
}

// NewStatus returns a Status holding v, exposed as name ("" for not exposed).
func NewStatus[T any](name string, v T) *Status[T] {
	s := &Status[T]{}
	s.v.Store(&v)
	exposeOrLog(&s.exposed, s, "", name)
	return s
}

// Expose exposes the Status as name, or returns why it cannot.
func (s *Status[T]) Expose(name string) error { return s.expose(s, "", name) }

// ExposeAs exposes the Status as prefix_name.
func (s *Status[T]) ExposeAs(prefix, name string) error { return s.expose(s, prefix, name) }

// Set replaces the value.
func (s *Status[T]) Set(v T) { s.v.Store(&v) }

// Get returns the value.
func (s *Status[T]) Get() T { return *s.v.Load() }

// Describe formats the value; strings are double-quoted, as in /vars.
func (s *Status[T]) Describe() string { return formatAny(s.Get()) }

// PassiveStatus computes its value by calling a function on every read:
// brpc's bvar::PassiveStatus.
type PassiveStatus[T any] struct {
	exposed
	fn func() T
}

// NewPassiveStatus returns a PassiveStatus reading fn, exposed as name.
// fn must be safe to call from any goroutine.
func NewPassiveStatus[T any](name string, fn func() T) (*PassiveStatus[T], error) {
	if fn == nil {
		return nil, fmt.Errorf("bvar: PassiveStatus %q needs a function", name)
	}
	p := &PassiveStatus[T]{fn: fn}
	if name != "" {
		if err := p.expose(p, "", name); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// Expose exposes the PassiveStatus as name, or returns why it cannot.
func (p *PassiveStatus[T]) Expose(name string) error { return p.expose(p, "", name) }

// ExposeAs exposes the PassiveStatus as prefix_name.
func (p *PassiveStatus[T]) ExposeAs(prefix, name string) error { return p.expose(p, prefix, name) }

// Get calls the function.
func (p *PassiveStatus[T]) Get() T { return p.fn() }

// Describe formats the value.
func (p *PassiveStatus[T]) Describe() string { return formatAny(p.fn()) }

func formatAny(v any) string {
	switch x := v.(type) {
	case string:
		return strconv.Quote(x)
	case int64:
		return strconv.FormatInt(x, 10)
	case int:
		return strconv.Itoa(x)
	case int32:
		return strconv.FormatInt(int64(x), 10)
	case uint64:
		return strconv.FormatUint(x, 10)
	case float64:
		return strconv.FormatFloat(x, 'g', 6, 64)
	case float32:
		return strconv.FormatFloat(float64(x), 'g', 6, 32)
	case bool:
		return strconv.FormatBool(x)
	case fmt.Stringer:
		return strconv.Quote(x.String())
	}
	return fmt.Sprint(v)
}
