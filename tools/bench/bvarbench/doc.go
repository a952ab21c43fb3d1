// Package bvarbench compares bvar with the alternatives a Go user would
// reach for: one shared sync/atomic counter and a Prometheus client_golang
// Counter. It also checks that bvar.DumpPrometheus output is read back by
// Prometheus' own text parser. It lives in its own module (tools/bench) so
// client_golang never becomes a dependency of gobrpc itself.
package bvarbench
