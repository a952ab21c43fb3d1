package timerq

import (
	"runtime"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// waiter sleeps on a futex word, with a nanosecond timeout; a wake bumps
// the word, so a wake between prepare and sleep is never lost.
type waiter struct{ word atomic.Uint32 }

const (
	futexWaitPrivate = 128 // FUTEX_WAIT | FUTEX_PRIVATE_FLAG
	futexWakePrivate = 129 // FUTEX_WAKE | FUTEX_PRIVATE_FLAG
)

// init runs on the timer goroutine when it starts: it keeps its own thread,
// whose timer slack (how late the kernel may end a timed sleep to group
// wake-ups, 50 µs by default) is set to 1 µs. The thread ends with the
// goroutine.
func (w *waiter) init() {
	runtime.LockOSThread()
	const prSetTimerSlack = 29
	syscall.RawSyscall6(syscall.SYS_PRCTL, prSetTimerSlack, 1000, 0, 0, 0, 0)
}

func (w *waiter) prepare() uint32 { return w.word.Load() }

// sleep waits until woken or d ns passed (d < 0: until woken), unless the
// word moved on from seq.
func (w *waiter) sleep(seq uint32, d int64) {
	var ts *syscall.Timespec
	if d >= 0 {
		t := syscall.NsecToTimespec(d)
		ts = &t
	}
	// A blocking system call: the runtime hands this goroutine's P to
	// others while it sleeps.
	syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(&w.word)), futexWaitPrivate,
		uintptr(seq), uintptr(unsafe.Pointer(ts)), 0, 0)
}

func (w *waiter) wake() {
	w.word.Add(1)
	// Never blocks: no need to tell the scheduler.
	syscall.RawSyscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(&w.word)), futexWakePrivate, 1, 0, 0, 0)
}
