package bvar

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestReducersUnderConcurrency(t *testing.T) {
	a := NewAdder[int64]("")
	f := NewAdder[float64]("")
	mx := NewMaxer[int64]("")
	mn := NewMiner[int64]("")
	r := NewIntRecorder("")
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10000 {
				a.Add(1)
				f.Add(0.5)
				mx.Record(int64(g*10000 + i))
				mn.Record(int64(g*10000 + i))
				r.Record(int64(i))
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, int64(80000), a.Get())
	assert.Equal(t, 40000.0, f.Get())
	assert.Equal(t, int64(79999), mx.Get())
	assert.Equal(t, int64(0), mn.Get())
	sum, n := r.SumCount()
	assert.Equal(t, int64(80000), n)
	assert.Equal(t, int64(8*9999*10000/2), sum)
	assert.Equal(t, int64(4999), r.Get())
	assert.Equal(t, "80000", a.Describe())
	assert.Equal(t, "40000", f.Describe())
}

func TestNames(t *testing.T) {
	cases := map[string]string{
		"example.EchoService.Echo": "example_echo_service_echo",
		"HTTPServer":               "httpserver",
		"rpc_server_8000":          "rpc_server_8000",
		"a--b  c":                  "a_b_c",
		"fooBar":                   "foo_bar",
		"foo_Bar":                  "foo_bar",
		"/vars":                    "_vars",
	}
	for in, want := range cases {
		assert.Equal(t, want, ToUnderscoredName(in), in)
	}
}

func TestExposeHideAndDuplicates(t *testing.T) {
	a := NewAdder[int64]("test_expose_a")
	defer a.Hide()
	assert.Equal(t, "test_expose_a", a.Name())
	v, ok := Describe("test_expose_a")
	assert.True(t, ok)
	assert.Equal(t, "0", v)

	b := NewAdder[int64]("")
	assert.Equal(t, "", b.Name(), "an empty name is not exposed")
	err := b.Expose("test_expose_a")
	assert.ErrorContains(t, err, "already exposed")
	assert.Error(t, b.Expose(""))
	require.NoError(t, b.ExposeAs("Test.Expose", "B"))
	assert.Equal(t, "test_expose_b", b.Name())
	require.NoError(t, b.Expose("test_expose_c"), "re-exposing renames")
	_, ok = Find("test_expose_b")
	assert.False(t, ok)
	b.Hide()
	assert.NotContains(t, List(), "test_expose_c")
}

func TestDumpAndFilter(t *testing.T) {
	vars := []interface{ Hide() }{
		NewStatus("dump_test_str", "hello"),
		NewAdder[int64]("dump_test_count"),
		NewAdder[int64]("dump_test_count2"),
		NewStatus("dump_other", 1.5),
	}
	defer func() {
		for _, v := range vars {
			v.Hide()
		}
	}()
	var b strings.Builder
	n, err := Dump(&b, "dump_test_*")
	require.NoError(t, err)
	assert.Equal(t, 3, n)
	assert.Equal(t, "dump_test_count : 0\r\ndump_test_count2 : 0\r\ndump_test_str : \"hello\"\r\n", b.String())

	cases := map[string][]string{
		"dump_other":                  {"dump_other"},
		"dump_test_count$":            {"dump_test_count2"},
		"dump_other;dump_test_str":    {"dump_other", "dump_test_str"},
		"dump_other, *str":            {"dump_other", "dump_test_str"},
		"dump_test_count":             {"dump_test_count"},
		"*_count*":                    {"dump_test_count", "dump_test_count2"},
		"dump_$$$$$":                  {"dump_other"},
		"no_such_var":                 nil,
		"dump_test_c*t":               {"dump_test_count"},
		"dump_test_c*t$":              {"dump_test_count2"},
		"dump_test_count, dump_other": {"dump_other", "dump_test_count"},
	}
	for filter, want := range cases {
		f, err := ParseFilter(filter)
		require.NoError(t, err, filter)
		var got []string
		for _, name := range List() {
			if strings.HasPrefix(name, "dump_") && f.Match(name) {
				got = append(got, name)
			}
		}
		assert.Equal(t, want, got, filter)
	}
	for _, bad := range []string{"a?b", "x y", "a/b", ",;,"} {
		_, err := ParseFilter(bad)
		assert.Error(t, err, bad)
		_, err = Dump(&b, bad)
		assert.Error(t, err, bad)
	}
}

// manual switches to manual sampling for one test.
func manual(t *testing.T) time.Time {
	SetManualSampling(true)
	t.Cleanup(func() { SetManualSampling(false) })
	return time.Unix(1_000_000, 0)
}

func TestWindowsExactWithManualClock(t *testing.T) {
	now := manual(t)
	a := NewAdder[int64]("")
	mx := NewMaxer[int64]("")
	mn := NewMiner[int64]("")
	r := NewIntRecorder("")
	wa, err := NewWindow("", Reducer[int64](a), 3)
	require.NoError(t, err)
	defer wa.Close()
	ps, err := NewPerSecond("", Reducer[int64](a), 3)
	require.NoError(t, err)
	defer ps.Close()
	wmx, err := NewWindow("", Reducer[int64](mx), 2)
	require.NoError(t, err)
	defer wmx.Close()
	wmn, err := NewWindow("", Reducer[int64](mn), 2)
	require.NoError(t, err)
	defer wmn.Close()
	wr, err := NewWindow("", Reducer[int64](r), 2)
	require.NoError(t, err)
	defer wr.Close()

	SampleAt(now) // the first sample: fewer than two read 0
	a.Add(100)
	assert.Equal(t, int64(0), wa.Get())
	assert.Equal(t, int64(0), ps.Get())

	// second 1..5: add 10*s, record s as max/min/average
	for s := int64(1); s <= 5; s++ {
		a.Add(10 * s)
		mx.Record(s)
		mx.Record(-s)
		mn.Record(100 - s)
		r.Record(s)
		r.Record(s + 2)
		SampleAt(now.Add(time.Duration(s) * time.Second))
	}
	// Adder window of 3 s: seconds 3, 4, 5 added 30+40+50.
	assert.Equal(t, int64(120), wa.Get())
	assert.Equal(t, int64(40), ps.Get())
	// Maxer/Miner windows of 2 s: seconds 4 and 5.
	assert.Equal(t, int64(5), wmx.Get())
	assert.Equal(t, int64(95), wmn.Get())
	// IntRecorder window of 2 s: values 4,6,5,7 -> 5.
	assert.Equal(t, int64(5), wr.Get())
	assert.Equal(t, []int64{30, 40, 50}, wa.Series(10), "as many seconds as the largest window keeps")
}

func TestWindowSizeGrowsAndFallsBackToOldest(t *testing.T) {
	now := manual(t)
	a := NewAdder[int64]("")
	small, err := NewWindow("", Reducer[int64](a), 1)
	require.NoError(t, err)
	defer small.Close()
	SampleAt(now)
	a.Add(1)
	SampleAt(now.Add(time.Second))
	a.Add(2)
	SampleAt(now.Add(2 * time.Second))
	big, err := NewWindow("", Reducer[int64](a), 10)
	require.NoError(t, err)
	defer big.Close()
	// The big window starts from the two samples the small one kept: it
	// falls back to the oldest available.
	assert.Equal(t, int64(2), big.Get())
	assert.Equal(t, int64(2), small.Get())
	a.Add(4)
	SampleAt(now.Add(3 * time.Second))
	a.Add(8)
	SampleAt(now.Add(4 * time.Second))
	assert.Equal(t, int64(14), big.Get())
	assert.Equal(t, int64(8), small.Get())
}

func TestWindowErrors(t *testing.T) {
	a := NewAdder[int64]("")
	for _, size := range []int{0, -1, 3601} {
		_, err := NewWindow("", Reducer[int64](a), size)
		assert.Error(t, err, size)
	}
	_, err := NewWindow[int64]("", nil, 10)
	assert.Error(t, err)
	var nilAdder *Adder[int64]
	_, err = NewWindow("", Reducer[int64](nilAdder), 10)
	assert.Error(t, err)
	_, err = NewPerSecond("", Reducer[int64](NewMaxer[int64]("")), 10)
	assert.Error(t, err)
	_, err = NewPassiveStatus[int]("x", nil)
	assert.Error(t, err)

	taken := NewAdder[int64]("window_err_taken")
	defer taken.Hide()
	_, err = NewWindow("window_err_taken", Reducer[int64](a), 10)
	assert.Error(t, err, "a duplicate name")
}

// One real-time test: the background sampler feeds a window by itself
// and stops when the window is closed (goleak checks at the end).
func TestRealTimeSampler(t *testing.T) {
	a := NewAdder[int64]("")
	w, err := NewPerSecond("", Reducer[int64](a), 1)
	require.NoError(t, err)
	stop := make(chan struct{})
	var done sync.WaitGroup
	done.Add(1)
	go func() {
		defer done.Done()
		for {
			select {
			case <-stop:
				return
			default:
				a.Add(1)
				time.Sleep(time.Millisecond)
			}
		}
	}()
	require.Eventually(t, func() bool { return w.Get() > 0 }, 5*time.Second, 50*time.Millisecond)
	close(stop)
	done.Wait()
	w.Close()
}

func TestStatus(t *testing.T) {
	s := NewStatus("", int64(3))
	s.Set(4)
	assert.Equal(t, int64(4), s.Get())
	assert.Equal(t, "4", s.Describe())
	var calls atomic.Int32
	p, err := NewPassiveStatus("", func() string { calls.Add(1); return "x" })
	require.NoError(t, err)
	assert.Equal(t, `"x"`, p.Describe())
	assert.Equal(t, int32(1), calls.Load())
}

func TestSampleHookRunsAfterSamples(t *testing.T) {
	now := manual(t)
	a := NewAdder[int64]("")
	w, err := NewWindow("", a, 1)
	require.NoError(t, err)
	defer w.Close()
	var seen []int64
	h := NewSampleHook(func(time.Time) { seen = append(seen, w.Get()) })
	SampleAt(now)
	a.Add(5)
	SampleAt(now.Add(time.Second))
	h.Close()
	SampleAt(now.Add(2 * time.Second))
	assert.Equal(t, []int64{0, 5}, seen, "the hook sees the window of the same pass; none after Close")
}
