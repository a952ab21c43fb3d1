//go:build !linux

package timerq

import "time"

// waiter sleeps on a channel with a runtime timer: millisecond precision
// where the runtime's poller has no better.
type waiter struct{ ch chan struct{} }

func (w *waiter) init() {}

func (w *waiter) prepare() uint32 {
	if w.ch == nil {
		w.ch = make(chan struct{}, 1)
	}
	return 0
}

func (w *waiter) sleep(_ uint32, d int64) {
	if d < 0 {
		<-w.ch
		return
	}
	t := time.NewTimer(time.Duration(d))
	select {
	case <-w.ch:
		t.Stop()
	case <-t.C:
	}
}

func (w *waiter) wake() {
	select {
	case w.ch <- struct{}{}:
	default:
	}
}
