// Package ratelog writes log lines about what peers do at a bounded rate:
// a flood of malformed connections or failing writes must not become a
// flood of log lines. Each Limiter writes at most one line per interval
// and says how many it dropped since the last one.
package ratelog

import (
	"log/slog"
	"sync"
	"time"
)

// Limiter is one kind of log line, written at most once per interval.
type Limiter struct {
	interval time.Duration
	mu       sync.Mutex
	last     time.Time
	dropped  int64
}

// New returns a Limiter writing at most one line per interval.
func New(interval time.Duration) *Limiter { return &Limiter{interval: interval} }

// Warn logs at slog's Warn level, unless a line went out less than an
// interval ago; then it only counts the line, and the next one written
// carries "suppressed", the count of lines dropped meanwhile.
func (l *Limiter) Warn(msg string, args ...any) {
	now := time.Now()
	l.mu.Lock()
	if !l.last.IsZero() && now.Sub(l.last) < l.interval {
		l.dropped++
		l.mu.Unlock()
		return
	}
	l.last = now
	dropped := l.dropped
	l.dropped = 0
	l.mu.Unlock()
	if dropped > 0 {
		args = append(args, "suppressed", dropped)
	}
	slog.Warn(msg, args...)
}
