package builtin

import (
	"encoding/json"
	"html"
	"math"
	"strconv"
	"strings"
)

// Charts are inline SVG drawn on the server: no script, nothing fetched,
// so the pages work offline and in any browser.

// Sparkline geometry: the plot on the left, min/max labels on the right,
// the time axis below. The line itself is drawn in a nested svg whose
// units are one per slot across and 1/sparkScale of the range up, so its
// points are small integers: "0,100 1,97 ..." (the page stays small with
// hundreds of charts).
const (
	sparkW, sparkH          = 240, 60
	sparkLeft, sparkRight   = 2, sparkW - 64
	sparkTop, sparkBottom   = 6, 44
	sparkLabelX, sparkAxisY = sparkRight + 6, 57
	sparkScale              = 100
)

// sparkStyle styles the sparklines; it is part of every page's style.
const sparkStyle = `svg.spark text { font-size: 9px; fill: #666; }
svg.spark text.end { text-anchor: end; }
svg.spark text.mid { text-anchor: middle; }
svg.spark rect { fill: #fafafa; stroke: #e0e0e0; }
svg.spark polyline { fill: none; stroke: #e08020; stroke-width: 1.5; vector-effect: non-scaling-stroke; }
svg.spark circle { fill: #c05000; }
`

// writeSparkline draws vals (oldest first) in a box of `slots` places, the
// latest at the right edge, with the min and max labelled; span names the
// left edge ("-60s"). A single value is drawn as a dot.
func writeSparkline(b *strings.Builder, title string, vals []float64, slots int, span string) {
	b.WriteString(`<svg class="spark" xmlns="http://www.w3.org/2000/svg" width="` + itoa(sparkW) + `" height="` + itoa(sparkH) + `">`)
	b.WriteString("<title>" + html.EscapeString(title) + "</title>")
	b.WriteString(`<rect x="` + itoa(sparkLeft) + `" y="` + itoa(sparkTop) + `" width="` + itoa(sparkRight-sparkLeft) +
		`" height="` + itoa(sparkBottom-sparkTop) + `"/>`)
	b.WriteString(`<text x="` + itoa(sparkLeft) + `" y="` + itoa(sparkAxisY) + `">` + span + `</text>`)
	b.WriteString(`<text x="` + itoa(sparkRight) + `" y="` + itoa(sparkAxisY) + `" class="end">now</text>`)
	if len(vals) == 0 || slots < 2 {
		b.WriteString(`<text x="` + itoa((sparkLeft+sparkRight)/2) + `" y="` + itoa((sparkTop+sparkBottom)/2+3) +
			`" class="mid">no data yet</text></svg>`)
		return
	}
	lo, hi := vals[0], vals[0]
	for _, v := range vals {
		lo, hi = math.Min(lo, v), math.Max(hi, v)
	}
	first := slots - len(vals) // the slot of vals[0]
	// level is a value's height in 0..sparkScale, upwards.
	level := func(v float64) int {
		if hi == lo {
			return sparkScale / 2
		}
		return int(math.Round((v - lo) / (hi - lo) * sparkScale))
	}
	if len(vals) > 1 {
		b.WriteString(`<svg x="` + itoa(sparkLeft) + `" y="` + itoa(sparkTop) + `" width="` + itoa(sparkRight-sparkLeft) +
			`" height="` + itoa(sparkBottom-sparkTop) + `" viewBox="0 0 ` + itoa(slots-1) + " " + itoa(sparkScale) +
			`" preserveAspectRatio="none"><polyline points="`)
		for i, v := range vals {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(itoa(first+i) + "," + itoa(sparkScale-level(v)))
		}
		b.WriteString(`"/></svg>`)
	}
	last := vals[len(vals)-1]
	cx := sparkLeft + float64(slots-1)*float64(sparkRight-sparkLeft)/float64(slots-1)
	cy := sparkBottom - float64(level(last))*float64(sparkBottom-sparkTop)/sparkScale
	b.WriteString(`<circle cx="` + coord(cx) + `" cy="` + coord(cy) + `" r="2"/>`)
	b.WriteString(`<text x="` + itoa(sparkLabelX) + `" y="` + itoa(sparkTop+7) + `">max ` + humanize(hi) + `</text>`)
	b.WriteString(`<text x="` + itoa(sparkLabelX) + `" y="` + itoa(sparkBottom) + `">min ` + humanize(lo) + `</text>`)
	b.WriteString("</svg>")
}

// cdfData is the JSON a LatencyRecorder's _latency_cdf describes (flot's
// series format, as brpc's): x is the percent, with 99.9% at 100 and
// 99.99% at 101; y is the latency in µs.
type cdfData struct {
	Label string       `json:"label"`
	Data  [][2]float64 `json:"data"`
}

func parseCDF(desc string) (cdfData, bool) {
	var d cdfData
	if !isCDF(desc) || json.Unmarshal([]byte(desc), &d) != nil || len(d.Data) == 0 {
		return cdfData{}, false
	}
	return d, true
}

// cdfPercent turns brpc's CDF x into the percent it stands for.
func cdfPercent(x float64) float64 {
	switch x {
	case 100:
		return 99.9
	case 101:
		return 99.99
	}
	return x
}

func percentLabel(p float64) string { return strconv.FormatFloat(p, 'f', -1, 64) + "%" }

// cdfLabelled are the percents whose ticks carry a label.
var cdfLabelled = map[float64]bool{10: true, 20: true, 30: true, 40: true, 50: true, 60: true,
	70: true, 80: true, 90: true, 95: true, 99: true, 99.9: true, 99.99: true}

// CDF chart geometry.
const (
	cdfW, cdfH          = 560, 260
	cdfLeft, cdfRight   = 64, cdfW - 16
	cdfTop, cdfBottom   = 16, cdfH - 60
	cdfYTicks           = 4
	cdfTickLabelOffsetY = 12
)

// writeCDFChart draws a latency CDF: x is the percent of calls (one
// column per point: 10% steps to 90%, 1% steps to 99%, then 99.9% and
// 99.99%, so the tail gets half the width), y the latency those calls do
// not exceed, with labelled axes; every point has a tooltip.
func writeCDFChart(b *strings.Builder, title string, d cdfData) {
	pts := d.Data
	b.WriteString(`<svg class="cdf" xmlns="http://www.w3.org/2000/svg" width="` + itoa(cdfW) + `" height="` + itoa(cdfH) +
		`" viewBox="0 0 ` + itoa(cdfW) + " " + itoa(cdfH) + `" role="img">`)
	b.WriteString("<title>" + html.EscapeString(title) + "</title>")
	b.WriteString(`<rect x="` + itoa(cdfLeft) + `" y="` + itoa(cdfTop) + `" width="` + itoa(cdfRight-cdfLeft) +
		`" height="` + itoa(cdfBottom-cdfTop) + `" fill="#fcfcfc" stroke="#ccc"/>`)
	hi := 0.0
	for _, p := range pts {
		hi = math.Max(hi, p[1])
	}
	top := niceCeil(hi)
	xOf := func(i int) float64 {
		if len(pts) == 1 {
			return cdfLeft
		}
		return cdfLeft + 8 + float64(i)*float64(cdfRight-cdfLeft-16)/float64(len(pts)-1)
	}
	yOf := func(v float64) float64 { return cdfBottom - v/top*(cdfBottom-cdfTop) }
	// y axis: grid lines with latency labels
	for i := 0; i <= cdfYTicks; i++ {
		v := top * float64(i) / cdfYTicks
		y := coord(yOf(v))
		b.WriteString(`<line x1="` + itoa(cdfLeft) + `" y1="` + y + `" x2="` + itoa(cdfRight) + `" y2="` + y + `" stroke="#eee"/>`)
		b.WriteString(`<text x="` + itoa(cdfLeft-4) + `" y="` + y + `" dy="3" font-size="10" fill="#555" text-anchor="end">` +
			formatLatency(v) + `</text>`)
	}
	b.WriteString(`<text x="12" y="` + itoa((cdfTop+cdfBottom)/2) + `" font-size="10" fill="#555" text-anchor="middle" transform="rotate(-90 12 ` +
		itoa((cdfTop+cdfBottom)/2) + `)">latency</text>`)
	// x axis: a tick per point, labels on the round percents
	for i, p := range pts {
		x := coord(xOf(i))
		pc := cdfPercent(p[0])
		b.WriteString(`<line x1="` + x + `" y1="` + itoa(cdfBottom) + `" x2="` + x + `" y2="` + itoa(cdfBottom+4) + `" stroke="#888"/>`)
		if cdfLabelled[pc] {
			ly := itoa(cdfBottom + cdfTickLabelOffsetY)
			b.WriteString(`<text x="` + x + `" y="` + ly + `" font-size="10" fill="#555" text-anchor="end" transform="rotate(-45 ` +
				x + " " + ly + `)">` + percentLabel(pc) + `</text>`)
		}
	}
	b.WriteString(`<text x="` + itoa((cdfLeft+cdfRight)/2) + `" y="` + itoa(cdfH-4) +
		`" font-size="10" fill="#555" text-anchor="middle">percent of calls at or below the latency</text>`)
	if hi == 0 {
		b.WriteString(`<text x="` + itoa((cdfLeft+cdfRight)/2) + `" y="` + itoa((cdfTop+cdfBottom)/2) +
			`" font-size="11" fill="#888" text-anchor="middle">no latency recorded in the window</text>`)
	}
	// the area and the curve
	var line strings.Builder
	for i, p := range pts {
		if i > 0 {
			line.WriteByte(' ')
		}
		line.WriteString(coord(xOf(i)) + "," + coord(yOf(p[1])))
	}
	b.WriteString(`<polygon fill="#f5dfc0" fill-opacity="0.6" stroke="none" points="` + coord(xOf(0)) + "," + itoa(cdfBottom) + " " +
		line.String() + " " + coord(xOf(len(pts)-1)) + "," + itoa(cdfBottom) + `"/>`)
	b.WriteString(`<polyline fill="none" stroke="#e08020" stroke-width="2" points="` + line.String() + `"/>`)
	for i, p := range pts {
		b.WriteString(`<circle cx="` + coord(xOf(i)) + `" cy="` + coord(yOf(p[1])) + `" r="3" fill="#c05000"><title>` +
			percentLabel(cdfPercent(p[0])) + " of calls took at most " + formatLatency(p[1]) + `</title></circle>`)
	}
	b.WriteString("</svg>")
}

// cdfHint is the line under a CDF chart: the latencies at a few
// percentiles, read as backup_request_ms candidates.
func cdfHint(d cdfData) string {
	var parts []string
	for _, p := range d.Data {
		switch pc := cdfPercent(p[0]); pc {
		case 80, 90, 95, 99, 99.9:
			parts = append(parts, percentLabel(pc)+" ≤ "+formatLatency(p[1]))
		}
	}
	return strings.Join(parts, ", ") +
		". A backup_request_ms at the latency of percentile P sends a backup request for about (100 − P)% of calls."
}

// niceCeil rounds v up to 1, 2 or 5 × 10^k, at least 1.
func niceCeil(v float64) float64 {
	if v <= 1 {
		return 1
	}
	e := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*e >= v {
			return m * e
		}
	}
	return 10 * e
}

// formatLatency prints microseconds as us, ms or s.
func formatLatency(us float64) string {
	switch {
	case us == 0:
		return "0"
	case us >= 1e6:
		return trimFloat(us/1e6, 2) + "s"
	case us >= 1e3:
		return trimFloat(us/1e3, 2) + "ms"
	}
	return trimFloat(us, 1) + "us"
}

// humanize prints a value shortly: 12, 3.5, 12.3k, 4.57M.
func humanize(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1e12:
		return trimFloat(v/1e12, 2) + "T"
	case a >= 1e9:
		return trimFloat(v/1e9, 2) + "G"
	case a >= 1e6:
		return trimFloat(v/1e6, 2) + "M"
	case a >= 1e4:
		return trimFloat(v/1e3, 1) + "k"
	case a >= 100 || v == math.Trunc(v):
		return strconv.FormatFloat(math.Round(v), 'f', -1, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

func trimFloat(v float64, decimals int) string {
	s := strconv.FormatFloat(v, 'f', decimals, 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

// coord prints an SVG coordinate with one decimal at most.
func coord(v float64) string { return trimFloat(v, 1) }

func itoa(i int) string { return strconv.Itoa(i) }
