//go:build !race

package bvar

// storeOwned writes a cell that only the pinned P writes. A plain store is
// what brpc's relaxed atomic store compiles to on x86 and ARM: aligned
// 64-bit stores are single-copy atomic there, and readers use atomic
// loads. Go has no relaxed atomic store (atomic.Store is a locked XCHG on
// amd64, twice the cost of the whole Add), so the race build below uses
// atomic stores instead, which the race detector understands.
func storeOwned(p *uint64, v uint64) { *p = v }

// loadOwned reads a cell that only the pinned P writes.
func loadOwned(p *uint64) uint64 { return *p }
