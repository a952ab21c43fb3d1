package bvar

import (
	"runtime"
	_ "unsafe" // for go:linkname
)

// Writes to a bvar go to a cell owned by the current P (Go's scheduler
// processor), the closest Go has to brpc's thread-local agents: while a
// goroutine is pinned to its P nothing else runs there, so the owner can
// update its cell with a plain atomic load and store (no lock prefix, no
// shared cache line), and readers sum every cell. runtime.procPin is what
// sync.Pool uses for the same purpose; it is reachable by linkname (the
// runtime keeps it for widely used packages, bytedance/gopkg among them).

//go:linkname procPin runtime.procPin
func procPin() int

//go:linkname procUnpin runtime.procUnpin
func procUnpin()

// cacheLine is the padding unit that keeps two cells off one cache line
// (128 covers adjacent-line prefetching on x86).
const cacheLine = 128

// numShards is the number of per-P cells a variable allocates. A P id at
// or beyond it (GOMAXPROCS raised later) falls back to a shared cell
// updated with atomic read-modify-write.
func numShards() int { return runtime.GOMAXPROCS(0) }
