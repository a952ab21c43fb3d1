package limiter

import (
	"math"
	"testing"
	"time"
)

func TestExpBBR(t *testing.T) {
	variants := map[string][]float64{
		"A": {1.125, 0.875, 1, 1, 1, 1, 1, 1},
		"B": {0.875, 1, 1, 1, 1, 1, 1.125, 1},
		"C": {1.125, 1, 0.875, 1},
		"E": {1.1, 0.9, 1, 1, 1, 1, 1, 1},
		"F": {1.125, 1, 0.875, 1, 1, 1},
		"G": {1, 0.875, 1, 1.125},
		"H": {1.125, 1, 0.875, 1, 1, 1, 1, 1},
	}
	save := bbrGains
	defer func() { bbrGains = save }()
	for _, name := range []string{"A", "C", "F", "H"} {
		bbrGains = variants[name]
		for _, warm := range []bool{false, true} {
			for seed := uint64(1); seed <= 3; seed++ {
				s := newSimServer(50, 20*time.Millisecond, seed)
				s.lim = newBBR(s.clock)
				off := time.Duration(0)
				if warm {
					s.setRate(0.5 * s.capacity())
					s.run(10 * time.Second)
					off = 10 * time.Second
				}
				s.setRate(3 * s.capacity())
				s.run(60 * time.Second)
				conv := time.Duration(-1)
				maxDev := 0.0
				pts := s.between(off, off+60*time.Second)
				for i := len(pts) - 1; i >= 0; i-- {
					d := math.Abs(float64(pts[i].limit)/50 - 1)
					if d > 0.2 {
						conv = pts[i].t - off
						break
					}
				}
				for _, p := range s.between(off+30*time.Second, off+60*time.Second) {
					maxDev = max(maxDev, math.Abs(float64(p.limit)/50-1))
				}
				s.setRate(0.5 * s.capacity())
				s.run(30 * time.Second)
				adm := 0.0
				pts = s.between(off+60*time.Second, off+90*time.Second)
				for _, p := range pts {
					adm += p.admitRatio
				}
				t.Logf("%s warm=%v seed=%d conv=%v maxdev(30-60s)=%.2f lowload admit=%.4f final limit=%d", name, warm, seed, conv, maxDev, adm/float64(len(pts)), s.lim.MaxConcurrency())
			}
		}
	}
}
