package bvar

import (
	"math"
	"strconv"
	"sync/atomic"
)

// Number is the value type of reducers: integers or floating point.
type Number interface{ int64 | float64 }

// cell is one P's share of a variable, alone on its cache line.
type cell struct {
	v uint64 // int64 or float64 bits; written by its P (storeOwned) or atomically, read atomically
	_ [cacheLine - 8]byte
}

// shardedCells are the per-P cells of one variable plus a shared overflow
// cell for Ps created after the variable (GOMAXPROCS raised).
type shardedCells struct {
	cells    []cell
	overflow cell
}

func (s *shardedCells) init(initial uint64) {
	s.cells = make([]cell, numShards())
	for i := range s.cells {
		s.cells[i].v = initial
	}
	s.overflow.v = initial
}

func isFloat[T Number]() bool {
	var zero T
	_, ok := any(zero).(float64)
	return ok
}

func toBits[T Number](float bool, v T) uint64 {
	if float {
		return math.Float64bits(float64(v))
	}
	return uint64(int64(v))
}

func fromBits[T Number](float bool, b uint64) T {
	if float {
		return T(math.Float64frombits(b))
	}
	return T(int64(b))
}

// Adder sums what is added to it: brpc's bvar::Adder. Add costs an atomic
// load and store on the caller's own per-P cell; Get sums the cells.
type Adder[T Number] struct {
	exposed
	shards shardedCells
	float  bool
	ser    lazySeries[T]
}

// NewAdder returns an Adder exposed as name ("" for not exposed; a name
// already taken is logged and left unexposed, see Expose).
func NewAdder[T Number](name string) *Adder[T] {
	a := &Adder[T]{float: isFloat[T]()}
	a.shards.init(0)
	exposeOrLog(&a.exposed, a, "", name)
	return a
}

// Expose exposes the Adder as name, or returns why it cannot.
func (a *Adder[T]) Expose(name string) error { return a.expose(a, "", name) }

// ExposeAs exposes the Adder as prefix_name (both normalized).
func (a *Adder[T]) ExposeAs(prefix, name string) error { return a.expose(a, prefix, name) }

// Add adds v.
func (a *Adder[T]) Add(v T) {
	p := procPin()
	if p < len(a.shards.cells) {
		c := &a.shards.cells[p].v
		if a.float {
			storeOwned(c, math.Float64bits(math.Float64frombits(loadOwned(c))+float64(v)))
		} else {
			storeOwned(c, loadOwned(c)+uint64(int64(v)))
		}
		procUnpin()
		return
	}
	procUnpin()
	c := &a.shards.overflow.v
	for {
		old := atomic.LoadUint64(c)
		if atomic.CompareAndSwapUint64(c, old, toBits(a.float, fromBits[T](a.float, old)+v)) {
			return
		}
	}
}

// Get returns the sum.
func (a *Adder[T]) Get() T {
	var sum T
	for i := range a.shards.cells {
		sum += fromBits[T](a.float, atomic.LoadUint64(&a.shards.cells[i].v))
	}
	return sum + fromBits[T](a.float, atomic.LoadUint64(&a.shards.overflow.v))
}

// Describe formats the sum.
func (a *Adder[T]) Describe() string { return formatNumber(a.Get()) }

func (a *Adder[T]) series() *series[T] {
	return a.ser.get(kindReversible, func() (T, int64) { return a.Get(), 0 })
}

// extremum is the shared body of Maxer and Miner: per-P cells updated
// with compare-and-swap, because sampling resets them concurrently.
type extremum[T Number] struct {
	exposed
	shards   shardedCells
	float    bool
	identity T
	better   func(a, b T) bool // a replaces b
	ser      lazySeries[T]
}

func (e *extremum[T]) update(v T) {
	p := procPin()
	c := &e.shards.overflow.v
	if p < len(e.shards.cells) {
		c = &e.shards.cells[p].v
	}
	procUnpin()
	for {
		old := atomic.LoadUint64(c)
		if !e.better(v, fromBits[T](e.float, old)) || atomic.CompareAndSwapUint64(c, old, toBits(e.float, v)) {
			return
		}
	}
}

func (e *extremum[T]) get(reset bool) T {
	best := e.identity
	id := toBits(e.float, e.identity)
	visit := func(c *uint64) {
		var b uint64
		if reset {
			b = atomic.SwapUint64(c, id)
		} else {
			b = atomic.LoadUint64(c)
		}
		if v := fromBits[T](e.float, b); e.better(v, best) {
			best = v
		}
	}
	for i := range e.shards.cells {
		visit(&e.shards.cells[i].v)
	}
	visit(&e.shards.overflow.v)
	return best
}

func (e *extremum[T]) init(identity T, better func(a, b T) bool) {
	e.float, e.identity, e.better = isFloat[T](), identity, better
	e.shards.init(toBits(e.float, identity))
}

func minOf[T Number]() T {
	if isFloat[T]() {
		return T(math.Inf(-1))
	}
	var v int64 = math.MinInt64
	return T(v)
}

func maxOf[T Number]() T {
	if isFloat[T]() {
		return T(math.Inf(1))
	}
	var v int64 = math.MaxInt64
	return T(v)
}

// Maxer keeps the largest value recorded: brpc's bvar::Maxer. Until a
// value is recorded it holds the smallest T, as brpc's does.
type Maxer[T Number] struct{ extremum[T] }

// NewMaxer returns a Maxer exposed as name ("" for not exposed).
func NewMaxer[T Number](name string) *Maxer[T] {
	m := &Maxer[T]{}
	m.init(minOf[T](), func(a, b T) bool { return a > b })
	exposeOrLog(&m.exposed, m, "", name)
	return m
}

// Expose exposes the Maxer as name, or returns why it cannot.
func (m *Maxer[T]) Expose(name string) error { return m.expose(m, "", name) }

// ExposeAs exposes the Maxer as prefix_name.
func (m *Maxer[T]) ExposeAs(prefix, name string) error { return m.expose(m, prefix, name) }

// Record keeps v if it is the largest so far.
func (m *Maxer[T]) Record(v T) { m.update(v) }

// Get returns the largest value recorded (since the last sample, once a
// Window samples this Maxer).
func (m *Maxer[T]) Get() T { return m.get(false) }

// Describe formats the value.
func (m *Maxer[T]) Describe() string { return formatNumber(m.Get()) }

func (m *Maxer[T]) series() *series[T] {
	return m.ser.get(kindMax, func() (T, int64) { return m.get(true), 0 })
}

// Miner keeps the smallest value recorded: brpc's bvar::Miner.
type Miner[T Number] struct{ extremum[T] }

// NewMiner returns a Miner exposed as name ("" for not exposed).
func NewMiner[T Number](name string) *Miner[T] {
	m := &Miner[T]{}
	m.init(maxOf[T](), func(a, b T) bool { return a < b })
	exposeOrLog(&m.exposed, m, "", name)
	return m
}

// Expose exposes the Miner as name, or returns why it cannot.
func (m *Miner[T]) Expose(name string) error { return m.expose(m, "", name) }

// ExposeAs exposes the Miner as prefix_name.
func (m *Miner[T]) ExposeAs(prefix, name string) error { return m.expose(m, prefix, name) }

// Record keeps v if it is the smallest so far.
func (m *Miner[T]) Record(v T) { m.update(v) }

// Get returns the smallest value recorded.
func (m *Miner[T]) Get() T { return m.get(false) }

// Describe formats the value.
func (m *Miner[T]) Describe() string { return formatNumber(m.Get()) }

func (m *Miner[T]) series() *series[T] {
	return m.ser.get(kindMin, func() (T, int64) { return m.get(true), 0 })
}

// IntRecorder averages what is recorded: brpc's bvar::IntRecorder. Each
// P's cell holds a sum and a count.
type IntRecorder struct {
	exposed
	cells    []recorderCell
	overflow recorderCell
	ser      lazySeries[int64]
}

type recorderCell struct {
	sum, count uint64 // written by its P (storeOwned) or atomically, read atomically
	_          [cacheLine - 16]byte
}

// NewIntRecorder returns an IntRecorder exposed as name ("" for not exposed).
func NewIntRecorder(name string) *IntRecorder {
	r := &IntRecorder{cells: make([]recorderCell, numShards())}
	exposeOrLog(&r.exposed, r, "", name)
	return r
}

// Expose exposes the IntRecorder as name, or returns why it cannot.
func (r *IntRecorder) Expose(name string) error { return r.expose(r, "", name) }

// ExposeAs exposes the IntRecorder as prefix_name.
func (r *IntRecorder) ExposeAs(prefix, name string) error { return r.expose(r, prefix, name) }

// Record adds one value.
func (r *IntRecorder) Record(v int64) {
	p := procPin()
	if p < len(r.cells) {
		c := &r.cells[p]
		storeOwned(&c.sum, loadOwned(&c.sum)+uint64(v))
		storeOwned(&c.count, loadOwned(&c.count)+1)
		procUnpin()
		return
	}
	procUnpin()
	atomic.AddUint64(&r.overflow.sum, uint64(v))
	atomic.AddUint64(&r.overflow.count, 1)
}

// SumCount returns the sum and the number of values recorded.
func (r *IntRecorder) SumCount() (sum, count int64) {
	for i := range r.cells {
		sum += int64(atomic.LoadUint64(&r.cells[i].sum))
		count += int64(atomic.LoadUint64(&r.cells[i].count))
	}
	return sum + int64(atomic.LoadUint64(&r.overflow.sum)), count + int64(atomic.LoadUint64(&r.overflow.count))
}

// Get returns the average of every value recorded (0 when none).
func (r *IntRecorder) Get() int64 {
	sum, n := r.SumCount()
	if n == 0 {
		return 0
	}
	return sum / n
}

// Describe formats the average.
func (r *IntRecorder) Describe() string { return strconv.FormatInt(r.Get(), 10) }

func (r *IntRecorder) series() *series[int64] {
	return r.ser.get(kindAverage, r.SumCount)
}

// formatNumber prints integers in full and floats as C++ streams do
// (six significant digits), like brpc's describe().
func formatNumber[T Number](v T) string {
	switch x := any(v).(type) {
	case int64:
		return strconv.FormatInt(x, 10)
	case float64:
		return strconv.FormatFloat(x, 'g', 6, 64)
	}
	return ""
}
