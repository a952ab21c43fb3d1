package echobench

import (
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// processCPUOf is the user+system CPU time of another process, all its
// threads: utime + stime of /proc/PID/stat (fields 14 and 15, in clock
// ticks). The driver reads it for the processes it does not build (brpc's
// examples) at the start and the end of the measured window.
func processCPUOf(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	return parseProcStat(string(b), clockTick())
}

// parseProcStat reads utime + stime from the text of /proc/PID/stat. The
// command name (field 2) is in parentheses and may hold spaces: the fields
// counted are those after its closing parenthesis.
func parseProcStat(stat string, tick time.Duration) (time.Duration, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/PID/stat: no command name in %q", stat)
	}
	f := strings.Fields(stat[i+1:])
	// f[0] is field 3 (state): utime, field 14, is f[11]; stime f[12].
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/PID/stat: %d fields after the command name", len(f))
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/PID/stat: bad utime %q or stime %q", f[11], f[12])
	}
	return time.Duration(ut+st) * tick, nil
}

// clockTick is the unit of /proc's times: 1 / sysconf(_SC_CLK_TCK), read
// from AT_CLKTCK of this process's auxiliary vector (100 Hz if absent).
var clockTick = sync.OnceValue(func() time.Duration {
	const atClkTck = 17
	if b, err := os.ReadFile("/proc/self/auxv"); err == nil {
		w := strconv.IntSize / 8 // each entry is two words
		word := func(b []byte) uint64 {
			if w == 4 {
				return uint64(binary.NativeEndian.Uint32(b))
			}
			return binary.NativeEndian.Uint64(b)
		}
		for i := 0; i+2*w <= len(b); i += 2 * w {
			k, v := word(b[i:]), word(b[i+w:])
			if k == atClkTck && v > 0 {
				return time.Second / time.Duration(v)
			}
		}
	}
	return 10 * time.Millisecond
})
