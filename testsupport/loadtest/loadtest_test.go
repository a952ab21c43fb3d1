package loadtest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/gobrpc/gobrpc/channel"
	"github.com/gobrpc/gobrpc/testsupport/echotest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, echotest.LeakOptions()...)
}

func TestProfileSample(t *testing.T) {
	p := Profile{Base: time.Millisecond, SlowFraction: 0.25, Slow: 50 * time.Millisecond}
	slow := 0
	for range 10000 {
		switch d := p.Sample(); d {
		case p.Slow:
			slow++
		case p.Base:
		default:
			t.Fatalf("sampled %v", d)
		}
	}
	assert.InDelta(t, 2500, slow, 300)
	assert.Equal(t, "1ms, 25% at 50ms", p.String())
	assert.Equal(t, "50ms", Profile{Base: 50 * time.Millisecond}.String())
}

func TestPercentiles(t *testing.T) {
	var lat []time.Duration
	for i := 1; i <= 1000; i++ {
		lat = append(lat, time.Duration(i))
	}
	p50, p99, p999, mx := percentiles(lat)
	assert.Equal(t, []time.Duration{500, 990, 999, 1000}, []time.Duration{p50, p99, p999, mx})
	p50, p99, p999, mx = percentiles([]time.Duration{7})
	assert.Equal(t, []time.Duration{7, 7, 7, 7}, []time.Duration{p50, p99, p999, mx})
}

// One fast second, then one where every request is slow: with unlimited
// backups after 5 ms, nearly every call of the stall sends one, and the
// servers see them.
func TestRunMeasuresEachSecond(t *testing.T) {
	opts := channel.DefaultOptions()
	opts.BackupRequestMs = 5
	res, err := Run(context.Background(), Config{
		Servers: 2, Callers: 4, Options: &opts,
		Phases: []Phase{
			{Name: "normal", Seconds: 1, Profile: Profile{Base: time.Millisecond}},
			{Name: "stall", Seconds: 1, Profile: Profile{Base: 20 * time.Millisecond}},
		}})
	require.NoError(t, err)
	require.Len(t, res.Seconds, 2)
	normal, stall := res.Seconds[0], res.Seconds[1]
	t.Logf("normal %+v", normal)
	t.Logf("stall  %+v", stall)
	assert.Equal(t, "normal", normal.Phase)
	assert.Equal(t, "stall", stall.Phase)
	assert.Zero(t, normal.Errors+stall.Errors, res.FirstError)
	assert.Greater(t, normal.Calls, stall.Calls)
	assert.Less(t, normal.P50, 5*time.Millisecond)
	assert.GreaterOrEqual(t, stall.P50, 20*time.Millisecond)
	assert.Greater(t, stall.BackupRatio(), 0.5)
	assert.Greater(t, stall.Load(), 1.5)
	assert.LessOrEqual(t, stall.P50, stall.P99)
	assert.LessOrEqual(t, stall.P99, stall.P999)
	assert.LessOrEqual(t, stall.P999, stall.Max)
	assert.Equal(t, res.Seconds[0].Calls+res.Seconds[1].Calls, res.Total.Calls)
	assert.Equal(t, stall.Calls, res.Phase("stall").Calls)
	assert.Equal(t, 1, res.PhaseStart("stall"))
}

// A phase name used twice (before and after a spike) sums only its own
// seconds.
func TestPhaseSumsOnlyItsSeconds(t *testing.T) {
	ms := time.Millisecond
	r := &Result{
		Seconds: []Second{
			{Phase: "normal", Calls: 2, Backups: 1, ServerRequests: 3},
			{Phase: "spike", Calls: 1, Backups: 1, ServerRequests: 2},
			{Phase: "normal", Calls: 2, ServerRequests: 2},
		},
		lat: [][]time.Duration{{1 * ms, 2 * ms}, {50 * ms}, {3 * ms, 4 * ms}},
	}
	n := r.Phase("normal")
	assert.Equal(t, Summary{Seconds: 2, Calls: 4, Backups: 1, ServerRequests: 5,
		P50: 2 * ms, P99: 4 * ms, P999: 4 * ms, Max: 4 * ms}, n)
	assert.InDelta(t, 0.25, n.ExtraLoad(), 1e-9)
	assert.Equal(t, 50*ms, r.Phase("spike").P99)
	assert.Equal(t, int64(3), r.Summarize(1, 5).Calls)
	assert.Equal(t, 1, r.PhaseStart("spike"))
	assert.Equal(t, -1, r.PhaseStart("nope"))
}
