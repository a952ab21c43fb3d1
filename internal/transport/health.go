package transport

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gobrpc/gobrpc/flags"
)

// HealthCheckInterval is brpc's -health_check_interval: how often a failed
// server is probed (by connecting to it) until it is revived.
var HealthCheckInterval = flags.DefineInt32("health_check_interval", 3,
	"seconds between consecutive health-checkings", flags.Positive[int32])

// healthCheckDialTimeout bounds one probe (brpc's health_check_timeout_ms).
const healthCheckDialTimeout = 500 * time.Millisecond

// Health is whether a server may be selected: yes until something marks it
// failed (a failed connect, a broken connection with requests on it, an
// ELOGOFF answer), then no until a probe, every health_check_interval,
// succeeds. The zero value is a healthy server. Every endpoint kind
// (baidu_std's, HTTP/2's) keeps one.
type Health struct {
	failed atomic.Bool
	mu     sync.Mutex
	closed bool
	stop   chan struct{} // non-nil while a probe loop runs
	done   sync.WaitGroup
}

// Available reports whether the server may be selected.
func (h *Health) Available() bool { return !h.failed.Load() }

// MarkFailed takes the server at addr out of selection and probes it with
// probe (given the timeout of one probe) until it reports the server up;
// probe does whatever reviving needs (keeping its connection, say). A
// server marked failed already, or a closed Health, starts nothing.
func (h *Health) MarkFailed(addr, reason string, probe func(timeout time.Duration) bool) {
	if !h.failed.CompareAndSwap(false, true) {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || h.stop != nil {
		return
	}
	slog.Warn("gobrpc: server marked unavailable, health checking it", "addr", addr, "reason", reason)
	stop := make(chan struct{})
	h.stop = stop
	h.done.Add(1)
	go func() {
		defer h.done.Done()
		for {
			t := time.NewTimer(time.Duration(HealthCheckInterval.Get()) * time.Second)
			select {
			case <-stop:
				t.Stop()
				return
			case <-t.C:
			}
			if probe(healthCheckDialTimeout) {
				break
			}
		}
		h.mu.Lock()
		if h.stop == stop {
			h.stop = nil
			h.failed.Store(false)
		}
		h.mu.Unlock()
		slog.Info("gobrpc: server revived", "addr", addr)
	}()
}

// Close stops probing and waits for the probe loop to end.
func (h *Health) Close() {
	h.mu.Lock()
	h.closed = true
	if h.stop != nil {
		close(h.stop)
		h.stop = nil
	}
	h.mu.Unlock()
	h.done.Wait()
}

// Available reports whether the server may be selected (see Health).
func (e *Endpoint) Available() bool { return e.health.Available() }

// MarkFailed takes the server out of selection until a connect to it
// succeeds; a single connection made by the probe becomes the shared one.
func (e *Endpoint) MarkFailed(reason string) {
	e.health.MarkFailed(e.addr, reason, func(timeout time.Duration) bool {
		c, err := dial(e, timeout)
		if err != nil {
			return false
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.closed {
			c.Close()
			return false // Close stops the probing
		}
		if e.opts.ConnType == Single {
			// Keep the probe's connection as the new shared one.
			e.live[c] = struct{}{}
			e.setSingle(c)
		} else {
			c.Close()
		}
		return true
	})
}
