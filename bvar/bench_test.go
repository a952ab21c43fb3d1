package bvar

import (
	"sync/atomic"
	"testing"
	"time"
)

func BenchmarkAdderAdd(b *testing.B) {
	a := NewAdder[int64]("")
	b.ReportAllocs()
	for b.Loop() {
		a.Add(1)
	}
}

func BenchmarkAdderAddParallel(b *testing.B) {
	a := NewAdder[int64]("")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			a.Add(1)
		}
	})
}

// The peer: one atomic shared by every goroutine.
func BenchmarkAtomicAddParallel(b *testing.B) {
	var n atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			n.Add(1)
		}
	})
}

func BenchmarkMaxerRecordParallel(b *testing.B) {
	m := NewMaxer[int64]("")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := int64(0)
		for pb.Next() {
			i++
			m.Record(i)
		}
	})
}

func BenchmarkIntRecorderParallel(b *testing.B) {
	r := NewIntRecorder("")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r.Record(42)
		}
	})
}

// One sampling pass over 10,000 windows (each on its own Adder).
func BenchmarkSamplerPass10000Windows(b *testing.B) {
	SetManualSampling(true)
	defer SetManualSampling(false)
	ws := make([]*Window[int64], 10000)
	for i := range ws {
		a := NewAdder[int64]("")
		a.Add(int64(i))
		w, err := NewWindow("", Reducer[int64](a), 10)
		if err != nil {
			b.Fatal(err)
		}
		ws[i] = w
	}
	defer func() {
		for _, w := range ws {
			w.Close()
		}
	}()
	now := time.Now()
	b.ResetTimer()
	for b.Loop() {
		now = now.Add(time.Second)
		SampleAt(now)
	}
}
