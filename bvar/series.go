package bvar

import "sync"

// seriesKind says how a window combines a reducer's samples.
type seriesKind uint8

const (
	kindReversible seriesKind = iota // cumulative values: latest minus older (Adder)
	kindMax                          // per-second values reset on sampling: max over the window
	kindMin                          // likewise, min
	kindAverage                      // cumulative (sum, count): Δsum / Δcount (IntRecorder)
)

type point[T Number] struct {
	t int64 // unix ns of the sample
	v T     // value, or sum for kindAverage
	c int64 // count, for kindAverage
}

// series is the ring of per-second samples of one reducer, shared by every
// window on it (brpc's ReducerSampler). It holds as many samples as the
// largest window needs, plus one.
type series[T Number] struct {
	kind seriesKind
	take func() (T, int64)

	mu    sync.Mutex
	ring  []point[T]
	next  int // where the next sample goes
	n     int // samples held
	users int // open windows; the series is sampled while > 0
}

// lazySeries creates a reducer's series on first use.
type lazySeries[T Number] struct {
	once sync.Once
	s    *series[T]
}

func (l *lazySeries[T]) get(kind seriesKind, take func() (T, int64)) *series[T] {
	l.once.Do(func() { l.s = &series[T]{kind: kind, take: take} })
	return l.s
}

// addUser makes room for a window of size seconds and starts sampling
// when it is the first user.
func (s *series[T]) addUser(size int) {
	s.mu.Lock()
	if need := size + 1; need > len(s.ring) {
		s.grow(need)
	}
	s.users++
	first := s.users == 1
	s.mu.Unlock()
	if first {
		addSource(s)
	}
}

func (s *series[T]) removeUser() {
	s.mu.Lock()
	s.users--
	last := s.users == 0
	if last { // a later window starts from fresh samples
		s.n, s.next = 0, 0
	}
	s.mu.Unlock()
	if last {
		removeSource(s)
	}
}

// grow keeps the samples in order in a larger ring.
func (s *series[T]) grow(size int) {
	ring := make([]point[T], size)
	for i := 0; i < s.n; i++ { // oldest first
		ring[i] = s.at(s.n - 1 - i)
	}
	s.ring, s.next = ring, s.n%size
}

// at returns the sample k steps before the latest (0 = latest).
func (s *series[T]) at(k int) point[T] {
	i := (s.next - 1 - k) % len(s.ring)
	if i < 0 {
		i += len(s.ring)
	}
	return s.ring[i]
}

func (s *series[T]) takeSample(nowNs int64) {
	v, c := s.take()
	s.mu.Lock()
	if len(s.ring) > 0 {
		s.ring[s.next] = point[T]{t: nowNs, v: v, c: c}
		s.next = (s.next + 1) % len(s.ring)
		if s.n < len(s.ring) {
			s.n++
		}
	}
	s.mu.Unlock()
}

// window combines the samples of the last size seconds (or as many as
// there are) and returns the value and the time they span in ns. With
// fewer than two samples it returns zero, as brpc does.
func (s *series[T]) window(size int) (T, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var zero T
	if s.n < 2 {
		return zero, 0
	}
	back := min(size, s.n-1)
	latest, older := s.at(0), s.at(back)
	span := latest.t - older.t
	switch s.kind {
	case kindReversible:
		return latest.v - older.v, span
	case kindAverage:
		dc := latest.c - older.c
		if dc <= 0 {
			return zero, span
		}
		return (latest.v - older.v) / T(dc), span
	}
	// kindMax, kindMin: each sample is that second's extremum.
	best := s.at(0).v
	for k := 1; k < back; k++ {
		v := s.at(k).v
		if (s.kind == kindMax && v > best) || (s.kind == kindMin && v < best) {
			best = v
		}
	}
	return best, span
}

// values returns up to n recent window-values for plotting: for each of
// the last n samples, the value of the one-second window ending there,
// oldest first.
func (s *series[T]) values(n int) []T {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n < 2 {
		return nil
	}
	n = min(n, s.n-1)
	out := make([]T, n)
	for k := 0; k < n; k++ {
		cur, prev := s.at(k), s.at(k+1)
		var v T
		switch s.kind {
		case kindReversible:
			v = cur.v - prev.v
		case kindAverage:
			if dc := cur.c - prev.c; dc > 0 {
				v = (cur.v - prev.v) / T(dc)
			}
		default:
			v = cur.v
		}
		out[n-1-k] = v
	}
	return out
}
