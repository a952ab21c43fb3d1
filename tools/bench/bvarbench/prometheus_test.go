package bvarbench

import (
	"strings"
	"testing"
	"time"

	"github.com/gobrpc/gobrpc/bvar"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestDumpPrometheusParses reads bvar.DumpPrometheus output back with
// Prometheus' own text parser, with the strict (legacy) name rules.
func TestDumpPrometheusParses(t *testing.T) {
	bvar.SetManualSampling(true)
	defer bvar.SetManualSampling(false)
	now := time.Unix(1_000_000, 0)

	requests := bvar.NewAdder[int64]("bvarbench_requests")
	defer requests.Hide()
	requests.Add(42)

	sizes := bvar.NewIntRecorder("")
	win, err := bvar.NewWindow("bvarbench_request_size_avg", bvar.Reducer[int64](sizes), 10)
	if err != nil {
		t.Fatal(err)
	}
	defer win.Close()

	version := bvar.NewStatus("bvarbench_version", "1.2.3")
	defer version.Hide()

	const base = "rpc_server_9999_bench_service_method"
	rec := bvar.NewLatencyRecorder(base + "_latency")
	defer rec.Close()
	bvar.ExposeProcessVariables()

	bvar.SampleAt(now)
	for i := 1; i <= 1000; i++ {
		rec.RecordUs(int64(i))
		sizes.Record(int64(i % 10))
	}
	bvar.SampleAt(now.Add(time.Second))

	var out strings.Builder
	if err := bvar.DumpPrometheus(&out); err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(out.String()))
	if err != nil {
		t.Fatalf("parse: %v\n%s", err, out.String())
	}

	gauge := func(name string) float64 {
		t.Helper()
		mf := families[name]
		if mf == nil {
			t.Fatalf("no family %s in\n%s", name, out.String())
		}
		if mf.GetType() != dto.MetricType_GAUGE || len(mf.GetMetric()) != 1 {
			t.Fatalf("%s: type %v, %d metrics", name, mf.GetType(), len(mf.GetMetric()))
		}
		return mf.GetMetric()[0].GetGauge().GetValue()
	}
	if v := gauge("bvarbench_requests"); v != 42 {
		t.Errorf("bvarbench_requests = %v, want 42", v)
	}
	if v := gauge("bvarbench_request_size_avg"); v != 4 { // (0+1+...+9)*100/1000, as an integer
		t.Errorf("bvarbench_request_size_avg = %v, want 4", v)
	}
	if v := gauge(base + "_latency"); v != 500 {
		t.Errorf("%s_latency = %v, want 500", base, v)
	}
	gauge(base + "_qps")
	if v := gauge("process_uptime"); v < 0 {
		t.Errorf("process_uptime = %v", v)
	}
	if v := gauge("go_goroutines"); v <= 0 {
		t.Errorf("go_goroutines = %v", v)
	}
	for _, name := range []string{"bvarbench_version", "go_version", base + "_count", base + "_max_latency", base + "_latency_99", base + "_latency_cdf"} {
		if families[name] != nil {
			t.Errorf("family %s should not be there", name)
		}
	}

	mf := families[base]
	if mf == nil || mf.GetType() != dto.MetricType_SUMMARY || len(mf.GetMetric()) != 1 {
		t.Fatalf("%s is not one summary: %v", base, mf)
	}
	s := mf.GetMetric()[0].GetSummary()
	if s.GetSampleCount() != 1000 || s.GetSampleSum() != 500*1000 {
		t.Errorf("count %d sum %v, want 1000 and 500000", s.GetSampleCount(), s.GetSampleSum())
	}
	want := []float64{0.8, 0.9, 0.99, 0.999, 0.9999, 1}
	q := s.GetQuantile()
	if len(q) != len(want) {
		t.Fatalf("quantiles %v, want %v", q, want)
	}
	prev := 0.0
	for i, w := range want {
		if q[i].GetQuantile() != w {
			t.Errorf("quantile %d is %v, want %v", i, q[i].GetQuantile(), w)
		}
		v := q[i].GetValue()
		if v < prev || v > 1000 {
			t.Errorf("quantile %v = %v (previous %v)", w, v, prev)
		}
		prev = v
	}
	if q[len(q)-1].GetValue() != 1000 {
		t.Errorf("max latency %v, want 1000", q[len(q)-1].GetValue())
	}
	if p80 := q[0].GetValue(); p80 < 780 || p80 > 820 {
		t.Errorf("p80 = %v, want about 800", p80)
	}
}
