//go:build !unix

package echobench

import "time"

// processCPU is not measured on this system: the CPU column reads 0.
func processCPU() time.Duration { return 0 }

// latencySlots returns room for n latencies (on the Go heap here).
func latencySlots(n int) []uint32 { return make([]uint32, n) }
