package builtin

import (
	"net/http"
	"net/http/pprof"
)

// /pprof/... is Go's net/http/pprof under /pprof/ instead of
// /debug/pprof/: the index, cmdline, profile (CPU, ?seconds=N), symbol,
// trace, and every named profile (heap, goroutine, allocs, block, mutex,
// threadcreate, ...). `go tool pprof http://HOST:PORT/pprof/heap` works.
//
// Importing net/http/pprof also registers /debug/pprof/ on
// http.DefaultServeMux (its init does); see docs/en/builtin_services.md.
func (p *Pages) servePprof(w http.ResponseWriter, r *http.Request, rest string) {
	if r.URL.Path == "/pprof" { // the index's links are relative to /pprof/
		http.Redirect(w, r, "/pprof/", http.StatusMovedPermanently)
		return
	}
	switch rest {
	case "":
		pprof.Index(w, r) // a path outside /debug/pprof/ shows the index
	case "cmdline":
		pprof.Cmdline(w, r)
	case "profile":
		pprof.Profile(w, r)
	case "symbol":
		pprof.Symbol(w, r)
	case "trace":
		pprof.Trace(w, r)
	default:
		pprof.Handler(rest).ServeHTTP(w, r) // 404 "Unknown profile" for an unknown name
	}
}

// serveRpcz hands /rpcz to RpczHandler, or answers that rpcz is off.
func (p *Pages) serveRpcz(w http.ResponseWriter, r *http.Request, _ string) {
	if h := RpczHandler; h != nil {
		h.ServeHTTP(w, r)
		return
	}
	w.Header().Set("Content-Type", contentText)
	w.WriteHeader(http.StatusServiceUnavailable)
	w.Write([]byte("rpcz is not enabled (set -enable_rpcz)"))
}
