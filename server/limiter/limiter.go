// Package limiter holds the concurrency limiters a server applies per
// method (and server-wide), as brpc's ConcurrencyLimiter: "constant" (an
// integer), "auto", "bbr" and "timeout", registered by name so users can
// add their own. A rejected request is answered with ELIMIT (HTTP 503),
// which clients retry on another server.
package limiter

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Request describes a request being admitted.
type Request struct {
	// TimeoutMs is the remaining timeout the client sent (baidu_std meta
	// field 8), or -1 when it sent none.
	TimeoutMs int64
}

// Limiter decides admission for one method (or one server).
// Implementations must be safe for concurrent use and cheap: OnRequested
// and OnResponded run on every request.
type Limiter interface {
	// OnRequested is asked when a request arrives; concurrency counts the
	// requests in flight including this one. false rejects it.
	OnRequested(concurrency int64, req Request) bool
	// OnResponded reports an admitted request's end: its error code (0
	// for success) and latency.
	OnResponded(errorCode int32, latency time.Duration)
	// MaxConcurrency is the current limit, shown as the method's
	// _max_concurrency bvar; 0 means unlimited.
	MaxConcurrency() int64
}

// Builder makes a limiter from the text after the name ("" when none).
type Builder func(param string) (Limiter, error)

var registry = struct {
	sync.RWMutex
	m map[string]Builder
}{m: map[string]Builder{}}

// Register makes name usable in MaxConcurrencyOf(...).Set(name).
func Register(name string, b Builder) {
	registry.Lock()
	defer registry.Unlock()
	registry.m[strings.ToLower(name)] = b
}

// New builds a limiter from a setting: an integer N (> 0: "constant", at
// most N in flight; 0: unlimited), "unlimited", or a registered name such
// as "auto", "bbr", "timeout" (optionally "name:param"). It returns nil
// for unlimited.
func New(spec string) (Limiter, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" || strings.EqualFold(spec, "unlimited") {
		return nil, nil
	}
	if n, err := strconv.ParseInt(spec, 10, 64); err == nil {
		if n < 0 {
			return nil, fmt.Errorf("limiter: max concurrency %d is negative", n)
		}
		if n == 0 {
			return nil, nil
		}
		return NewConstant(n), nil
	}
	name, param, _ := strings.Cut(spec, ":")
	registry.RLock()
	b, ok := registry.m[strings.ToLower(name)]
	registry.RUnlock()
	if !ok {
		return nil, fmt.Errorf("limiter: unknown max concurrency %q (an integer, \"unlimited\", or one of: %s)", spec, strings.Join(Names(), ", "))
	}
	return b(param)
}

// Names lists the registered limiters, sorted.
func Names() []string {
	registry.RLock()
	defer registry.RUnlock()
	out := make([]string, 0, len(registry.m))
	for n := range registry.m {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
