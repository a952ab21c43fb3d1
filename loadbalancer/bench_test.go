package loadbalancer

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// noneExcluded is an empty Excluded, as the channel passes on a first
// attempt; made once so that converting it allocates nothing per op.
var noneExcluded Excluded = exset{}

// BenchmarkSelect picks from 3 and 10,000 servers on all Ps.
func BenchmarkSelect(b *testing.B) {
	for _, name := range allNames {
		for _, n := range []int{3, 10000} {
			b.Run(fmt.Sprintf("%s/%d", name, n), func(b *testing.B) {
				lb := mustNew(b, name)
				lb.Update(newServers(n))
				var seed atomic.Uint64
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					code := seed.Add(1) << 20
					for pb.Next() {
						code++
						if _, err := lb.Select(pickIn(code*2654435761, noneExcluded)); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}

// BenchmarkSelectFeedbackLA is la's real cycle: Select with a begin time
// (in-flight bookkeeping), then Feedback (window, weights, tree).
func BenchmarkSelectFeedbackLA(b *testing.B) {
	for _, n := range []int{3, 10000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			lb := mustNew(b, "la")
			lb.Update(newServers(n))
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					begin := time.Now()
					s, err := lb.Select(SelectIn{Excluded: noneExcluded, BeginTime: begin})
					if err != nil {
						b.Error(err)
						return
					}
					lb.Feedback(CallInfo{Server: s, Latency: 100 * time.Microsecond, TimeoutMs: 500, BeginTime: begin})
				}
			})
		})
	}
}

// BenchmarkUpdate10000 rebuilds a 10,000-server list in which 1% of the
// servers changed since the last update (the naming service's usual
// delta), so la keeps most nodes and creates a few.
func BenchmarkUpdate10000(b *testing.B) {
	for _, name := range allNames {
		b.Run(name, func(b *testing.B) {
			base := newServers(10000)
			lists := [2][]*Server{base, append(newServers(100), base[100:]...)}
			lb := mustNew(b, name)
			lb.Update(lists[1])
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				lb.Update(lists[i%2])
			}
		})
	}
}
