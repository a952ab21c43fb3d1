package bvar

import (
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
)

// PrometheusContentType is the Content-Type of DumpPrometheus output: the
// Prometheus text exposition format 0.0.4. (brpc sends a bare
// "text/plain", which recent Prometheus servers no longer take on trust.)
const PrometheusContentType = "text/plain; version=0.0.4; charset=utf-8"

// prometheusServerPrefix is brpc's g_server_info_prefix: only latency
// families under it are folded into summaries.
const prometheusServerPrefix = "rpc_server"

// DumpPrometheus writes every exposed numeric variable in the Prometheus
// text exposition format, as brpc's /brpc_metrics does:
//
//   - variables are visited in sorted order; string values (Describe
//     starting with '"') and values that are not numbers are skipped;
//   - a plain variable n becomes "# HELP n", "# TYPE n gauge", "n value";
//   - a LatencyRecorder family whose name starts with "rpc_server" becomes
//     one summary named after its prefix <p>: quantile lines from
//     <p>_latency_80/_90/_99 (0.8, 0.9, 0.99), <p>_latency_999 (0.999),
//     <p>_latency_9999 (0.9999) and <p>_max_latency ("1"), then
//     <p>_sum = average × count and <p>_count, written where
//     <p>_max_latency falls in the sorted order. <p>_qps stays a gauge.
//
// Where we differ from brpc, on purpose:
//
//   - brpc also writes {quantile="avg"} with the average latency. A
//     quantile label must be a number: Prometheus' own Go parser (expfmt,
//     used by the Pushgateway, exporters and client tests) rejects the
//     whole scrape over it. The average stays a separate gauge
//     <p>_latency instead, so nothing is lost.
//   - brpc swallows every rpc_server*_count and rpc_server*_latency
//     variable as if it belonged to a summary, so
//     rpc_server_<port>_connection_count never appears, and a family
//     without _max_latency vanishes. Here only the members of a family
//     that has <p>_max_latency are folded; every other variable is a
//     gauge.
//   - a summary line whose source variable is missing is left out rather
//     than written without a value.
//   - names are made valid Prometheus metric names ([a-zA-Z_:][a-zA-Z0-9_:]*:
//     a leading digit gets an '_' in front, other characters become '_'),
//     and a name that would repeat one already written (or a summary's
//     <p>, <p>_sum or <p>_count) is skipped, so the output always parses.
func DumpPrometheus(w io.Writer) error { return dumpPrometheus(w, nil) }

type promVar struct{ name, value string }

// latencyMember says how a variable belongs to a latency family.
type latencyMember struct {
	base     string
	kind     byte    // 'q' quantile, 'm' max, 'a' average, 'c' count
	quantile float64 // for 'q'
}

// latencyFamilyMember parses name as <base>_latency_<p>, <base>_max_latency,
// <base>_latency or <base>_count, the names a LatencyRecorder exposes.
func latencyFamilyMember(name string) (latencyMember, bool) {
	if base, ok := strings.CutSuffix(name, "_max_latency"); ok {
		return latencyMember{base: base, kind: 'm'}, true
	}
	if base, ok := strings.CutSuffix(name, "_latency"); ok {
		return latencyMember{base: base, kind: 'a'}, true
	}
	if base, ok := strings.CutSuffix(name, "_count"); ok {
		return latencyMember{base: base, kind: 'c'}, true
	}
	i := strings.LastIndex(name, "_latency_")
	if i < 0 {
		return latencyMember{}, false
	}
	q, ok := percentileQuantile(name[i+len("_latency_"):])
	if !ok {
		return latencyMember{}, false
	}
	return latencyMember{base: name[:i], kind: 'q', quantile: q}, true
}

// percentileQuantile maps a LatencyRecorder percentile suffix to its
// quantile: "80" is 0.8 (brpc's -bvar_latency_p1/p2/p3 are percents),
// "999" is 0.999 and "9999" is 0.9999.
func percentileQuantile(s string) (float64, bool) {
	switch s {
	case "999":
		return 0.999, true
	case "9999":
		return 0.9999, true
	}
	if len(s) == 0 || len(s) > 2 {
		return 0, false
	}
	p, err := strconv.Atoi(s)
	if err != nil || p <= 0 || s[0] == '+' || s[0] == '-' {
		return 0, false
	}
	return float64(p) / 100, true
}

// isPrometheusNumber reports whether s is a sample value Prometheus'
// parsers take: a Go float without hex mantissas or underscores, in range.
func isPrometheusNumber(s string) bool {
	if s == "" || strings.ContainsAny(s, "pP_xX") {
		return false
	}
	_, err := strconv.ParseFloat(s, 64)
	return err == nil
}

// prometheusName makes name a valid Prometheus metric name.
func prometheusName(name string) string {
	ok := name != ""
	for i := 0; ok && i < len(name); i++ {
		ok = isPromNameByte(name[i], i == 0)
	}
	if ok {
		return name
	}
	var b strings.Builder
	if name == "" || !isPromNameByte(name[0], true) && isPromNameByte(name[0], false) {
		b.WriteByte('_')
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; isPromNameByte(c, false) {
			b.WriteByte(c)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

func isPromNameByte(c byte, first bool) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c == ':' || !first && c >= '0' && c <= '9'
}

// parseCInt reads a value as brpc's strtoll does: the integer part.
func parseCInt(s string) int64 {
	if v, err := strconv.ParseInt(s, 10, 64); err == nil {
		return v
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) {
		return 0
	}
	switch {
	case f >= math.MaxInt64:
		return math.MaxInt64
	case f <= math.MinInt64:
		return math.MinInt64
	}
	return int64(f)
}

// latencySummary gathers one family's values.
type latencySummary struct {
	quantiles []promQuantile
	max       string
	avg       int64
	count     int64
}

type promQuantile struct {
	q     float64
	value string
}

// dumpPrometheus is DumpPrometheus over the variables keep selects (all
// when nil); tests use it to look at their own variables only.
func dumpPrometheus(w io.Writer, keep func(name string) bool) error {
	// One reading of every numeric variable, in sorted order.
	var vars []promVar
	for _, name := range List() {
		if keep != nil && !keep(name) {
			continue
		}
		v, ok := Find(name)
		if !ok { // hidden meanwhile
			continue
		}
		d := v.Describe()
		if strings.HasPrefix(d, `"`) || !isPrometheusNumber(d) {
			continue
		}
		vars = append(vars, promVar{name, d})
	}

	// A family exists when <base>_max_latency does, under rpc_server.
	families := map[string]*latencySummary{}
	for _, v := range vars {
		if base, ok := strings.CutSuffix(v.name, "_max_latency"); ok && strings.HasPrefix(base, prometheusServerPrefix) {
			families[base] = &latencySummary{}
		}
	}
	// Names a summary writes; a gauge may not take them.
	used := map[string]bool{}
	for base := range families {
		p := prometheusName(base)
		used[p], used[p+"_sum"], used[p+"_count"] = true, true, true
	}
	folded := make([]bool, len(vars))
	for i, v := range vars {
		m, ok := latencyFamilyMember(v.name)
		if !ok {
			continue
		}
		s := families[m.base]
		if s == nil {
			continue
		}
		switch m.kind {
		case 'q':
			s.quantiles = append(s.quantiles, promQuantile{m.quantile, v.value})
		case 'm':
			s.max = v.value
		case 'a':
			// The average feeds _sum but stays a gauge (see DumpPrometheus).
			s.avg = parseCInt(v.value)
			continue
		case 'c':
			s.count = parseCInt(v.value)
		}
		folded[i] = true
	}

	var b strings.Builder
	for i, v := range vars {
		if !folded[i] {
			name := prometheusName(v.name)
			if used[name] {
				continue
			}
			used[name] = true
			b.WriteString("# HELP " + name + "\n# TYPE " + name + " gauge\n" + name + " " + v.value + "\n")
			continue
		}
		base, ok := strings.CutSuffix(v.name, "_max_latency")
		if !ok || families[base] == nil {
			continue
		}
		writeSummary(&b, prometheusName(base), families[base])
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeSummary(b *strings.Builder, name string, s *latencySummary) {
	sort.SliceStable(s.quantiles, func(i, j int) bool { return s.quantiles[i].q < s.quantiles[j].q })
	b.WriteString("# HELP " + name + "\n# TYPE " + name + " summary\n")
	for _, q := range s.quantiles {
		b.WriteString(name + `{quantile="` + strconv.FormatFloat(q.q, 'g', -1, 64) + `"} ` + q.value + "\n")
	}
	b.WriteString(name + `{quantile="1"} ` + s.max + "\n")
	b.WriteString(name + "_sum " + strconv.FormatInt(s.avg*s.count, 10) + "\n")
	b.WriteString(name + "_count " + strconv.FormatInt(s.count, 10) + "\n")
}
