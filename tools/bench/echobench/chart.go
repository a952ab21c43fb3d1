package echobench

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
)

// writeChart writes an SVG (by hand, no dependency) with one row per
// payload and two panels per row: QPS against callers (linear axis) and
// p99 against callers (log axis), one line per framework, medians over the
// rounds. brpc's echo_client reports no p99: its pairs have no line in the
// p99 panels.
func writeChart(path string, scs []scenario, fws []string, res map[scenario]map[string][]runResult) error {
	var payloads, callers []int
	for _, sc := range scs {
		if !slices.Contains(payloads, sc.payload) {
			payloads = append(payloads, sc.payload)
		}
		if !slices.Contains(callers, sc.callers) {
			callers = append(callers, sc.callers)
		}
	}
	slices.Sort(payloads)
	slices.Sort(callers)

	const (
		panelW, panelH = 440, 290
		left, right    = 70, 20
		top, bottom    = 40, 50
		titleH         = 50
		legendH        = 40
	)
	const legendW, legendRowH = 150, 24
	width := 2 * panelW
	perRow := width / legendW
	legendRows := (len(fws) + perRow - 1) / perRow
	height := titleH + len(payloads)*panelH + legendH + (legendRows-1)*legendRowH
	title := "gobrpc vs grpc-go"
	if slices.ContainsFunc(fws, func(fw string) bool { return clientFrameworks[fw].needsBrpc() }) {
		title = "gobrpc vs grpc-go vs C++ brpc"
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="%d" y="22" text-anchor="middle" font-size="16" font-weight="bold">echo over loopback: %s (median of %s, %v each)</text>`+"\n", width/2, title, rounds(*repeat), *duration)
	fmt.Fprintf(&b, `<text x="%d" y="40" text-anchor="middle" fill="#555">%s</text>`+"\n", width/2, xmlEscape(machineLine()))

	for row, p := range payloads {
		for col, metric := range []string{"QPS", "p99"} {
			ox := col * panelW
			oy := titleH + row*panelH
			x0, x1 := float64(ox+left), float64(ox+panelW-right)
			y0, y1 := float64(oy+top), float64(oy+panelH-bottom) // y0 top, y1 bottom
			title := fmt.Sprintf("%s, %s payload", map[string]string{"QPS": "QPS (higher is better)", "p99": "p99, log scale (lower is better)"}[metric], sizeName(p))
			fmt.Fprintf(&b, `<text x="%.0f" y="%d" text-anchor="middle" font-weight="bold">%s</text>`+"\n", (x0+x1)/2, oy+top-12, xmlEscape(title))

			// Values per framework per callers; NaN where not measured.
			vals := map[string][]float64{}
			var all []float64
			for _, fw := range fws {
				v := make([]float64, len(callers))
				for i, c := range callers {
					v[i] = math.NaN()
					rs := res[scenario{payload: p, callers: c}][fw]
					if len(rs) == 0 {
						continue
					}
					s := summarize(rs)
					if metric == "QPS" {
						v[i] = s.qps
					} else {
						v[i] = s.p99
					}
					if v[i] > 0 {
						all = append(all, v[i])
					}
				}
				vals[fw] = v
			}

			// X: callers at even steps (they grow roughly geometrically).
			xAt := func(i int) float64 {
				if len(callers) == 1 {
					return (x0 + x1) / 2
				}
				pad := 30.0
				return x0 + pad + float64(i)*(x1-x0-2*pad)/float64(len(callers)-1)
			}
			// Y: linear from 0 for QPS, log for p99.
			var yAt func(v float64) float64
			var ticks []float64
			var label func(v float64) string
			if metric == "QPS" {
				hi := 1.0
				if len(all) > 0 {
					hi = slices.Max(all)
				}
				step := niceStep(hi / 5)
				top := math.Ceil(hi/step) * step
				for t := 0.0; t <= top+step/2; t += step {
					ticks = append(ticks, t)
				}
				yAt = func(v float64) float64 { return y1 - v/top*(y1-y0) }
				label = fmtCount
			} else {
				lo, hi := 1.0, 10.0
				if len(all) > 0 {
					lo = math.Pow(10, math.Floor(math.Log10(slices.Min(all))))
					hi = math.Pow(10, math.Ceil(math.Log10(slices.Max(all))))
					if hi <= lo {
						hi = lo * 10
					}
				}
				for d := lo; d <= hi*1.0001; d *= 10 {
					for _, m := range []float64{1, 2, 5} {
						if t := d * m; t <= hi*1.0001 {
							ticks = append(ticks, t)
						}
					}
				}
				llo, lhi := math.Log10(lo), math.Log10(hi)
				yAt = func(v float64) float64 { return y1 - (math.Log10(v)-llo)/(lhi-llo)*(y1-y0) }
				label = fmtMicros
			}

			// Grid, axes, labels.
			for _, t := range ticks {
				y := yAt(t)
				fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e5e5e5"/>`+"\n", x0, y, x1, y)
				fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end" dominant-baseline="middle" fill="#333">%s</text>`+"\n", x0-6, y, label(t))
			}
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`+"\n", x0, y1, x1, y1)
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`+"\n", x0, y0, x0, y1)
			for i, c := range callers {
				x := xAt(i)
				fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`+"\n", x, y1, x, y1+4)
				fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#333">%d</text>`+"\n", x, y1+17, c)
			}
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#333">callers</text>`+"\n", (x0+x1)/2, y1+35)

			// Series.
			for _, fw := range fws {
				st := seriesStyle(fw)
				var pts []string
				for i, v := range vals[fw] {
					if math.IsNaN(v) || v <= 0 {
						continue
					}
					pts = append(pts, fmt.Sprintf("%.1f,%.1f", xAt(i), yAt(v)))
				}
				if len(pts) > 1 {
					fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>`+"\n", strings.Join(pts, " "), st.color, st.dash)
				}
				for _, pt := range pts {
					x, y, _ := strings.Cut(pt, ",")
					fmt.Fprintf(&b, `<circle cx="%s" cy="%s" r="3.5" fill="%s"/>`+"\n", x, y, st.color)
				}
			}
		}
	}

	// Legend.
	for i, fw := range fws {
		row, col := i/perRow, i%perRow
		inRow := min(perRow, len(fws)-row*perRow)
		ly := titleH + len(payloads)*panelH + 20 + row*legendRowH
		x := width/2 - inRow*legendW/2 + col*legendW
		st := seriesStyle(fw)
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/>`+"\n", x, ly, x+28, ly, st.color, st.dash)
		fmt.Fprintf(&b, `<circle cx="%d" cy="%d" r="3.5" fill="%s"/>`+"\n", x+14, ly, st.color)
		fmt.Fprintf(&b, `<text x="%d" y="%d" dominant-baseline="middle">%s</text>`+"\n", x+34, ly, xmlEscape(st.label))
	}
	b.WriteString("</svg>\n")
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

type style struct{ color, dash, label string }

func seriesStyle(fw string) style {
	switch fw {
	case "gobrpc-single":
		return style{"#1f77b4", "", "gobrpc (single)"}
	case "gobrpc-pooled":
		return style{"#2ca02c", "", "gobrpc (pooled)"}
	case "gobrpc-ctx":
		return style{"#17becf", "", "gobrpc (ctx client)"}
	case "grpc":
		return style{"#d62728", "", "grpc-go"}
	case "gobrpc-grpc":
		return style{"#e377c2", "", "gobrpc h2:grpc -> grpc-go"}
	case "grpc-gobrpc":
		return style{"#bcbd22", "", "grpc-go -> gobrpc"}
	case "netrpc":
		return style{"#7f7f7f", ` stroke-dasharray="5,4"`, "net/rpc"}
	case "rawtcp":
		return style{"#000000", ` stroke-dasharray="2,3"`, "raw TCP (floor)"}
	case "gobrpc-brpc":
		return style{"#9467bd", "", "gobrpc -> brpc"}
	case "brpc-brpc":
		return style{"#ff7f0e", "", "brpc -> brpc"}
	case "brpc-gobrpc":
		return style{"#8c564b", "", "brpc -> gobrpc"}
	case "brpc-brpc-pooled":
		return style{"#ff7f0e", ` stroke-dasharray="5,4"`, "brpc -> brpc (pooled)"}
	}
	return style{"#000", "", fw}
}

func machineLine() string {
	return fmt.Sprintf("%s, %d CPUs (%s), client and server processes on 127.0.0.1", runtime.Version(), runtime.NumCPU(), cpuModel())
}

// niceStep rounds x up to 1, 2 or 5 times a power of ten.
func niceStep(x float64) float64 {
	if x <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= x {
			return m * p
		}
	}
	return 10 * p
}

func fmtCount(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 1e6:
		return trimFloat(v/1e6) + "M"
	case v >= 1e3:
		return trimFloat(v/1e3) + "k"
	}
	return trimFloat(v)
}

func fmtMicros(v float64) string {
	switch {
	case v >= 1e6:
		return trimFloat(v/1e6) + "s"
	case v >= 1e3:
		return trimFloat(v/1e3) + "ms"
	}
	return trimFloat(v) + "µs"
}

func trimFloat(v float64) string {
	s := fmt.Sprintf("%.2f", v)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

func xmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}
