package limiter

import (
	"math/bits"
	"time"
)

// epoch anchors the monotonic clock the limiters read.
var epoch = time.Now()

// monoNow is the default clock of every limiter: nanoseconds on the
// monotonic clock, starting at one second so that 0 can mean "never".
// Tests give each limiter a fake clock instead.
func monoNow() int64 { return int64(time.Since(epoch)) + int64(time.Second) }

// maxGate bounds how many events may share one clock read.
const maxGate = 256

// gateMask amortizes clock reads at high rates. Reading the clock costs
// tens of nanoseconds (more than the rest of a limiter's hot path), so a
// limiter that sees many events per period reads it only when an event
// counter n has n&mask == 0, and still reads it about `reads` times per
// period. At low rates the mask is 0: every event reads the clock, as in
// brpc.
func gateMask(eventsPerPeriod float64, reads int64) int64 {
	n := int64(eventsPerPeriod) / reads
	if n <= 1 {
		return 0
	}
	m := int64(1) << (bits.Len64(uint64(n)) - 1) // largest power of 2 <= n
	if m > maxGate {
		m = maxGate
	}
	return m - 1
}
