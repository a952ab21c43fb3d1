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
