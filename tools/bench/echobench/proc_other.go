//go:build !linux

package echobench

import (
	"errors"
	"time"
)

// processCPUOf reads /proc, which this system does not have.
func processCPUOf(pid int) (time.Duration, error) {
	return 0, errors.New("the CPU time of another process is read from /proc (Linux only)")
}
