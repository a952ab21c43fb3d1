// Package timerq runs timed callbacks from one goroutine of its own, as
// brpc's TimerThread does, for the timers an RPC arms on every call: its
// deadline, its backup request, a server's takeover of a slow reader.
//
// Go's runtime timers have two costs on that path. Arming one that is the
// earliest of its P wakes another thread into the network poller (a futex
// wake-up and a spinning thread on every call when a process is otherwise
// idle: a few µs of a round trip of tens). And a thread waiting in the
// network poller for a timer wakes on a millisecond boundary
// (epoll_wait's timeout), so a timer fires up to 1 ms late: a 5 ms backup
// request leaves at 5-6 ms.
//
// Here one queue holds every Timer, ordered by when it is due, and one
// goroutine sleeps until the earliest, with nanosecond resolution where the
// platform has it (a futex wait on Linux; timer slack of the sleeping
// thread set low). Arming a timer wakes that goroutine only when the new
// one must fire before the goroutine would wake anyway; on a busy
// connection each new deadline is later than the ones already queued, so
// arming and stopping are a lock and a heap operation, nothing more.
package timerq

import (
	"container/heap"
	"sync"
	"time"
)

// Timer is one pending callback. The zero value is ready; embed it in what
// it belongs to (arming allocates nothing). A Timer may be started again
// once it fired or was stopped.
type Timer struct {
	when   int64 // monotonic ns (see now) when it is due
	latest int64 // when + slack: it must have fired by then
	index  int   // in the queue's heap; -1 when not queued
	queued bool
	inline bool
	fn     func(any)
	arg    any
}

// Start arms t to call fn(arg) after d. slack is how late it may fire: the
// timer goroutine is woken for t only when it would otherwise wake later
// than that, so timers with slack are grouped into fewer wake-ups. fn runs
// on a goroutine of its own, or, with inline, on the timer goroutine: it
// must then be quick and never block. Start on a pending timer re-arms it.
func (t *Timer) Start(d, slack time.Duration, inline bool, fn func(any), arg any) {
	q := &queue
	when := now() + int64(max(d, 0))
	q.mu.Lock()
	if t.queued {
		heap.Remove(&q.h, t.index)
	}
	t.when, t.latest, t.inline, t.fn, t.arg = when, when+int64(max(slack, 0)), inline, fn, arg
	t.queued = true
	heap.Push(&q.h, t)
	wake, start := false, !q.running
	if t.latest < q.wakeAt {
		// The goroutine would wake too late for t.
		q.wakeAt = t.when
		wake = q.sleeping
	}
	q.running = true
	q.mu.Unlock()
	if start {
		go q.run()
	} else if wake {
		q.wake()
	}
}

// Stop disarms t. It reports whether t was pending: false when it fired
// (fn runs or ran) or was not started.
func (t *Timer) Stop() bool {
	q := &queue
	q.mu.Lock()
	defer q.mu.Unlock()
	if !t.queued {
		return false
	}
	heap.Remove(&q.h, t.index)
	t.queued, t.fn, t.arg = false, nil, nil
	return true
}

// The process has one queue: the goroutine and its thread are shared by
// every channel and server.
var queue = timerQueue{wakeAt: never}

const never = int64(1<<63 - 1)

type timerQueue struct {
	mu       sync.Mutex
	h        timerHeap
	wakeAt   int64  // when the goroutine wakes next (never: not before an arm)
	sleeping bool   // the goroutine sleeps (or is about to) until wakeAt
	running  bool   // the goroutine runs: it ends once idle for idleExit
	waiter   waiter // how the goroutine sleeps and is woken
}

// idleExit: the goroutine ends when no timer was queued for this long, so
// that an idle process keeps no thread asleep for it (and tests find no
// goroutine left behind); the next Start starts it again. It never sleeps
// longer either, so it ends within 2 × idleExit of the last Stop.
const idleExit = 100 * time.Millisecond

func (q *timerQueue) wake() { q.waiter.wake() }

// run fires due timers and sleeps until the next one.
func (q *timerQueue) run() {
	q.waiter.init()
	var due []firing
	idleSince := int64(-1)
	for {
		q.mu.Lock()
		t := now()
		for len(q.h) > 0 && q.h[0].when <= t {
			tm := heap.Pop(&q.h).(*Timer)
			due = append(due, firing{tm.fn, tm.arg, tm.inline})
			tm.queued, tm.fn, tm.arg = false, nil, nil // it may be started again at once
		}
		// Sleep until the earliest is due (a timer armed meanwhile wakes
		// the goroutine if it must fire sooner).
		q.wakeAt = never
		if len(q.h) > 0 || len(due) > 0 {
			idleSince = -1
		}
		if len(q.h) > 0 {
			// At most idleExit: timers stopped meanwhile leave the queue
			// empty without waking the goroutine, which must notice.
			q.wakeAt = min(q.h[0].when, t+int64(idleExit))
		} else if len(due) == 0 {
			if idleSince < 0 {
				idleSince = t
			} else if t-idleSince >= int64(idleExit) {
				q.running, q.sleeping = false, false
				q.mu.Unlock()
				return
			}
			// Sleep until idleExit has passed; a timer due sooner wakes it.
			q.wakeAt = idleSince + int64(idleExit)
		}
		next := q.wakeAt
		q.sleeping = len(due) == 0
		seq := q.waiter.prepare()
		q.mu.Unlock()
		if len(due) > 0 {
			for i, f := range due {
				due[i] = firing{}
				if f.inline {
					f.fn(f.arg)
				} else {
					go f.fn(f.arg)
				}
			}
			due = due[:0]
			continue // timers may have come due meanwhile
		}
		d := int64(-1)
		if next != never {
			d = next - now()
			if d <= 0 {
				continue
			}
		}
		q.waiter.sleep(seq, d)
	}
}

type firing struct {
	fn     func(any)
	arg    any
	inline bool
}

// now is a monotonic clock in ns.
func now() int64 { return int64(time.Since(epoch)) }

var epoch = time.Now()

// timerHeap is a min-heap of queued timers by due time.
type timerHeap []*Timer

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].when < h[j].when }
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *timerHeap) Push(x any) {
	t := x.(*Timer)
	t.index = len(*h)
	*h = append(*h, t)
}
func (h *timerHeap) Pop() any {
	old := *h
	n := len(old)
	t := old[n-1]
	old[n-1] = nil
	t.index = -1
	*h = old[:n-1]
	return t
}

// Pending lists the due times (from now) of the queued timers, for tests.
func Pending() []time.Duration {
	q := &queue
	q.mu.Lock()
	defer q.mu.Unlock()
	t := now()
	out := make([]time.Duration, len(q.h))
	for i, tm := range q.h {
		out[i] = time.Duration(tm.when - t)
	}
	return out
}
