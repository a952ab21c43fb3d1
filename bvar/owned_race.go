//go:build race

package bvar

import "sync/atomic"

// storeOwned: see owned_norace.go.
func storeOwned(p *uint64, v uint64) { atomic.StoreUint64(p, v) }

// loadOwned: see owned_norace.go.
func loadOwned(p *uint64) uint64 { return atomic.LoadUint64(p) }
