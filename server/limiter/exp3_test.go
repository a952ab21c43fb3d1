package limiter

import (
	"testing"
	"time"
)

func TestExpTimeout(t *testing.T) {
	for _, c := range []struct{ tmo, maxc int64 }{{100, 1000}, {25, 100}, {100, 100}, {30, 60}} {
		s := newSimServer(50, 20*time.Millisecond, 1)
		s.timeoutMs = c.tmo
		s.lim = newTimeout(500, c.maxc, s.clock)
		s.setRate(3 * s.capacity())
		s.run(20 * time.Second)
		s.setRate(0.5 * s.capacity())
		s.run(10 * time.Second)
		var sum, adm float64
		var n int
		for _, p := range s.between(5*time.Second, 20*time.Second) {
			sum += float64(p.inflight)
			adm += p.throughput
			n++
		}
		t.Logf("tmo=%d maxc=%d mean inflight=%.1f tput=%.0f\n%s", c.tmo, c.maxc, sum/float64(n), adm/float64(n), s.summary())
	}
}
