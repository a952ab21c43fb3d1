package builtin

import (
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/gobrpc/gobrpc/bvar"
	"github.com/gobrpc/gobrpc/controller"
)

// /vars, as brpc's vars_service.cpp:
//
//	/vars             every exposed variable, sorted: "name : value\r\n"
//	/vars/FILTER      the ones FILTER selects (bvar.ParseFilter syntax)
//	/vars/NAME?series the history of NAME as flot JSON (or its CDF)
//
// Plain text hides the variables brpc shows on HTML only (a
// LatencyRecorder's _latency_cdf and _latency_percentiles); the HTML page
// shows every variable, each numeric one with its charts.

func (p *Pages) serveVars(w http.ResponseWriter, r *http.Request, filter string) {
	if hasQuery(r, "series") {
		p.serveSeries(w, filter)
		return
	}
	if s, ok := r.URL.Query()["search"]; ok && filter == "" {
		http.Redirect(w, r, searchURL(s[0]), http.StatusFound)
		return
	}
	f, err := bvar.ParseFilter(filter)
	if err != nil {
		fail(w, controller.EREQUEST, "%s", err.Error())
		return
	}
	type item struct{ name, desc string }
	var items []item
	asHTML := useHTML(r)
	for _, name := range bvar.List() {
		if !f.Match(name) {
			continue
		}
		v, ok := bvar.Find(name)
		if !ok { // hidden meanwhile
			continue
		}
		desc := v.Describe()
		if !asHTML && htmlOnly(name, desc) {
			continue
		}
		items = append(items, item{name, desc})
	}
	if filter != "" && len(items) == 0 {
		fail(w, controller.ENOMETHOD, "Fail to find any bvar by `%s'", filter)
		return
	}
	var b strings.Builder
	if !asHTML {
		for _, it := range items {
			b.WriteString(it.name)
			b.WriteString(" : ")
			b.WriteString(it.desc)
			b.WriteString("\r\n")
		}
		reply(w, r, contentText, b.String(), true)
		return
	}

	names := make([]string, len(items))
	for i, it := range items {
		names[i] = it.name
	}
	hists := p.hist.getAll(names)
	// What each variable gets: a CDF chart, two sparklines, or nothing.
	kinds := make([]varKind, len(items))
	charts := 0
	cdfs := make([]cdfData, len(items))
	for i, it := range items {
		if d, ok := parseCDF(it.desc); ok {
			kinds[i], cdfs[i] = kindCDF, d
		} else if _, numeric := parseNumber(it.desc); numeric {
			kinds[i] = kindNumber
		} else if _, ok := hists[it.name]; ok { // numeric a moment ago
			kinds[i] = kindNumber
		}
		if kinds[i] != kindPlain {
			charts++
		}
	}
	inline := charts <= maxInlineCharts

	dataOnly := hasQuery(r, "dataonly")
	if !dataOnly {
		writeHead(&b, "vars", "vars")
		b.WriteString(`<form method="get" action="/vars"><label>Search : <input name="search" value="` +
			esc(filter) + `" placeholder="names, separated by , or ;"></label> <button>go</button></form>` + "\n")
		b.WriteString(`<p class="hint">` + strconv.Itoa(len(items)) + " variables. ")
		if inline {
			b.WriteString(`Click a numeric one for its last 60 seconds and last 60 minutes (one point a minute, that minute's average);` +
				` a _latency_cdf shows its latency CDF. <a href="?expand">Expand all</a>.`)
		} else {
			b.WriteString(strconv.Itoa(charts) + " have charts, more than the " + strconv.Itoa(maxInlineCharts) +
				" a page draws: search, or click a name, to see them.")
		}
		b.WriteString("</p>\n")
	}
	open := ""
	if hasQuery(r, "expand") {
		open = " open"
	}
	b.WriteString("<div class=\"vars mono\">\n")
	for i, it := range items {
		name, value := esc(it.name), esc(it.desc)
		if kinds[i] == kindCDF {
			value = "&quot;click to view&quot;"
		}
		if kinds[i] == kindPlain || !inline {
			if kinds[i] != kindPlain {
				name = `<a href="/vars/` + name + `">` + name + "</a>"
			}
			b.WriteString(`<p class="var">` + name + ` : <span id="value-` + esc(it.name) + `">` + value + "</span></p>\n")
			continue
		}
		b.WriteString(`<details class="var"` + open + `><summary>` + name + ` : <span id="value-` + name + `">` +
			value + `</span></summary><div class="charts">`)
		if kinds[i] == kindCDF {
			writeCDFChart(&b, it.name+": latency CDF over the recorder's window", cdfs[i])
			b.WriteString(`<p class="hint">` + esc(cdfHint(cdfs[i])) + "</p>")
		} else {
			h := hists[it.name]
			writeSparkline(&b, it.name+": last 60 seconds", h.Seconds, historyLen, "-60s")
			writeSparkline(&b, it.name+": last 60 minutes", h.Minutes, historyLen, "-60m")
		}
		b.WriteString("</div></details>\n")
	}
	b.WriteString("</div>\n")
	if !dataOnly {
		writeTail(&b)
	}
	reply(w, r, contentHTML, b.String(), true)
}

// maxInlineCharts is the most variables with charts a /vars page draws:
// each costs about 2 KB of HTML. A larger page lists the values only, each
// name linking to its own page with the charts.
var maxInlineCharts = 1000

type varKind uint8

const (
	kindPlain  varKind = iota // a string, a vector...: no chart
	kindNumber                // the 60-second and 60-minute sparklines
	kindCDF                   // a LatencyRecorder's CDF chart
)

// htmlOnly reports whether brpc shows a variable on the HTML page only: a
// LatencyRecorder's CDF and its percentiles vector.
func htmlOnly(name, desc string) bool {
	if strings.HasSuffix(name, "_latency_cdf") {
		return isCDF(desc)
	}
	if base, ok := strings.CutSuffix(name, "_latency_percentiles"); ok {
		_, cdf := bvar.Find(base + "_latency_cdf")
		_, maxLat := bvar.Find(base + "_max_latency")
		return cdf && maxLat
	}
	return false
}

var searchSeparators = regexp.MustCompile(`[;,\s*]+`)

// searchURL turns what was typed in the search box into a filter URL as
// brpc's page does: "iobuf, bthread" becomes /vars/*iobuf*;*bthread*.
func searchURL(text string) string {
	text = strings.TrimSpace(searchSeparators.ReplaceAllString(text, " "))
	if text == "" {
		return "/vars"
	}
	return "/vars/" + url.PathEscape("*"+strings.ReplaceAll(text, " ", "*;*")+"*")
}

// serveSeries answers /vars/NAME?series: brpc's describe_series, the
// flot JSON its /vars page plots.
//
//   - a number: {"label":"trend","data":[[x,v],...]} with brpc's x
//     positions: the minutes at 54..113, the seconds at 114..173, the
//     latest second last at 173 (brpc also has days at 0..29 and hours at
//     30..53, which are not kept here); points not recorded yet are
//     left out;
//   - a _latency_cdf: {"label":"cdf","data":[[10,v],...,[100,p999],[101,p9999]]};
//   - an unknown NAME: ENOMETHOD (404); a NAME without a numeric value:
//     ENODATA (404).
func (p *Pages) serveSeries(w http.ResponseWriter, name string) {
	v, ok := bvar.Find(name)
	if !ok {
		fail(w, controller.ENOMETHOD, "Fail to find any bvar by `%s'", name)
		return
	}
	desc := v.Describe()
	if isCDF(desc) {
		writeJSON(w, desc)
		return
	}
	h, hasHist := p.hist.get(name)
	if _, numeric := parseNumber(desc); !numeric && !hasHist {
		failStatus(w, http.StatusNotFound, controller.ENODATA, "`%s' does not have value series", name)
		return
	}
	var b strings.Builder
	b.WriteString(`{"label":"trend","data":[`)
	first := true
	point := func(x int, v float64) {
		if !first {
			b.WriteByte(',')
		}
		first = false
		b.WriteString("[" + strconv.Itoa(x) + "," + strconv.FormatFloat(v, 'g', -1, 64) + "]")
	}
	for i, v := range h.Minutes {
		point(54+historyLen-len(h.Minutes)+i, v)
	}
	for i, v := range h.Seconds {
		point(114+historyLen-len(h.Seconds)+i, v)
	}
	b.WriteString("]}")
	writeJSON(w, b.String())
}

func writeJSON(w http.ResponseWriter, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.Write([]byte(body))
}

func (p *Pages) serveMetrics(w http.ResponseWriter, r *http.Request, _ string) {
	var b strings.Builder
	if err := bvar.DumpPrometheus(&b); err != nil { // a strings.Builder never fails
		fail(w, controller.EINTERNAL, "%s", err.Error())
		return
	}
	w.Header().Set("Content-Type", bvar.PrometheusContentType)
	w.Header().Set("Content-Length", strconv.Itoa(b.Len()))
	w.Write([]byte(b.String()))
}
