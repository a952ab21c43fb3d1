// Package rpcz keeps the most recent RPCs, client and server side, for the
// /rpcz page, as brpc's rpcz does. It is off by default (flag
// -enable_rpcz, reloadable); when off it costs one atomic load per call.
// A client span lists every attempt with its server, start offset and
// latency, so a backup request shows as a second attempt sent at
// backup_request_ms.
package rpcz

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gobrpc/gobrpc/errno"
	"github.com/gobrpc/gobrpc/flags"
)

// Enabled is -enable_rpcz.
var Enabled = flags.DefineBool("enable_rpcz", false,
	"Turn on rpcz: keep the most recent RPCs for /rpcz", func(bool) error { return nil })

// MaxSpans is how many spans are kept (the oldest are dropped).
const MaxSpans = 1024

// Attempt is one send of a client RPC.
type Attempt struct {
	Server    string
	Start     time.Time
	Latency   time.Duration // 0 when it never ended (abandoned)
	ErrorCode int32
	Backup    bool
	Won       bool
	Abandoned bool // still in flight when the RPC ended
}

// Span is one RPC.
type Span struct {
	Server    bool // a server span; otherwise a client one
	Method    string
	Remote    string
	LogID     int64
	Start     time.Time
	Latency   time.Duration
	ErrorCode int32
	ErrorText string
	Attempts  []Attempt // client spans
	// The trace ids brpc carries in the request meta: a client span and
	// the server span of the same attempt share SpanID; a call a handler
	// makes with its cntl.Context() has that SpanID as ParentSpanID.
	TraceID, SpanID, ParentSpanID int64
}

var ring = struct {
	sync.Mutex
	spans [MaxSpans]Span
	next  int
	n     int
}{}

// On reports whether spans are being collected: rpcz is enabled or a
// span hook is set.
func On() bool { return Enabled.Get() || hook.Load() != nil }

// SetHook makes every finished span go to f too, whether or not /rpcz is
// enabled, so that spans can be bridged to a tracing system (OpenTelemetry
// or another) without gobrpc depending on it. f runs on the goroutine that
// ended the RPC and must not block; nil removes the hook.
func SetHook(f func(Span)) {
	if f == nil {
		hook.Store(nil)
		return
	}
	hook.Store(&f)
}

var hook atomic.Pointer[func(Span)]

// NewID returns a random non-zero span or trace id.
func NewID() int64 {
	for {
		if id := int64(rand.Uint64() >> 1); id != 0 {
			return id
		}
	}
}

// Record keeps s for /rpcz when rpcz is enabled, and hands it to the hook.
func Record(s Span) {
	if f := hook.Load(); f != nil {
		(*f)(s)
	}
	if !Enabled.Get() {
		return
	}
	ring.Lock()
	ring.spans[ring.next] = s
	ring.next = (ring.next + 1) % MaxSpans
	if ring.n < MaxSpans {
		ring.n++
	}
	ring.Unlock()
}

// Recent returns up to n spans, newest first.
func Recent(n int) []Span {
	ring.Lock()
	defer ring.Unlock()
	n = min(n, ring.n)
	out := make([]Span, n)
	for i := 0; i < n; i++ {
		out[i] = ring.spans[(ring.next-1-i+MaxSpans)%MaxSpans]
	}
	return out
}

// OfTrace returns the kept spans of one trace, newest first.
func OfTrace(traceID int64) []Span {
	ring.Lock()
	defer ring.Unlock()
	var out []Span
	for i := 0; i < ring.n; i++ {
		if s := ring.spans[(ring.next-1-i+MaxSpans)%MaxSpans]; s.TraceID == traceID {
			out = append(out, s)
		}
	}
	return out
}

// Reset drops every span (for tests).
func Reset() {
	ring.Lock()
	ring.n, ring.next = 0, 0
	ring.Unlock()
}

// Write prints spans as /rpcz shows them.
func Write(w io.Writer, spans []Span) {
	for _, s := range spans {
		kind := "client"
		if s.Server {
			kind = "server"
		}
		status := "OK"
		if s.ErrorCode != 0 {
			status = errno.Text(errno.Errno(s.ErrorCode), s.ErrorText)
		}
		fmt.Fprintf(w, "%s %s %s remote=%s log_id=%d latency=%dus %s\n",
			s.Start.Format("2006/01/02-15:04:05.000000"), kind, s.Method, s.Remote, s.LogID,
			s.Latency.Microseconds(), status)
		if s.TraceID != 0 {
			// Unsigned, as brpc prints and looks them up (its ids are uint64).
			fmt.Fprintf(w, "    trace=%016x span=%016x parent_span=%016x\n",
				uint64(s.TraceID), uint64(s.SpanID), uint64(s.ParentSpanID))
		}
		for i, a := range s.Attempts {
			role := "attempt"
			if a.Backup {
				role = "backup "
			}
			outcome := "no answer"
			switch {
			case a.Abandoned:
				outcome = "abandoned"
			case a.Won:
				outcome = "won"
			case a.Latency > 0 && a.ErrorCode == 0:
				outcome = "answered late"
			case a.Latency > 0:
				outcome = "failed [E" + strconv.Itoa(int(a.ErrorCode)) + "]"
			}
			lat := "-"
			if a.Latency > 0 && !a.Abandoned {
				lat = strconv.FormatInt(a.Latency.Microseconds(), 10) + "us"
			}
			fmt.Fprintf(w, "    %s %d -> %s sent at +%dus latency=%s %s\n",
				role, i, a.Server, a.Start.Sub(s.Start).Microseconds(), lat, outcome)
		}
	}
}

// Handler serves /rpcz: the most recent spans as text, newest first
// (?n=N for how many, default 100). /rpcz/enable and /rpcz/disable flip
// the flag, as brpc's.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		switch strings.TrimPrefix(r.URL.Path, "/rpcz") {
		case "/enable":
			Enabled.SetValue(true)
			io.WriteString(w, "rpcz is enabled\n")
			return
		case "/disable":
			Enabled.SetValue(false)
			io.WriteString(w, "rpcz is disabled\n")
			return
		}
		if !On() {
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, "rpcz is not enabled (set -enable_rpcz, or open /rpcz/enable)\n")
			return
		}
		n := 100
		if v, err := strconv.Atoi(r.URL.Query().Get("n")); err == nil && v > 0 {
			n = v
		}
		if t := r.URL.Query().Get("trace"); t != "" { // brpc's /rpcz?trace=<hex>
			id, err := strconv.ParseUint(t, 16, 64)
			if err != nil {
				w.WriteHeader(http.StatusBadRequest)
				io.WriteString(w, "trace must be a hexadecimal trace id\n")
				return
			}
			Write(w, OfTrace(int64(id)))
			return
		}
		Write(w, Recent(n))
	})
}
