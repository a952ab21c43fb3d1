package bvarbench

import (
	"sync/atomic"
	"testing"

	"github.com/gobrpc/gobrpc/bvar"
	"github.com/prometheus/client_golang/prometheus"
)

// Run with: go test -bench . -cpu 1,2,4,8 ./bvarbench
// The Parallel variants use b.RunParallel (GOMAXPROCS goroutines hitting
// one counter); the Serial ones add from one goroutine.

func BenchmarkBvarAdder(b *testing.B) {
	a := bvar.NewAdder[int64]("")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			a.Add(1)
		}
	})
	sink = a.Get()
}

func BenchmarkAtomicInt64(b *testing.B) {
	var n atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			n.Add(1)
		}
	})
	sink = n.Load()
}

func BenchmarkPrometheusCounterInc(b *testing.B) {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "bench_counter"})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c.Inc()
		}
	})
}

func BenchmarkBvarAdderSerial(b *testing.B) {
	a := bvar.NewAdder[int64]("")
	b.ReportAllocs()
	for b.Loop() {
		a.Add(1)
	}
	sink = a.Get()
}

func BenchmarkAtomicInt64Serial(b *testing.B) {
	var n atomic.Int64
	b.ReportAllocs()
	for b.Loop() {
		n.Add(1)
	}
	sink = n.Load()
}

func BenchmarkPrometheusCounterIncSerial(b *testing.B) {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "bench_counter"})
	b.ReportAllocs()
	for b.Loop() {
		c.Inc()
	}
}

// sink keeps the counters' results alive.
var sink int64
