package rpcz

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func enable(t *testing.T) {
	Enabled.SetValue(true)
	t.Cleanup(func() { Enabled.SetValue(false) })
}

func TestRingKeepsNewestFirst(t *testing.T) {
	enable(t)
	Reset()
	for i := range MaxSpans + 10 {
		Record(Span{Method: "m", LogID: int64(i)})
	}
	got := Recent(3)
	require.Len(t, got, 3)
	assert.Equal(t, int64(MaxSpans+9), got[0].LogID)
	assert.Equal(t, int64(MaxSpans+7), got[2].LogID)
	assert.Len(t, Recent(10*MaxSpans), MaxSpans)
}

func TestHandler(t *testing.T) {
	Reset()
	h := Handler()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/rpcz", nil))
	assert.Equal(t, 503, rec.Code, "off by default")

	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/rpcz/enable", nil))
	assert.True(t, On())
	defer Enabled.SetValue(false)

	start := time.Now()
	Record(Span{Method: "example.EchoService.Echo", Remote: "127.0.0.1:8001", Start: start, Latency: 3 * time.Millisecond,
		Attempts: []Attempt{
			{Server: "127.0.0.1:8000", Start: start, Abandoned: true},
			{Server: "127.0.0.1:8001", Start: start.Add(2 * time.Millisecond), Latency: time.Millisecond, Backup: true, Won: true},
		}})
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/rpcz", nil))
	body, _ := io.ReadAll(rec.Body)
	text := string(body)
	assert.Contains(t, text, "client example.EchoService.Echo remote=127.0.0.1:8001")
	assert.Contains(t, text, "attempt 0 -> 127.0.0.1:8000 sent at +0us latency=- abandoned")
	assert.Contains(t, text, "backup  1 -> 127.0.0.1:8001 sent at +2000us latency=1000us won")
	assert.Equal(t, 2, strings.Count(text, " -> "))
}

func TestHandlerFiltersOneTrace(t *testing.T) {
	enable(t)
	Reset()
	Record(Span{Method: "a", TraceID: 0xabc, SpanID: 1})
	Record(Span{Method: "b", TraceID: 0xdef, SpanID: 2})
	Record(Span{Method: "c", TraceID: 0xabc, SpanID: 3, ParentSpanID: 1})
	rec := httptest.NewRecorder()
	Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/rpcz?trace=abc", nil))
	body := rec.Body.String()
	assert.Contains(t, body, " a ")
	assert.Contains(t, body, " c ")
	assert.NotContains(t, body, " b ")
	assert.Contains(t, body, "trace=0000000000000abc")
	rec = httptest.NewRecorder()
	Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/rpcz?trace=xyz", nil))
	assert.Equal(t, 400, rec.Code)
}

// brpc's ids are uint64: one with the top bit set prints as brpc prints it.
func TestIDsPrintUnsigned(t *testing.T) {
	var b strings.Builder
	Write(&b, []Span{{Method: "m", TraceID: int64(-0x6181e372ae6bffff), SpanID: 1}})
	assert.Contains(t, b.String(), "trace=9e7e1c8d51940001")
}
