//go:build !unix

package bvar

import "time"

// cpuTimes is not available here: process_cpu_usage reads 0.
func cpuTimes() (user, sys time.Duration, ok bool) { return 0, 0, false }
