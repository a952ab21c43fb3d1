package builtin

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gobrpc/gobrpc/flags"
)

// /pprof/... serves what Go's net/http/pprof serves under /debug/pprof/:
// the index, cmdline, profile (CPU, ?seconds=N), symbol, trace, and every
// named profile (heap, goroutine, allocs, block, mutex, threadcreate, ...)
// with ?debug=N and, for heap, ?gc=1. `go tool pprof
// http://HOST:PORT/pprof/heap` works. It is written here on runtime/pprof
// rather than importing net/http/pprof, whose init registers /debug/pprof/
// on http.DefaultServeMux: a library must not add handlers to a program's
// default mux. Delta profiles (?seconds=N on a named profile) need a
// profile parser and are refused (400).
func (p *Pages) servePprof(w http.ResponseWriter, r *http.Request, rest string) {
	if r.URL.Path == "/pprof" { // the index's links are relative to /pprof/
		http.Redirect(w, r, "/pprof/", http.StatusMovedPermanently)
		return
	}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	switch rest {
	case "":
		servePprofIndex(w, r)
	case "cmdline":
		// net/http/pprof's Cmdline would show the values of secret flags.
		w.Header().Set("Content-Type", contentText)
		io.WriteString(w, strings.Join(redactSecrets(os.Args), "\x00"))
	case "profile":
		serveCPUProfile(w, r)
	case "symbol":
		serveSymbol(w, r)
	case "trace":
		serveTrace(w, r)
	default:
		serveProfile(w, r, rest)
	}
}

// pprofDescriptions are net/http/pprof's, for the index.
var pprofDescriptions = map[string]string{
	"allocs":        "A sampling of all past memory allocations",
	"block":         "Stack traces that led to blocking on synchronization primitives",
	"cmdline":       "The command line invocation of the current program",
	"goroutine":     "Stack traces of all current goroutines. Use debug=2 as a query parameter to export in the same format as an unrecovered panic.",
	"goroutineleak": "Stack traces of all leaked goroutines. Use debug=2 as a query parameter to export in the same format as an unrecovered panic.",
	"heap":          "A sampling of memory allocations of live objects. You can specify the gc GET parameter to run GC before taking the heap sample.",
	"mutex":         "Stack traces of holders of contended mutexes",
	"profile":       "CPU profile. You can specify the duration in the seconds GET parameter. After you get the profile file, use the go tool pprof command to investigate the profile.",
	"symbol":        "Maps given program counters to function names. Counters can be specified in a GET raw query or POST body, multiple counters are separated by '+'.",
	"threadcreate":  "Stack traces that led to the creation of new OS threads",
	"trace":         "A trace of execution of the current program. You can specify the duration in the seconds GET parameter. After you get the trace file, use the go tool trace command to investigate the trace.",
}

// servePprofIndex lists runtime/pprof's profiles and the four endpoints
// of this file, with links relative to /pprof/: HTML for browsers, text
// for curl, as the other pages.
func servePprofIndex(w http.ResponseWriter, r *http.Request) {
	type entry struct {
		name, href string
		count      int // -1: not a runtime/pprof profile
	}
	var list []entry
	for _, prof := range pprof.Profiles() {
		href := (&url.URL{Path: prof.Name(), RawQuery: "debug=1"}).String() // escapes odd custom names
		list = append(list, entry{prof.Name(), href, prof.Count()})
	}
	for _, name := range []string{"cmdline", "profile", "symbol", "trace"} {
		list = append(list, entry{name, name, -1})
	}
	slices.SortFunc(list, func(a, b entry) int { return strings.Compare(a.name, b.name) })

	var b strings.Builder
	if !useHTML(r) {
		b.WriteString("/pprof/ : Go profiles; go tool pprof http://HOST:PORT/pprof/NAME, ?debug=1 for text\n\n")
		for _, e := range list {
			count := ""
			if e.count >= 0 {
				count = strconv.Itoa(e.count)
			}
			fmt.Fprintf(&b, "%6s %s : %s\n", count, e.name, pprofDescriptions[e.name])
		}
		b.WriteString("\ngoroutine?debug=2 : full goroutine stack dump\n")
		reply(w, r, contentText, b.String(), false)
		return
	}
	writeHead(&b, "/pprof/", "pprof")
	b.WriteString("<h3>/pprof/</h3>\n<p>Set debug=1 as a query parameter to export in legacy text format; " +
		"<a href='goroutine?debug=2'>full goroutine stack dump</a></p>\n" +
		"<table class=\"grid\">\n<tr><th>Count</th><th>Profile</th><th>Description</th></tr>\n")
	for _, e := range list {
		count := ""
		if e.count >= 0 {
			count = strconv.Itoa(e.count)
		}
		fmt.Fprintf(&b, "<tr><td class=\"num\">%s</td><td><a href='%s'>%s</a></td><td>%s</td></tr>\n",
			count, esc(e.href), esc(e.name), esc(pprofDescriptions[e.name]))
	}
	b.WriteString("</table>\n")
	writeTail(&b)
	reply(w, r, contentHTML, b.String(), false)
}

// pprofError answers as net/http/pprof does: X-Go-Pprof tells go tool
// pprof to show the text instead of failing to parse a profile.
func pprofError(w http.ResponseWriter, status int, text string) {
	h := w.Header()
	h.Set("Content-Type", contentText)
	h.Set("X-Go-Pprof", "1")
	h.Del("Content-Disposition")
	w.WriteHeader(status)
	io.WriteString(w, text+"\n")
}

// maxProfileDuration bounds ?seconds= of profile and trace: one request
// holds the process's only CPU profiler (or tracer) that long.
const maxProfileDuration = time.Hour

// profileDuration reads ?seconds=N (fractions too), def when absent or not
// positive, as net/http/pprof does. Past maxProfileDuration it answers 400
// and returns false. It also moves the write deadline past the profile
// when the http.Server has a WriteTimeout, as net/http/pprof does since
// Go 1.23 (it used to refuse such durations): the response is written
// only when the profile ends.
func profileDuration(w http.ResponseWriter, r *http.Request, def time.Duration) (time.Duration, bool) {
	d := def
	if sec, err := strconv.ParseFloat(r.URL.Query().Get("seconds"), 64); err == nil && sec > 0 {
		if sec > maxProfileDuration.Seconds() {
			pprofError(w, http.StatusBadRequest, fmt.Sprintf("seconds must be at most %.0f", maxProfileDuration.Seconds()))
			return 0, false
		}
		d = time.Duration(sec * float64(time.Second))
	}
	if srv, ok := r.Context().Value(http.ServerContextKey).(*http.Server); ok && srv.WriteTimeout > 0 {
		http.NewResponseController(w).SetWriteDeadline(time.Now().Add(srv.WriteTimeout + d))
	}
	return d, true
}

// waitProfile waits d, or until the client goes away (or the server
// stops): a profile nobody reads must not hold the profiler.
func waitProfile(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// serveCPUProfile is net/http/pprof's Profile: a CPU profile of ?seconds=N
// (30 by default), gzip'ed protobuf.
func serveCPUProfile(w http.ResponseWriter, r *http.Request) {
	d, ok := profileDuration(w, r, 30*time.Second)
	if !ok {
		return
	}
	// Set before StartCPUProfile: it may write to w at once.
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="profile"`)
	if err := pprof.StartCPUProfile(w); err != nil { // nothing written yet
		pprofError(w, http.StatusInternalServerError, "Could not enable CPU profiling: "+err.Error())
		return
	}
	waitProfile(r.Context(), d)
	pprof.StopCPUProfile()
}

// serveTrace is net/http/pprof's Trace: an execution trace of ?seconds=N
// (1 by default) for go tool trace.
func serveTrace(w http.ResponseWriter, r *http.Request) {
	d, ok := profileDuration(w, r, time.Second)
	if !ok {
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="trace"`)
	if err := trace.Start(w); err != nil { // nothing written yet
		pprofError(w, http.StatusInternalServerError, "Could not enable tracing: "+err.Error())
		return
	}
	waitProfile(r.Context(), d)
	trace.Stop()
}

// maxSymbolBody bounds a POST to /pprof/symbol, which is read whole.
const maxSymbolBody = 4 << 20

// serveSymbol is net/http/pprof's Symbol: "num_symbols: 1" (pprof only
// asks whether there are symbols), then "0xPC name" for each program
// counter of the query or the POST body, separated by '+'.
func serveSymbol(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", contentText)
	var in io.Reader = strings.NewReader(r.URL.RawQuery)
	if r.Method == http.MethodPost {
		in = http.MaxBytesReader(w, r.Body, maxSymbolBody)
	}
	// Read the whole body before writing: buffer the answer.
	var buf bytes.Buffer
	buf.WriteString("num_symbols: 1\n")
	br := bufio.NewReader(in)
	for {
		word, err := br.ReadString('+')
		if pc, _ := strconv.ParseUint(strings.TrimSuffix(word, "+"), 0, 64); pc != 0 {
			if f := runtime.FuncForPC(uintptr(pc)); f != nil {
				fmt.Fprintf(&buf, "%#x %s\n", pc, f.Name())
			}
		}
		if err != nil { // the last counter has no '+' after it
			if err != io.EOF {
				fmt.Fprintf(&buf, "reading request: %v\n", err)
			}
			break
		}
	}
	w.Write(buf.Bytes())
}

// serveProfile is net/http/pprof's Handler(name): the named runtime/pprof
// profile, gzip'ed protobuf, or text with ?debug=N (N > 0).
func serveProfile(w http.ResponseWriter, r *http.Request, name string) {
	prof := pprof.Lookup(name)
	if prof == nil {
		pprofError(w, http.StatusNotFound, "Unknown profile")
		return
	}
	q := r.URL.Query()
	if q.Get("seconds") != "" {
		pprofError(w, http.StatusBadRequest, `"seconds" (a delta profile) is not supported by /pprof/`+name+
			": take two profiles and compare them with go tool pprof -diff_base")
		return
	}
	if gc, _ := strconv.Atoi(q.Get("gc")); name == "heap" && gc > 0 {
		runtime.GC()
	}
	debug, _ := strconv.Atoi(q.Get("debug"))
	if debug != 0 {
		w.Header().Set("Content-Type", contentText)
	} else {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="%s"`, name))
	}
	prof.WriteTo(w, debug)
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
