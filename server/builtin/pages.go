package builtin

import (
	"compress/gzip"
	"fmt"
	"html"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/errno"
)

// Options configures the pages.
type Options struct {
	// AllowSetFlags lets /flags/NAME?setvalue=V change reloadable flags.
	// When false (the zero value) every change is refused with EPERM
	// (HTTP 403) and a hint to use the internal port. The server sets it
	// on the port that serves the builtin pages: the main port when there
	// is no internal port, otherwise the internal port only.
	AllowSetFlags bool
}

// RpczHandler serves /rpcz and everything under it once rpcz exists. Set
// it before any server starts (it is read without synchronization); while
// it is nil, /rpcz answers 503 "rpcz is not enabled".
var RpczHandler http.Handler

// Pages is the http.Handler of the builtin pages. Make it with New and
// Close it when the server stops.
type Pages struct {
	srv       Server
	opts      Options
	hist      *history
	closeOnce sync.Once
}

// New returns the builtin pages of srv. It starts recording the history of
// every numeric bvar for the /vars charts (one sampler hook per process,
// shared by every Pages); Close stops it.
func New(srv Server, opts Options) *Pages {
	return &Pages{srv: srv, opts: opts, hist: acquireHistory()}
}

// Close stops recording history (when no other Pages needs it). The pages
// still answer afterwards, with the charts frozen. Close is idempotent.
func (p *Pages) Close() {
	p.closeOnce.Do(releaseHistory)
}

// page is one builtin page: its first path segment, its handler and its
// line on the index.
type page struct {
	name  string // first path segment; "" is the index
	about string
	serve func(p *Pages, w http.ResponseWriter, r *http.Request, rest string)
}

// pages lists the builtin pages in the order of the index and the
// navigation bar; pageIndex finds them by first path segment.
var (
	pages     []page
	pageIndex map[string]page
)

func init() { // not an initializer: the handlers refer to pages
	pages = []page{
		{"status", "Status of services", (*Pages).serveStatus},
		{"vars", "List all exposed bvars (/vars/NAME;PATTERN*: selected ones; ?series: a variable's history as JSON)", (*Pages).serveVars},
		{"brpc_metrics", "All numeric bvars in the Prometheus text format", (*Pages).serveMetrics},
		{"flags", "List all flags (/flags/NAME?setvalue=VALUE changes a reloadable one)", (*Pages).serveFlags},
		{"connections", "List all connections", (*Pages).serveConnections},
		{"protobufs", "List all protobuf services and messages (/protobufs/NAME: its definition)", (*Pages).serveProtobufs},
		{"rpcz", "Recent RPC calls (needs -enable_rpcz)", (*Pages).serveRpcz},
		{"pprof", "Go profiles: heap, goroutine, CPU profile, trace ...", (*Pages).servePprof},
		{"health", "Test healthy", (*Pages).serveHealth},
		{"version", "Version of this server", (*Pages).serveVersion},
	}
	pageIndex = map[string]page{"": {serve: (*Pages).serveIndex}, "index": {name: "index", serve: (*Pages).serveIndex}}
	for _, pg := range pages {
		pageIndex[pg.name] = pg
	}
}

// splitPath returns the first segment of an URL path and what follows its
// slash: "/vars/a*;b" gives "vars", "a*;b".
func splitPath(path string) (first, rest string) {
	path = strings.TrimPrefix(path, "/")
	first, rest, _ = strings.Cut(path, "/")
	return first, rest
}

// IsBuiltinPath reports whether an URL path (without the query) is one of
// the builtin pages: "/", "/index", "/status", "/vars", "/vars/...",
// "/brpc_metrics", "/flags...", "/connections", "/protobufs...", "/rpcz...",
// "/pprof/...", "/health" and "/version". A server uses it to route, and,
// when it has an internal port, to refuse these paths on the main port.
func IsBuiltinPath(path string) bool {
	if !strings.HasPrefix(path, "/") {
		return false
	}
	first, _ := splitPath(path)
	_, ok := pageIndex[first]
	return ok
}

// ServeHTTP serves the builtin pages; any other path is ENOMETHOD (404).
func (p *Pages) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	first, rest := splitPath(r.URL.Path)
	pg, ok := pageIndex[first]
	if !ok || !strings.HasPrefix(r.URL.Path, "/") {
		fail(w, controller.ENOMETHOD, "Fail to find builtin page `%s'", r.URL.Path)
		return
	}
	pg.serve(p, w, r, rest)
}

// useHTML is brpc's UseHTML: ?console=N decides (HTML when N reads as 0,
// as C's atoi reads it); otherwise plain text when there is no User-Agent
// or it contains "curl/", HTML for everything else.
func useHTML(r *http.Request) bool {
	if v, ok := r.URL.Query()["console"]; ok {
		return atoi(v[0]) == 0
	}
	ua, ok := r.Header["User-Agent"]
	if !ok || len(ua) == 0 {
		return false
	}
	return !strings.Contains(ua[0], "curl/")
}

// atoi reads a leading decimal integer as C's atoi does: spaces, a sign,
// digits; anything else stops it, and nothing reads as 0.
func atoi(s string) int64 {
	i := 0
	for i < len(s) && (s[i] == ' ' || s[i] >= '\t' && s[i] <= '\r') {
		i++
	}
	neg := false
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		neg = s[i] == '-'
		i++
	}
	var n int64
	for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		n = n*10 + int64(s[i]-'0')
		if n > 1<<40 { // the sign is all that matters beyond this
			break
		}
	}
	if neg {
		return -n
	}
	return n
}

func hasQuery(r *http.Request, key string) bool {
	_, ok := r.URL.Query()[key]
	return ok
}

// fail answers as brpc answers a failed HTTP call: the status from the
// code, the code in the x-bd-error-code header, and the error text
// "[E<code>]<text>" as a plain-text body.
func fail(w http.ResponseWriter, code controller.Errno, format string, args ...any) {
	failStatus(w, code.HTTPStatus(), code, format, args...)
}

// failStatus is fail with an explicit HTTP status (brpc sets a few by hand).
func failStatus(w http.ResponseWriter, status int, code controller.Errno, format string, args ...any) {
	h := w.Header()
	h.Del("Content-Encoding")
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("x-bd-error-code", strconv.Itoa(int(code)))
	w.WriteHeader(status)
	io.WriteString(w, errno.Text(code, fmt.Sprintf(format, args...)))
}

const (
	contentText = "text/plain; charset=utf-8"
	contentHTML = "text/html; charset=utf-8"
)

// reply writes a whole page, gzip-compressed when the client accepts it
// and compress is set (brpc compresses /vars, /flags and /status).
func reply(w http.ResponseWriter, r *http.Request, contentType, body string, compress bool) {
	h := w.Header()
	h.Set("Content-Type", contentType)
	if compress {
		h.Add("Vary", "Accept-Encoding")
	}
	if !compress || !acceptsGzip(r) {
		h.Set("Content-Length", strconv.Itoa(len(body)))
		io.WriteString(w, body)
		return
	}
	h.Set("Content-Encoding", "gzip")
	zw := gzipWriters.Get().(*gzip.Writer)
	zw.Reset(w)
	io.WriteString(zw, body)
	zw.Close()
	zw.Reset(io.Discard)
	gzipWriters.Put(zw)
}

var gzipWriters = sync.Pool{New: func() any {
	zw, _ := gzip.NewWriterLevel(io.Discard, gzip.BestSpeed) // the level is valid
	return zw
}}

// acceptsGzip reads Accept-Encoding: gzip (or *) with a q above 0.
func acceptsGzip(r *http.Request) bool {
	for _, line := range r.Header.Values("Accept-Encoding") {
		for _, item := range strings.Split(line, ",") {
			coding, params, _ := strings.Cut(item, ";")
			coding = strings.ToLower(strings.TrimSpace(coding))
			if coding != "gzip" && coding != "*" {
				continue
			}
			q := 1.0
			for _, p := range strings.Split(params, ";") {
				if k, v, ok := strings.Cut(strings.TrimSpace(p), "="); ok && strings.TrimSpace(k) == "q" {
					if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
						q = f
					}
				}
			}
			if q > 0 {
				return true
			}
		}
	}
	return false
}

// pageStyle is shared by every HTML page.
const pageStyle = `<style>
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; font-size: 14px; margin: 8px 16px; }
pre, .mono { font-family: Menlo, Consolas, "DejaVu Sans Mono", monospace; font-size: 13px; }
nav { margin-bottom: 12px; border-bottom: 1px solid #ddd; padding-bottom: 6px; }
nav a { margin-right: 12px; text-decoration: none; color: #1a4f9c; }
nav a.current { font-weight: bold; color: #000; }
table.grid { border-collapse: collapse; }
table.grid th, table.grid td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; vertical-align: top; }
table.grid th { background: #f0f0f0; }
table.grid td.num { text-align: right; font-variant-numeric: tabular-nums; }
table.grid td.method { white-space: nowrap; }
.nondefault { color: #ff0000; }
details.var { margin: 0; }
details.var > summary { cursor: pointer; padding: 2px 0; list-style-position: outside; }
p.var { margin: 0; padding: 2px 0 2px 14px; }
.charts { margin: 4px 0 8px 14px; padding: 6px; background: #fafafa; width: fit-content; }
.charts svg { margin-right: 12px; vertical-align: top; }
.hint { color: #555; font-size: 12px; margin: 2px 0; }
` + sparkStyle + `</style>
`

// writeHead writes the document head and the navigation bar, with `current`
// highlighted.
func writeHead(b *strings.Builder, title, current string) {
	b.WriteString("<!DOCTYPE html><html><head>\n<meta charset=\"utf-8\">\n<title>")
	b.WriteString(html.EscapeString(title))
	b.WriteString("</title>\n")
	b.WriteString(pageStyle)
	b.WriteString("</head>\n<body>\n<nav>")
	for _, pg := range pages {
		href := "/" + pg.name
		if pg.name == "pprof" {
			href += "/"
		}
		class := ""
		if pg.name == current {
			class = ` class="current"`
		}
		b.WriteString(`<a href="` + href + `"` + class + ">" + pg.name + "</a>")
	}
	b.WriteString("</nav>\n")
}

func writeTail(b *strings.Builder) { b.WriteString("</body></html>\n") }

var esc = html.EscapeString
