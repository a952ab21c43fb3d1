//go:build unix

package echobench

import (
	"syscall"
	"time"
	"unsafe"
)

// processCPU is the user+system CPU time of this process, all threads.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// latencySlots returns room for n latencies outside the Go heap (an
// anonymous mapping; only the pages written become resident), so that
// recording every call's latency neither counts as the client's
// allocations nor changes its garbage collector's pacing.
func latencySlots(n int) []uint32 {
	b, err := syscall.Mmap(-1, 0, 4*n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE|syscall.MAP_NORESERVE)
	if err != nil {
		return make([]uint32, n)
	}
	return unsafe.Slice((*uint32)(unsafe.Pointer(&b[0])), n)
}
