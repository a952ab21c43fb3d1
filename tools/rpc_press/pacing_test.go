package main

import (
	"testing"
	"time"
)

func TestAutoThreadNum(t *testing.T) {
	tests := []struct{ qps, want int }{
		{-1, 50}, {0, 50}, {1, 1}, {100, 1}, {9999, 1}, {10000, 1}, {19999, 1},
		{20000, 2}, {100000, 10}, {499999, 49}, {500000, 50}, {10000000, 50},
	}
	for _, tt := range tests {
		if got := autoThreadNum(tt.qps); got != tt.want {
			t.Errorf("autoThreadNum(%d) = %d, want %d", tt.qps, got, tt.want)
		}
	}
}

func TestCallInterval(t *testing.T) {
	tests := []struct {
		qps, threads int
		want         float64 // ns
	}{
		{100, 1, 1e7},
		{200, 1, 5e6},
		{200, 2, 1e7},
		{3, 2, 1e9 / 1.5},
		{100000, 10, 1e5},
		{0, 4, 0},
		{-5, 4, 0},
		{5000000, 1, 1000}, // capped at 1e6 calls a second per thread
	}
	for _, tt := range tests {
		if got := callInterval(tt.qps, tt.threads); got != tt.want {
			t.Errorf("callInterval(%d, %d) = %v, want %v", tt.qps, tt.threads, got, tt.want)
		}
	}
}

const ms = int64(time.Millisecond)

func TestPacerSteady(t *testing.T) {
	p := newPacer(float64(5*ms), 100*ms)
	now := 100 * ms
	for k := range 10 {
		// Before the call is due: wait exactly until it is.
		if k > 0 {
			if d := p.wait(now - 2*ms); d != 2*time.Millisecond {
				t.Fatalf("call %d: wait = %v, want 2ms", k, d)
			}
		}
		if d := p.wait(now); d != 0 {
			t.Fatalf("call %d: wait at due time = %v, want 0", k, d)
		}
		p.sent()
		now += 5 * ms
	}
}

func TestPacerNoDrift(t *testing.T) {
	// 3 calls a second: 333333333.33 ns apart; the 3000th call is due
	// exactly 1000 s later, not 1 µs early from rounding each interval.
	p := newPacer(1e9/3, 0)
	for range 3000 {
		p.sent()
	}
	if got, want := p.due(), int64(1000*time.Second); got != want {
		t.Fatalf("due = %d, want %d", got, want)
	}
}

func TestPacerCatchesUpSmallLag(t *testing.T) {
	// 1 ms interval: the resync threshold is max(10 ms, 10 intervals) =
	// 10 ms. 8 ms late: send the missed calls at once, keep the schedule.
	p := newPacer(float64(ms), 0)
	now := 8 * ms
	sent := 0
	for p.wait(now) == 0 {
		p.sent()
		sent++
	}
	if sent != 9 { // calls due at 0..8 ms
		t.Fatalf("sent %d calls to catch up, want 9", sent)
	}
	if d := p.wait(now); d != time.Millisecond {
		t.Fatalf("then wait = %v, want 1ms", d)
	}
}

func TestPacerResyncs(t *testing.T) {
	for _, tt := range []struct {
		name     string
		interval int64
		maxLag   int64
	}{
		{"10ms floor", ms, 10 * ms},            // 10 intervals = 10 ms
		{"10 intervals", 5 * ms, 50 * ms},      // 10 intervals = 50 ms > 10 ms
		{"fast thread", ms / 10, 10 * ms},      // 10 intervals = 1 ms < 10 ms
		{"slow thread", 1000 * ms, 10000 * ms}, // qps 1 per thread
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := newPacer(float64(tt.interval), 0)
			if p.maxLag != tt.maxLag {
				t.Fatalf("maxLag = %d, want %d", p.maxLag, tt.maxLag)
			}
			p.wait(0)
			p.sent() // next due at interval
			// Exactly maxLag behind: still catching up.
			now := tt.interval + tt.maxLag
			if d := p.wait(now); d != 0 || p.base != 0 {
				t.Fatalf("at max lag: wait %v base %d, want 0 and no resync", d, p.base)
			}
			// More than that: resync to now.
			now++
			if d := p.wait(now); d != 0 {
				t.Fatalf("past max lag: wait = %v, want 0", d)
			}
			if p.due() != now {
				t.Fatalf("after resync the call is due at %d, want now %d", p.due(), now)
			}
			p.sent()
			if d := p.wait(now); d != time.Duration(tt.interval) {
				t.Fatalf("after resync: wait = %v, want one interval %v", d, time.Duration(tt.interval))
			}
		})
	}
}

func TestAutoMaxInflight(t *testing.T) {
	tests := []struct {
		qps, threads int
		timeoutMs    int32
		want         int
	}{
		{0, 50, 1000, 1},          // unlimited: each thread waits for its call
		{100, 1, 1000, 200},       // twice the calls of one timeout
		{10, 1, 1000, 64},         // at least 64
		{200, 1, -1, 400},         // no deadline: as if 1 s
		{100000, 10, 1000, 10000}, // at most 10000
		{1000, 2, 100, 100},
	}
	for _, tt := range tests {
		if got := autoMaxInflight(tt.qps, tt.threads, tt.timeoutMs); got != tt.want {
			t.Errorf("autoMaxInflight(%d, %d, %d) = %d, want %d", tt.qps, tt.threads, tt.timeoutMs, got, tt.want)
		}
	}
}

func TestLogLimiter(t *testing.T) {
	var l logLimiter
	t0 := time.Unix(1000, 0)
	for i := range maxErrorLogsPerSecond {
		if ok, _ := l.allow(t0); !ok {
			t.Fatalf("line %d refused", i)
		}
	}
	for range 5 {
		if ok, _ := l.allow(t0.Add(500 * time.Millisecond)); ok {
			t.Fatal("line over the limit allowed")
		}
	}
	ok, dropped := l.allow(t0.Add(time.Second))
	if !ok || dropped != 5 {
		t.Fatalf("next second: ok=%v dropped=%d, want true 5", ok, dropped)
	}
	if d := l.takeDropped(); d != 0 {
		t.Fatalf("takeDropped = %d, want 0", d)
	}
}
