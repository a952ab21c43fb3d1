package limiter

import (
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// constant admits at most n requests at once (brpc's
// ConstantConcurrencyLimiter).
type constant struct {
	n atomic.Int64
}

// NewConstant returns a limiter that rejects a request when the
// concurrency, counting it, exceeds n. n must be > 0.
func NewConstant(n int64) Limiter {
	c := &constant{}
	c.n.Store(n)
	return c
}

func (c *constant) OnRequested(concurrency int64, _ Request) bool {
	return concurrency <= c.n.Load()
}

func (c *constant) OnResponded(int32, time.Duration) {}

func (c *constant) MaxConcurrency() int64 { return c.n.Load() }

func init() {
	Register("constant", func(param string) (Limiter, error) {
		n, err := strconv.ParseInt(strings.TrimSpace(param), 10, 64)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("limiter: constant needs a positive integer, as in \"constant:100\", got %q", param)
		}
		return NewConstant(n), nil
	})
}
