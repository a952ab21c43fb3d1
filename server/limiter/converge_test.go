package limiter

import (
	"testing"
	"time"
)

func TestSimDebug(t *testing.T) {
	for _, name := range []string{"auto", "bbr", "timeout"} {
		s := newSimServer(50, 20*time.Millisecond, 1)
		switch name {
		case "auto":
			s.lim = newAuto(s.clock, func(n int64) int64 { return n / 2 }, 1)
		case "bbr":
			s.lim = newBBR(s.clock)
		case "timeout":
			s.timeoutMs = 25
			s.lim = newTimeout(500, 0, s.clock)
		}
		s.setRate(3 * s.capacity())
		s.run(60 * time.Second)
		s.setRate(0.5 * s.capacity())
		s.run(30 * time.Second)
		t.Logf("%s:\n%s", name, s.summary())
	}
}
