package limiter

import (
	"testing"
	"time"
)

func TestExpBBR2(t *testing.T) {
	s := newSimServer(50, 20*time.Millisecond, 1)
	b := newBBR(s.clock)
	s.lim = b
	s.setRate(0.5 * s.capacity())
	s.run(10 * time.Second)
	s.setRate(3 * s.capacity())
	for i := 0; i < 150; i++ {
		s.run(100 * time.Millisecond)
		p := s.trace[len(s.trace)-1]
		last := b.ring[bbrSlot(b.rolled-1)]
		sat := b.saturated(b.rolled)
		t.Logf("sat=%v t=%v limit=%d base=%d rate=%.0f inflight=%d admit=%.3f last=%+v boundAt=%d rolled=%d", sat, p.t, p.limit, b.base, b.rate, p.inflight, p.admitRatio, last, b.boundAt, b.rolled)
	}
}
