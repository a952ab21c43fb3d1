package transport

import (
	"log/slog"
	"time"

	"github.com/gobrpc/gobrpc/flags"
)

// HealthCheckInterval is brpc's -health_check_interval: how often a failed
// server is probed (by connecting to it) until it is revived.
var HealthCheckInterval = flags.DefineInt32("health_check_interval", 3,
	"seconds between consecutive health-checkings", flags.Positive[int32])

// healthCheckDialTimeout bounds one probe (brpc's health_check_timeout_ms).
const healthCheckDialTimeout = 500 * time.Millisecond

// Available reports whether the server may be selected: it is not marked
// failed (by a failed connect, a broken connection with requests on it,
// or an ELOGOFF answer) or it has been revived since.
func (e *Endpoint) Available() bool { return !e.failed.Load() }

// MarkFailed takes the server out of selection and starts probing it
// every health_check_interval; a successful connect revives it.
func (e *Endpoint) MarkFailed(reason string) {
	if !e.failed.CompareAndSwap(false, true) {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed || e.hcStop != nil {
		return
	}
	slog.Warn("gobrpc: server marked unavailable, health checking it", "addr", e.addr, "reason", reason)
	stop := make(chan struct{})
	e.hcStop = stop
	e.hcDone.Add(1)
	go e.healthCheck(stop)
}

// ProbeUntilUp calls probe every health_check_interval until it succeeds
// (true) or stop is closed (false). probe is given the timeout of one
// probe (brpc's health_check_timeout_ms).
func ProbeUntilUp(stop <-chan struct{}, probe func(timeout time.Duration) bool) bool {
	for {
		t := time.NewTimer(time.Duration(HealthCheckInterval.Get()) * time.Second)
		select {
		case <-stop:
			t.Stop()
			return false
		case <-t.C:
		}
		if probe(healthCheckDialTimeout) {
			return true
		}
	}
}

func (e *Endpoint) healthCheck(stop chan struct{}) {
	defer e.hcDone.Done()
	var c *ClientConn
	if !ProbeUntilUp(stop, func(timeout time.Duration) bool {
		var err error
		c, err = dial(e, timeout)
		return err == nil
	}) {
		return
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		c.Close()
		return
	}
	if e.opts.ConnType == Single {
		// Keep the probe's connection as the new shared one.
		e.live[c] = struct{}{}
		e.setSingle(c)
	} else {
		c.Close()
	}
	e.hcStop = nil
	e.failed.Store(false)
	e.mu.Unlock()
	slog.Info("gobrpc: server revived", "addr", e.addr)
}
