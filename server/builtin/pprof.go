package builtin

import (
	"io"
	"net/http"
	"net/http/pprof"
	"os"
	"strings"

	"github.com/gobrpc/gobrpc/flags"
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
		// pprof.Cmdline would show the values of secret flags.
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, strings.Join(redactSecrets(os.Args), "\x00"))
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

// redactSecrets returns args with the value of every secret flag
// (flags.DefineSecret) replaced by "<hidden>", in each form the flag
// package takes: -name=v, --name=v, -name v, --name v.
func redactSecrets(args []string) []string {
	secret := map[string]bool{}
	for _, f := range flags.All() {
		if f.Secret() {
			secret[f.Name()] = true
		}
	}
	out := append([]string(nil), args...)
	for i := 1; i < len(out); i++ {
		a := out[i]
		if a == "--" || !strings.HasPrefix(a, "-") {
			continue
		}
		name := strings.TrimLeft(a, "-")
		if n, _, ok := strings.Cut(name, "="); ok {
			if secret[n] {
				out[i] = a[:len(a)-len(name)] + n + "=<hidden>"
			}
			continue
		}
		if secret[name] && i+1 < len(out) {
			out[i+1] = "<hidden>"
			i++
		}
	}
	return out
}
