// Package flags defines gobrpc's gflags-style flags on Go's
// flag.CommandLine, so `flag.Parse()` in main picks up
// --max_body_size=1048576 and every other flag the framework defines.
//
// Each flag keeps its value in an atomic, so the call path reads it with
// one load and never goes through the flag package. A flag defined with a
// validator is reloadable (brpc's rule): the /flags page may change it at
// run time, and the validator guards every change.
//
//	var maxBodySize = flags.DefineInt64("max_body_size", 64<<20,
//		"Maximum size of a single message body", flags.Positive[int64])
//	n := maxBodySize.Get()
package flags

import (
	"errors"
	"flag"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
)

// Value is implemented by every flag defined here.
type Value interface {
	flag.Value
	Name() string
	Usage() string
	DefaultString() string
	// Reloadable reports whether the flag may change at run time: it has a
	// validator, as brpc requires of reloadable gflags.
	Reloadable() bool
	// Secret reports whether the value must never be shown (DefineSecret).
	Secret() bool
}

var (
	mu       sync.Mutex
	registry = map[string]Value{}
)

// Lookup returns the gobrpc flag with that name.
func Lookup(name string) (Value, bool) {
	mu.Lock()
	defer mu.Unlock()
	v, ok := registry[name]
	return v, ok
}

// All returns every gobrpc flag, sorted by name.
func All() []Value {
	mu.Lock()
	defer mu.Unlock()
	out := make([]Value, 0, len(registry))
	for _, v := range registry {
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
	return out
}

func register(v Value) {
	mu.Lock()
	registry[v.Name()] = v
	mu.Unlock()
	flag.CommandLine.Var(v, v.Name(), v.Usage())
}

// Number is the set of value types a numeric flag can hold.
type Number interface{ ~int32 | ~int64 | ~float64 }

// Positive is a validator accepting values > 0.
func Positive[T Number](v T) error {
	if v <= 0 {
		return errors.New("must be positive")
	}
	return nil
}

// NonNegative is a validator accepting values >= 0.
func NonNegative[T Number](v T) error {
	if v < 0 {
		return errors.New("must not be negative")
	}
	return nil
}

// Flag is a typed flag whose current value is read atomically.
type Flag[T int32 | int64 | float64 | bool | string] struct {
	name, usage string
	def         T
	validate    func(T) error
	cur         atomic.Pointer[T]
	secret      bool // String shows "<hidden>" instead of a set value
}

func define[T int32 | int64 | float64 | bool | string](name string, def T, usage string, validate func(T) error) *Flag[T] {
	f := &Flag[T]{name: name, usage: usage, def: def, validate: validate}
	f.store(def)
	register(f)
	return f
}

// DefineInt32 defines an int32 flag; validate may be nil (not reloadable).
func DefineInt32(name string, def int32, usage string, validate func(int32) error) *Flag[int32] {
	return define(name, def, usage, validate)
}

// DefineInt64 defines an int64 flag; validate may be nil (not reloadable).
func DefineInt64(name string, def int64, usage string, validate func(int64) error) *Flag[int64] {
	return define(name, def, usage, validate)
}

// DefineFloat64 defines a float64 flag; validate may be nil (not reloadable).
func DefineFloat64(name string, def float64, usage string, validate func(float64) error) *Flag[float64] {
	return define(name, def, usage, validate)
}

// DefineBool defines a bool flag; validate may be nil (not reloadable).
func DefineBool(name string, def bool, usage string, validate func(bool) error) *Flag[bool] {
	return define(name, def, usage, validate)
}

// DefineString defines a string flag; validate may be nil (not reloadable).
func DefineString(name, def, usage string, validate func(string) error) *Flag[string] {
	return define(name, def, usage, validate)
}

// DefineSecret defines a string flag whose value never shows: String (and
// so /flags and -help) reads "<hidden>" once it is set. Get returns it.
// Not reloadable: /flags must not take or echo a password.
func DefineSecret(name, usage string) *Flag[string] {
	f := &Flag[string]{name: name, usage: usage, secret: true}
	f.store("")
	register(f)
	return f
}

// Get returns the current value: one atomic load.
func (f *Flag[T]) Get() T {
	return *f.cur.Load()
}

// SetValue validates and stores v; the error names the flag.
func (f *Flag[T]) SetValue(v T) error {
	if err := f.check(v); err != nil {
		return fmt.Errorf("invalid value %v for flag -%s: %w", v, f.name, err)
	}
	f.store(v)
	return nil
}

// Set parses s and stores it (flag.Value). The error is only the reason:
// the flag package, like the /flags page, says which flag and value.
func (f *Flag[T]) Set(s string) error {
	v, err := parse[T](s)
	if err != nil {
		return err
	}
	if err := f.check(v); err != nil {
		return err
	}
	f.store(v)
	return nil
}

func (f *Flag[T]) check(v T) error {
	if f.validate == nil {
		return nil
	}
	return f.validate(v)
}

// String formats the current value (flag.Value). The flag package also
// calls it on a zero Flag it makes itself, to tell whether -help should
// print the default.
func (f *Flag[T]) String() string {
	if f == nil {
		return ""
	}
	p := f.cur.Load()
	if p == nil {
		var zero T
		return format(zero)
	}
	if f.secret && any(*p) != any("") {
		return "<hidden>"
	}
	return format(*p)
}

// Secret reports whether the flag's value must never be shown.
func (f *Flag[T]) Secret() bool { return f.secret }

// IsBoolFlag lets `-flag` alone mean true for bool flags.
func (f *Flag[T]) IsBoolFlag() bool {
	var zero T
	_, ok := any(zero).(bool)
	return ok
}

// Name is the flag's name.
func (f *Flag[T]) Name() string { return f.name }

// Usage is the flag's description.
func (f *Flag[T]) Usage() string { return f.usage }

// DefaultString formats the default value.
func (f *Flag[T]) DefaultString() string { return format(f.def) }

// Reloadable reports whether the flag has a validator.
func (f *Flag[T]) Reloadable() bool { return f.validate != nil }

func (f *Flag[T]) store(v T) { f.cur.Store(&v) }

func parse[T int32 | int64 | float64 | bool | string](s string) (T, error) {
	var zero T
	var out any
	var err error
	switch any(zero).(type) {
	case int32:
		var n int64
		n, err = strconv.ParseInt(s, 0, 32)
		out = int32(n)
	case int64:
		out, err = strconv.ParseInt(s, 0, 64)
	case float64:
		out, err = strconv.ParseFloat(s, 64)
	case bool:
		out, err = strconv.ParseBool(s)
	case string:
		out = s
	}
	var ne *strconv.NumError
	switch {
	case errors.As(err, &ne) && errors.Is(ne.Err, strconv.ErrRange):
		return zero, errors.New("value out of range")
	case err != nil:
		return zero, errors.New("parse error")
	}
	return out.(T), nil
}

func format[T int32 | int64 | float64 | bool | string](v T) string {
	switch x := any(v).(type) {
	case int32:
		return strconv.FormatInt(int64(x), 10)
	case int64:
		return strconv.FormatInt(x, 10)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case bool:
		return strconv.FormatBool(x)
	case string:
		return x
	}
	return ""
}
