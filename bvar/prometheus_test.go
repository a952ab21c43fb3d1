package bvar

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeCDF stands for LatencyRecorder's _latency_cdf: a value that is
// neither quoted nor a number.
type fakeCDF struct{ exposed }

func (c *fakeCDF) Describe() string { return "[[80,200],[90,300]]" }

type hider interface{ Hide() }

func hideAll(t *testing.T, vars ...hider) {
	t.Cleanup(func() {
		for _, v := range vars {
			v.Hide()
		}
	})
}

func passive[T any](t *testing.T, name string, fn func() T) *PassiveStatus[T] {
	t.Helper()
	p, err := NewPassiveStatus(name, fn)
	require.NoError(t, err)
	return p
}

func dumpPrometheusOf(t *testing.T, prefixes ...string) string {
	t.Helper()
	var b strings.Builder
	require.NoError(t, dumpPrometheus(&b, func(name string) bool {
		for _, p := range prefixes {
			if strings.HasPrefix(name, p) {
				return true
			}
		}
		return false
	}))
	return b.String()
}

func TestPrometheusPlainVariables(t *testing.T) {
	requests := NewAdder[int64]("prom_test_requests")
	requests.Add(7)
	ratio := NewAdder[float64]("prom_test_ratio")
	ratio.Add(0.25)
	mx := NewMaxer[int64]("prom_test_max") // nothing recorded: the smallest int64
	big := NewStatus("prom_test_big", 1e6)
	version := NewStatus("prom_test_version", "1.0") // a string: skipped
	up := NewStatus("prom_test_up", true)            // not a number: skipped
	cdf := &fakeCDF{}
	require.NoError(t, cdf.expose(cdf, "", "prom_test_cdf")) // not a number: skipped
	hideAll(t, requests, ratio, mx, big, version, up, cdf)

	assert.Equal(t, `# HELP prom_test_big
# TYPE prom_test_big gauge
prom_test_big 1e+06
# HELP prom_test_max
# TYPE prom_test_max gauge
prom_test_max -9223372036854775808
# HELP prom_test_ratio
# TYPE prom_test_ratio gauge
prom_test_ratio 0.25
# HELP prom_test_requests
# TYPE prom_test_requests gauge
prom_test_requests 7
`, dumpPrometheusOf(t, "prom_test_"))
}

// exposeFakeLatencyFamily builds, from Status variables, what a
// LatencyRecorder exposes under prefix.
func exposeFakeLatencyFamily(t *testing.T, prefix string) {
	t.Helper()
	vars := []hider{
		NewStatus[int64](prefix+"_count", 100),
		NewStatus[int64](prefix+"_latency", 250),
		NewStatus[int64](prefix+"_latency_80", 200),
		NewStatus[int64](prefix+"_latency_90", 300),
		NewStatus[int64](prefix+"_latency_99", 900),
		NewStatus[int64](prefix+"_latency_999", 1500),
		passive(t, prefix+"_latency_9999", func() int64 { return 2000 }),
		passive(t, prefix+"_max_latency", func() int64 { return 2500 }),
		NewStatus[int64](prefix+"_qps", 50),
		NewStatus(prefix+"_latency_percentiles", "80%,90%,99%,99.9%"),
	}
	cdf := &fakeCDF{}
	require.NoError(t, cdf.expose(cdf, "", prefix+"_latency_cdf"))
	hideAll(t, append(vars, cdf)...)
}

func TestPrometheusLatencySummary(t *testing.T) {
	const p = "rpc_server_65001_example_echo_service_echo"
	exposeFakeLatencyFamily(t, p)
	conns := NewAdder[int64]("rpc_server_65001_connection_count")
	conns.Add(3)
	errs := NewAdder[int64]("rpc_server_65001_example_echo_service_echo_error")
	errs.Add(2)
	hideAll(t, conns, errs)

	assert.Equal(t, `# HELP rpc_server_65001_connection_count
# TYPE rpc_server_65001_connection_count gauge
rpc_server_65001_connection_count 3
# HELP rpc_server_65001_example_echo_service_echo_error
# TYPE rpc_server_65001_example_echo_service_echo_error gauge
rpc_server_65001_example_echo_service_echo_error 2
# HELP rpc_server_65001_example_echo_service_echo_latency
# TYPE rpc_server_65001_example_echo_service_echo_latency gauge
rpc_server_65001_example_echo_service_echo_latency 250
# HELP rpc_server_65001_example_echo_service_echo
# TYPE rpc_server_65001_example_echo_service_echo summary
rpc_server_65001_example_echo_service_echo{quantile="0.8"} 200
rpc_server_65001_example_echo_service_echo{quantile="0.9"} 300
rpc_server_65001_example_echo_service_echo{quantile="0.99"} 900
rpc_server_65001_example_echo_service_echo{quantile="0.999"} 1500
rpc_server_65001_example_echo_service_echo{quantile="0.9999"} 2000
rpc_server_65001_example_echo_service_echo{quantile="1"} 2500
rpc_server_65001_example_echo_service_echo_sum 25000
rpc_server_65001_example_echo_service_echo_count 100
# HELP rpc_server_65001_example_echo_service_echo_qps
# TYPE rpc_server_65001_example_echo_service_echo_qps gauge
rpc_server_65001_example_echo_service_echo_qps 50
`, dumpPrometheusOf(t, "rpc_server_65001_"))
}

func TestPrometheusFamiliesThatAreNotFolded(t *testing.T) {
	// Outside rpc_server: gauges, as in brpc.
	exposeFakeLatencyFamily(t, "prom_client_call")
	// Under rpc_server but without _max_latency: brpc would swallow the
	// _count and _latency variables and print nothing for them.
	orphanCount := NewStatus[int64]("rpc_server_65002_orphan_count", 4)
	orphanAvg := NewStatus[int64]("rpc_server_65002_orphan_latency", 9)
	orphanP := NewStatus[int64]("rpc_server_65002_orphan_latency_99", 30)
	hideAll(t, orphanCount, orphanAvg, orphanP)

	out := dumpPrometheusOf(t, "prom_client_call", "rpc_server_65002_")
	assert.NotContains(t, out, "summary")
	for _, name := range []string{
		"prom_client_call_count 100", "prom_client_call_latency 250", "prom_client_call_latency_80 200",
		"prom_client_call_latency_9999 2000", "prom_client_call_max_latency 2500", "prom_client_call_qps 50",
		"rpc_server_65002_orphan_count 4", "rpc_server_65002_orphan_latency 9", "rpc_server_65002_orphan_latency_99 30",
	} {
		assert.Contains(t, out, "\n"+name+"\n")
	}
	assert.NotContains(t, out, "cdf")
	assert.NotContains(t, out, "percentiles")
}

func TestPrometheusPartialFamilyAndAverageAsFloat(t *testing.T) {
	// Only _max_latency, a float average and a count: the summary has the
	// lines it can have; _sum is the truncated average times the count.
	vars := []hider{
		NewStatus("rpc_server_65003_m_latency", 12.75),
		NewStatus[int64]("rpc_server_65003_m_count", 4),
		NewStatus[int64]("rpc_server_65003_m_max_latency", 40),
	}
	hideAll(t, vars...)
	assert.Equal(t, `# HELP rpc_server_65003_m_latency
# TYPE rpc_server_65003_m_latency gauge
rpc_server_65003_m_latency 12.75
# HELP rpc_server_65003_m
# TYPE rpc_server_65003_m summary
rpc_server_65003_m{quantile="1"} 40
rpc_server_65003_m_sum 48
rpc_server_65003_m_count 4
`, dumpPrometheusOf(t, "rpc_server_65003_"))
}

func TestPrometheusNamesAreValidAndUnique(t *testing.T) {
	digit := NewAdder[int64]("9lives")
	digit.Add(1)
	underscore := NewAdder[int64]("_9lives") // same Prometheus name: skipped
	underscore.Add(2)
	hideAll(t, digit, underscore)
	const p = "rpc_server_65004_s"
	exposeFakeLatencyFamily(t, p)
	clash := []hider{ // names the summary writes
		NewStatus[int64](p, 1),
		NewStatus[int64](p+"_sum", 2),
	}
	hideAll(t, clash...)

	out := dumpPrometheusOf(t, "9lives", "_9lives", p)
	assert.True(t, strings.HasPrefix(out, "# HELP _9lives\n# TYPE _9lives gauge\n_9lives 1\n"), out)
	assert.NotContains(t, out, "_9lives 2")
	assert.NotContains(t, out, p+" 1\n")
	assert.NotContains(t, out, p+"_sum 2\n")
	assert.Contains(t, out, p+"_sum 25000\n")
	assert.Equal(t, 1, strings.Count(out, "# TYPE "+p+" "))
	checkExposition(t, out)
}

// checkExposition checks every line of a text exposition: comments name a
// valid metric, samples have a valid name, optional quantile and a number,
// and no family is declared twice.
func checkExposition(t *testing.T, out string) {
	t.Helper()
	name := `[a-zA-Z_:][a-zA-Z0-9_:]*`
	help := regexp.MustCompile(`^# HELP (` + name + `)$`)
	typ := regexp.MustCompile(`^# TYPE (` + name + `) (gauge|summary)$`)
	sample := regexp.MustCompile(`^` + name + `(\{quantile="[0-9.]+"\})? (\S+)$`)
	seen := map[string]bool{}
	require.True(t, out == "" || strings.HasSuffix(out, "\n"))
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if m := help.FindStringSubmatch(line); m != nil {
			continue
		}
		if m := typ.FindStringSubmatch(line); m != nil {
			assert.False(t, seen[m[1]], "family declared twice: %s", m[1])
			seen[m[1]] = true
			continue
		}
		m := sample.FindStringSubmatch(line)
		if assert.NotNil(t, m, "bad line %q", line) {
			assert.True(t, isPrometheusNumber(m[2]), "bad value in %q", line)
		}
	}
}

func TestDumpPrometheusEverything(t *testing.T) {
	ExposeProcessVariables()
	exposeFakeLatencyFamily(t, "rpc_server_65005_a_b")
	var b strings.Builder
	require.NoError(t, DumpPrometheus(&b))
	out := b.String()
	checkExposition(t, out)
	assert.Contains(t, out, "# TYPE rpc_server_65005_a_b summary\n")
	assert.Contains(t, out, "# TYPE process_uptime gauge\n")
	assert.Contains(t, out, "# TYPE go_goroutines gauge\n")
	assert.NotContains(t, out, "go_version", "a string")
}

func TestPrometheusHelpers(t *testing.T) {
	for in, want := range map[string]string{
		"abc": "abc", "a:b_c9": "a:b_c9", "9x": "_9x", "a-b.c": "a_b_c", "": "_", "-x": "_x",
	} {
		assert.Equal(t, want, prometheusName(in), in)
	}
	for s, want := range map[string]bool{
		"1": true, "-2.5": true, "1e+06": true, "+Inf": true, "NaN": true,
		"": false, "true": false, "0x1p3": false, "1_000": false, "1e999": false, `"1"`: false, " 1": false,
	} {
		assert.Equal(t, want, isPrometheusNumber(s), s)
	}
	for s, want := range map[string]float64{"80": 0.8, "90": 0.9, "99": 0.99, "999": 0.999, "9999": 0.9999, "5": 0.05} {
		q, ok := percentileQuantile(s)
		assert.True(t, ok, s)
		assert.Equal(t, want, q, s)
	}
	for _, s := range []string{"", "0", "100", "cdf", "+5", "99999", "-1"} {
		_, ok := percentileQuantile(s)
		assert.False(t, ok, s)
	}
	assert.Equal(t, int64(12), parseCInt("12.9"))
	assert.Equal(t, int64(-3), parseCInt("-3"))
	assert.Equal(t, int64(0), parseCInt("NaN"))
}

func TestPrometheusRealLatencyRecorder(t *testing.T) {
	now := manual(t)
	r := NewLatencyRecorder("rpc_server_65006_example_echo_service_echo_latency")
	t.Cleanup(r.Close)
	SampleAt(now)
	for i := range 100 {
		r.RecordUs(int64(i + 1))
	}
	SampleAt(now.Add(time.Second))

	const p = "rpc_server_65006_example_echo_service_echo"
	out := dumpPrometheusOf(t, "rpc_server_65006_")
	checkExposition(t, out)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	var summary []string
	for i, l := range lines {
		if l == "# TYPE "+p+" summary" {
			summary = lines[i+1 : i+9]
		}
	}
	require.Len(t, summary, 8, out)
	for i, q := range []string{"0.8", "0.9", "0.99", "0.999", "0.9999", "1"} {
		assert.True(t, strings.HasPrefix(summary[i], p+`{quantile="`+q+`"} `), summary[i])
	}
	assert.Equal(t, p+`{quantile="1"} 100`, summary[5])
	assert.Equal(t, p+"_sum 5000", summary[6]) // average 50 × 100
	assert.Equal(t, p+"_count 100", summary[7])
	assert.Contains(t, out, "\n"+p+"_latency 50\n")
	assert.Contains(t, out, "# TYPE "+p+"_qps gauge\n")
	assert.NotContains(t, out, "_cdf")
	assert.NotContains(t, out, "_percentiles")
	assert.NotContains(t, out, p+"_latency_80")
}
