package builtin

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gobrpc/gobrpc/bvar"
)

// exposeStatuses exposes int64 Statuses and hides them after the test.
func exposeStatuses(t *testing.T, vals map[string]int64) map[string]*bvar.Status[int64] {
	out := map[string]*bvar.Status[int64]{}
	for name, v := range vals {
		s := bvar.NewStatus(name, v)
		require.Equal(t, name, s.Name(), "exposed")
		t.Cleanup(s.Hide)
		out[name] = s
	}
	return out
}

func TestVarsPlainText(t *testing.T) {
	h := newHarness(t, Options{})
	exposeStatuses(t, map[string]int64{"bt_plain_b": 2, "bt_plain_a": 1, "bt_plain_c": -3})
	s := bvar.NewStatus("bt_plain_str", "hello world")
	defer s.Hide()

	r := h.get("/vars/bt_plain_*", curlUA)
	assert.Equal(t, http.StatusOK, r.status)
	assert.True(t, strings.HasPrefix(r.header.Get("Content-Type"), "text/plain"))
	assert.Equal(t, "bt_plain_a : 1\r\nbt_plain_b : 2\r\nbt_plain_c : -3\r\nbt_plain_str : \"hello world\"\r\n", r.body)

	all := h.get("/vars", noUA)
	assert.Contains(t, all.body, "bt_plain_a : 1\r\nbt_plain_b : 2\r\n", "everything, sorted")
}

func TestVarsFilter(t *testing.T) {
	h := newHarness(t, Options{})
	exposeStatuses(t, map[string]int64{
		"bt_filter_rpc_count": 1, "bt_filter_rpc_error": 2, "bt_filter_iobuf_block_count": 3,
		"bt_filter_iobuf_blotk_count": 4, "bt_filter_other": 5,
	})
	cases := []struct{ filter, want string }{
		{"bt_filter_other", "bt_filter_other : 5\r\n"},
		{"bt_filter_rpc_*", "bt_filter_rpc_count : 1\r\nbt_filter_rpc_error : 2\r\n"},
		{"bt_filter_*_count", "bt_filter_iobuf_block_count : 3\r\nbt_filter_iobuf_blotk_count : 4\r\nbt_filter_rpc_count : 1\r\n"},
		{"bt_filter_iobuf_blo$k_count", "bt_filter_iobuf_block_count : 3\r\nbt_filter_iobuf_blotk_count : 4\r\n"},
		{"bt_filter_rpc_error;bt_filter_other", "bt_filter_other : 5\r\nbt_filter_rpc_error : 2\r\n"},
		{"bt_filter_other,bt_filter_rpc_c*,nothing_at_all", "bt_filter_other : 5\r\nbt_filter_rpc_count : 1\r\n"},
		{"bt_filter_rpc_$$$$$", "bt_filter_rpc_count : 1\r\nbt_filter_rpc_error : 2\r\n"},
	}
	for _, c := range cases {
		r := h.get("/vars/"+c.filter, curlUA)
		assert.Equal(t, http.StatusOK, r.status, c.filter)
		assert.Equal(t, c.want, r.body, c.filter)
	}

	// Nothing matches: ENOMETHOD, 404, brpc's text.
	r := h.get("/vars/bt_filter_nothing*;nope", curlUA)
	assert.Equal(t, http.StatusNotFound, r.status)
	assert.Equal(t, "1002", r.header.Get("x-bd-error-code"))
	assert.Equal(t, "[E1002]Fail to find any bvar by `bt_filter_nothing*;nope'", r.body)

	// A malformed filter: EREQUEST, 400, with the parser's error.
	r = h.get("/vars/bt-filter", curlUA)
	assert.Equal(t, http.StatusBadRequest, r.status)
	assert.True(t, strings.HasPrefix(r.body, "[E1003]bvar: invalid character '-'"), r.body)
}

func TestVarsConsoleVsBrowser(t *testing.T) {
	h := newHarness(t, Options{})
	exposeStatuses(t, map[string]int64{"bt_console_x": 1})
	for _, c := range []struct {
		name, query, ua string
		html            bool
	}{
		{"curl", "", curlUA, false},
		{"no user-agent", "", noUA, false},
		{"browser", "", browserUA, true},
		{"browser with console=1", "?console=1", browserUA, false},
		{"curl with console=0", "?console=0", curlUA, true},
	} {
		r := h.get("/vars/bt_console_x"+c.query, c.ua)
		require.Equal(t, http.StatusOK, r.status, c.name)
		if c.html {
			assert.True(t, strings.HasPrefix(r.header.Get("Content-Type"), "text/html"), c.name)
			assert.Contains(t, r.body, "<!DOCTYPE html>", c.name)
			assert.Contains(t, r.body, `bt_console_x : <span id="value-bt_console_x">1</span>`, c.name)
		} else {
			assert.True(t, strings.HasPrefix(r.header.Get("Content-Type"), "text/plain"), c.name)
			assert.Equal(t, "bt_console_x : 1\r\n", r.body, c.name)
		}
	}
}

// TestVarsLatencyRecorderDisplay checks brpc's display rules: plain text
// leaves out a recorder's _latency_cdf and _latency_percentiles, HTML
// shows them.
func TestVarsLatencyRecorderDisplay(t *testing.T) {
	h := newHarness(t, Options{})
	rec := bvar.NewLatencyRecorder("bt_display")
	defer rec.Close()
	plain := h.get("/vars/bt_display_*", curlUA).body
	assert.Contains(t, plain, "bt_display_latency_80 : 0\r\n")
	assert.NotContains(t, plain, "_latency_cdf")
	assert.NotContains(t, plain, "_latency_percentiles")
	assert.Equal(t, http.StatusNotFound, h.get("/vars/bt_display_latency_cdf", curlUA).status)

	page := h.get("/vars/bt_display_*", browserUA).body
	assert.Contains(t, page, "bt_display_latency_cdf")
	assert.Contains(t, page, "bt_display_latency_percentiles")
}

func TestVarsSeries(t *testing.T) {
	now := manualSampling(t)
	h := newHarness(t, Options{})
	v := exposeStatuses(t, map[string]int64{"bt_series_x": 0})["bt_series_x"]
	s := bvar.NewStatus("bt_series_str", "text")
	defer s.Hide()

	// A numeric variable nobody sampled yet: an empty series.
	r := h.get("/vars/bt_series_x?series", browserUA)
	assert.Equal(t, http.StatusOK, r.status)
	assert.Equal(t, "application/json", r.header.Get("Content-Type"))
	assert.Equal(t, `{"label":"trend","data":[]}`, r.body)

	for i := int64(1); i <= 5; i++ {
		v.Set(i * 10)
		bvar.SampleAt(now.Add(time.Duration(i) * time.Second))
	}
	r = h.get("/vars/bt_series_x?series", curlUA)
	assert.Equal(t, `{"label":"trend","data":[[169,10],[170,20],[171,30],[172,40],[173,50]]}`, r.body)
	var parsed struct {
		Label string       `json:"label"`
		Data  [][2]float64 `json:"data"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.body), &parsed))

	// A whole minute adds its average at x = 113.
	for i := 6; i <= 60; i++ {
		v.Set(50)
		bvar.SampleAt(now.Add(time.Duration(i) * time.Second))
	}
	r = h.get("/vars/bt_series_x?series", curlUA)
	require.NoError(t, json.Unmarshal([]byte(r.body), &parsed))
	require.Len(t, parsed.Data, 61)
	assert.Equal(t, [2]float64{113, (10 + 20 + 30 + 40 + 50*56) / 60.0}, parsed.Data[0])
	assert.Equal(t, [2]float64{114, 10}, parsed.Data[1])
	assert.Equal(t, [2]float64{173, 50}, parsed.Data[60])

	r = h.get("/vars/bt_series_nothing?series", curlUA)
	assert.Equal(t, http.StatusNotFound, r.status)
	assert.Equal(t, "[E1002]Fail to find any bvar by `bt_series_nothing'", r.body)

	r = h.get("/vars/bt_series_str?series", curlUA)
	assert.Equal(t, http.StatusNotFound, r.status)
	assert.Equal(t, "61", r.header.Get("x-bd-error-code"))
	assert.Equal(t, "[E61]`bt_series_str' does not have value series", r.body)

	// A latency CDF: its points, brpc's flot format.
	rec := bvar.NewLatencyRecorder("bt_series_rpc")
	defer rec.Close()
	bvar.SampleAt(now.Add(100 * time.Second))
	for i := range 100 {
		rec.RecordUs(int64(i+1) * 10)
	}
	bvar.SampleAt(now.Add(101 * time.Second))
	r = h.get("/vars/bt_series_rpc_latency_cdf?series", curlUA)
	assert.Equal(t, http.StatusOK, r.status)
	var cdf cdfData
	require.NoError(t, json.Unmarshal([]byte(r.body), &cdf))
	assert.Equal(t, "cdf", cdf.Label)
	require.Len(t, cdf.Data, 20)
	assert.Equal(t, 10.0, cdf.Data[0][0])
	assert.Equal(t, 101.0, cdf.Data[19][0])
	assert.InDelta(t, 900, cdf.Data[8][1], 20, "p90 of 10..1000")
}

var (
	detailsRe  = regexp.MustCompile(`(?s)<details class="var"[^>]*><summary>([a-z0-9_]+) : .*?</details>`)
	polylineRe = regexp.MustCompile(`<polyline [^>]*points="([^"]*)"`)
)

// varBlocks maps each variable of an HTML /vars page to its <details>.
func varBlocks(page string) map[string]string {
	out := map[string]string{}
	for _, m := range detailsRe.FindAllStringSubmatch(page, -1) {
		out[m[1]] = m[0]
	}
	return out
}

// polylinePoints returns the points of each polyline in a block.
func polylinePoints(block string) [][][2]float64 {
	var out [][][2]float64
	for _, m := range polylineRe.FindAllStringSubmatch(block, -1) {
		var pts [][2]float64
		for _, p := range strings.Fields(m[1]) {
			x, y, _ := strings.Cut(p, ",")
			fx, err1 := strconv.ParseFloat(x, 64)
			fy, err2 := strconv.ParseFloat(y, 64)
			if err1 == nil && err2 == nil {
				pts = append(pts, [2]float64{fx, fy})
			}
		}
		out = append(out, pts)
	}
	return out
}

func TestVarsHTMLCharts(t *testing.T) {
	now := manualSampling(t)
	h := newHarness(t, Options{})
	vs := exposeStatuses(t, map[string]int64{"bt_chart_up": 0, "bt_chart_flat": 7})
	str := bvar.NewStatus("bt_chart_name", "not a number")
	defer str.Hide()
	rec := bvar.NewLatencyRecorder("bt_chart_rpc")
	defer rec.Close()

	bvar.SampleAt(now)
	for s := 1; s <= 4; s++ {
		vs["bt_chart_up"].Set(int64(s * 100))
		for i := range 50 {
			rec.RecordUs(int64(100 + i*s*10))
		}
		bvar.SampleAt(now.Add(time.Duration(s) * time.Second))
	}

	r := h.get("/vars/bt_chart_*", browserUA)
	require.Equal(t, http.StatusOK, r.status)
	blocks := varBlocks(r.body)

	// Every numeric variable has its 60-second chart with the five recorded
	// points, and a 60-minute chart with nothing yet.
	for _, name := range []string{"bt_chart_up", "bt_chart_flat", "bt_chart_rpc_latency", "bt_chart_rpc_count",
		"bt_chart_rpc_qps", "bt_chart_rpc_max_latency", "bt_chart_rpc_latency_99"} {
		block, ok := blocks[name]
		require.True(t, ok, name)
		assert.Equal(t, 2, strings.Count(block, `<svg class="spark"`), name)
		lines := polylinePoints(block)
		require.Len(t, lines, 1, name)
		assert.Len(t, lines[0], 5, name)
		assert.Contains(t, block, "no data yet", name+": the minutes")
	}
	// The values go up: the line goes up (SVG y grows downwards), ending at
	// the right edge, the last of 60 slots.
	up := polylinePoints(blocks["bt_chart_up"])[0]
	for i := 1; i < len(up); i++ {
		assert.Greater(t, up[i][0], up[i-1][0])
		assert.Less(t, up[i][1], up[i-1][1])
	}
	assert.Equal(t, [2]float64{historyLen - 1, 0}, up[len(up)-1], "the top right")
	assert.Equal(t, [2]float64{historyLen - 5, sparkScale}, up[0], "the bottom, 5 slots from the right")
	assert.Contains(t, blocks["bt_chart_up"], ">max 400<")
	assert.Contains(t, blocks["bt_chart_up"], ">min 0<")

	// A string has no chart.
	assert.NotContains(t, blocks, "bt_chart_name")
	assert.Contains(t, r.body, `<p class="var">bt_chart_name : <span id="value-bt_chart_name">&#34;not a number&#34;</span></p>`)

	// The CDF: an svg with 20 points and the percent axis.
	cdf, ok := blocks["bt_chart_rpc_latency_cdf"]
	require.True(t, ok)
	assert.Contains(t, cdf, `<svg class="cdf"`)
	lines := polylinePoints(cdf)
	require.Len(t, lines, 1)
	assert.Len(t, lines[0], 20)
	for _, label := range []string{">10%<", ">50%<", ">90%<", ">99%<", ">99.9%<", ">99.99%<", ">latency<"} {
		assert.Contains(t, cdf, label)
	}
	for i := 1; i < 20; i++ {
		assert.LessOrEqual(t, lines[0][i][1], lines[0][i-1][1], "a CDF never goes down")
	}
	assert.Contains(t, cdf, "backup_request_ms")

	// ?expand opens every chart.
	assert.Contains(t, h.get("/vars/bt_chart_up?expand", browserUA).body, `<details class="var" open>`)
	assert.NotContains(t, r.body, `<details class="var" open>`)

	// Past maxInlineCharts, no charts: the names link to their own pages.
	defer func(n int) { maxInlineCharts = n }(maxInlineCharts)
	maxInlineCharts = 3
	big := h.get("/vars/bt_chart_*", browserUA).body
	assert.NotContains(t, big, "<svg")
	assert.Contains(t, big, `<p class="var"><a href="/vars/bt_chart_up">bt_chart_up</a> : <span id="value-bt_chart_up">400</span></p>`)
	assert.Contains(t, big, "more than the 3 a page draws")
	assert.Contains(t, h.get("/vars/bt_chart_up", browserUA).body, `<svg class="spark"`)
}

func TestVarsSearchRedirect(t *testing.T) {
	for text, want := range map[string]string{
		"":                        "/vars",
		"iobuf,bthread":           "/vars/%2Aiobuf%2A%3B%2Abthread%2A",
		" ,;*iobuf*, bthread;,; ": "/vars/%2Aiobuf%2A%3B%2Abthread%2A",
		"rpc":                     "/vars/%2Arpc%2A",
	} {
		got := searchURL(text)
		if text != "" {
			// the path escaping may differ; what the server decodes must not
			assert.Equal(t, strings.NewReplacer("%2A", "*", "%3B", ";").Replace(want),
				strings.NewReplacer("%2A", "*", "%3B", ";").Replace(got), text)
		} else {
			assert.Equal(t, want, got)
		}
	}
	h := newHarness(t, Options{})
	exposeStatuses(t, map[string]int64{"bt_search_hit": 1})
	r := h.get("/vars?search=search_hit", browserUA)
	assert.Equal(t, http.StatusOK, r.status)
	assert.Contains(t, r.body, "bt_search_hit")
}
