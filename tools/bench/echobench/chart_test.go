package echobench

import (
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fakeResults are plausible results of every scenario and framework.
func fakeResults() ([]scenario, []string, map[scenario]map[string][]runResult) {
	fws := []string{"gobrpc-single", "gobrpc-pooled", "grpc", "netrpc"}
	var scs []scenario
	res := map[scenario]map[string][]runResult{}
	for _, p := range []int{16, 1024} {
		for ci, c := range []int{1, 64, 512} {
			sc := scenario{payload: p, callers: c}
			scs = append(scs, sc)
			res[sc] = map[string][]runResult{}
			for fi, fw := range fws {
				for round := range 2 {
					calls := int64((20000 + 15000*ci) * (4 - fi) / (1 + p/1024))
					p99 := time.Duration((ci*ci*40+1)*(fi+1)*(round+1)) * 50 * time.Microsecond
					res[sc][fw] = append(res[sc][fw], runResult{
						calls: calls, elapsed: time.Second,
						p50: p99 / 3, p99: p99, p999: 2 * p99,
						cli: usage{cpu: 400 * time.Millisecond, mallocs: uint64(calls) * 3},
						srv: usage{cpu: 500 * time.Millisecond, mallocs: uint64(calls) * 7},
					})
				}
			}
		}
	}
	return scs, fws, res
}

func TestChartIsWellFormedSVG(t *testing.T) {
	scs, fws, res := fakeResults()
	path := filepath.Join(t.TempDir(), "chart.svg")
	if err := writeChart(path, scs, fws, res); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(strings.NewReader(string(b)))
	polylines := 0
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "polyline" {
			polylines++
		}
	}
	// 2 payloads x 2 panels x 4 frameworks.
	if polylines != 16 {
		t.Errorf("%d polylines, want 16", polylines)
	}
	for _, want := range []string{"gobrpc (single)", "grpc-go", "16B payload", "1KB payload", "callers"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("chart lacks %q", want)
		}
	}
}

func TestPercentile(t *testing.T) {
	var lat []uint32
	for i := 1; i <= 1000; i++ {
		lat = append(lat, uint32(i))
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500}, {0.99, 990}, {0.999, 999}, {1, 1000}} {
		if got := percentile(lat, c.q); got != c.want {
			t.Errorf("percentile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
}

func TestSelectScenarios(t *testing.T) {
	*scenarios = "16B/1,1KB/*"
	defer func() { *scenarios = "" }()
	scs, err := selectScenarios()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range scs {
		names = append(names, s.name())
	}
	if got := strings.Join(names, " "); got != "16B/1 1KB/1 1KB/64 1KB/512" {
		t.Errorf("scenarios %q", got)
	}
}

// With every framework the legend wraps onto rows within the chart, and
// brpc's client (no percentiles) has QPS lines but no p99 line.
func TestChartWithEveryFramework(t *testing.T) {
	scs, _, res := fakeResults()
	fws := frameworkNames
	for _, sc := range scs {
		for _, fw := range fws {
			rs := slices.Clone(res[sc]["grpc"])
			for i := range rs {
				rs[i].external = clientFrameworks[fw].dial == nil
			}
			res[sc][fw] = rs
		}
	}
	path := filepath.Join(t.TempDir(), "chart.svg")
	if err := writeChart(path, scs, fws, res); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(strings.NewReader(string(b)))
	var width float64
	polylines := 0
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
		se, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		attr := func(name string) float64 {
			for _, a := range se.Attr {
				if a.Name.Local == name {
					v, _ := strconv.ParseFloat(a.Value, 64)
					return v
				}
			}
			return 0
		}
		switch se.Name.Local {
		case "svg":
			width = attr("width")
		case "polyline":
			polylines++
		case "text":
			if x := attr("x"); x < 0 || x > width {
				t.Errorf("text at x=%v outside the chart (width %v)", x, width)
			}
		}
	}
	// 2 payloads x (QPS and p99 of each of the 12 frameworks; brpc's client
	// reports its p99 too).
	if want := 2 * (12 + 12); polylines != want {
		t.Errorf("%d polylines, want %d", polylines, want)
	}
}
