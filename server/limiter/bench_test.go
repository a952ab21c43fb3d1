package limiter

import (
	"testing"
	"time"
)

// The admission check and the completion feedback, as a server runs them
// for every request: go test -bench . -benchmem ./server/limiter
func BenchmarkLimiter(b *testing.B) {
	for _, spec := range []string{"constant:1000", "auto", "bbr", "timeout"} {
		newL := func() Limiter {
			l, err := New(spec)
			if err != nil {
				b.Fatal(err)
			}
			return l
		}
		req := Request{TimeoutMs: -1}
		b.Run(spec, func(b *testing.B) {
			l := newL()
			b.ReportAllocs()
			for b.Loop() {
				if l.OnRequested(1, req) {
					l.OnResponded(0, 20*time.Microsecond)
				}
			}
		})
		b.Run(spec+"/parallel", func(b *testing.B) {
			l := newL()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if l.OnRequested(1, req) {
						l.OnResponded(0, 20*time.Microsecond)
					}
				}
			})
		})
	}
}
