package naming

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestPeriodicFirstFetch(t *testing.T) {
	tests := []struct {
		name  string
		nodes []Node
		err   error
		want  []Node
	}{
		{"ok", []Node{{Addr: "1.1.1.1:1"}, {Addr: "1.1.1.1:1"}}, nil, []Node{{Addr: "1.1.1.1:1"}}},
		{"empty", nil, nil, []Node{}},
		{"failed", []Node{{Addr: "1.1.1.1:1"}}, errors.New("down"), []Node{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			captureLogs(t)
			r := &recorder{}
			ns := NewPeriodic(func(context.Context) ([]Node, error) { return tc.nodes, tc.err },
				func() time.Duration { return time.Hour }, r)
			defer ns.Close()
			require.Equal(t, 1, r.count())
			assert.Equal(t, tc.want, r.last())
		})
	}
}

func TestPeriodicIntervalReadEachCycle(t *testing.T) {
	var fetches, intervals atomic.Int32
	r := &recorder{}
	ns := NewPeriodic(func(context.Context) ([]Node, error) {
		n := fetches.Add(1)
		return []Node{{Addr: "1.1.1.1:1", Tag: string(rune('a' + n%2))}}, nil
	}, func() time.Duration {
		intervals.Add(1)
		return time.Millisecond
	}, r)
	require.Eventually(t, func() bool { return fetches.Load() >= 5 }, 2*time.Second, time.Millisecond)
	ns.Close()
	assert.GreaterOrEqual(t, intervals.Load(), fetches.Load()-1)
	// Every fetch changed the list; one cut short by Close may not deliver.
	assert.GreaterOrEqual(t, r.count(), int(fetches.Load())-1)
}

func TestPeriodicCloseCancelsFetch(t *testing.T) {
	started := make(chan struct{}, 1)
	first := true
	r := &recorder{}
	ns := NewPeriodic(func(ctx context.Context) ([]Node, error) {
		if first {
			first = false
			return []Node{{Addr: "1.1.1.1:1"}}, nil
		}
		started <- struct{}{}
		<-ctx.Done() // a lookup that hangs until Close
		return nil, ctx.Err()
	}, func() time.Duration { return time.Millisecond }, r)
	<-started
	done := make(chan struct{})
	go func() { ns.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("Close did not return")
	}
	assert.Equal(t, 1, r.count())
	goleak.VerifyNone(t)
}

func TestPeriodicNilIntervalUsesFlag(t *testing.T) {
	p := newPeriodic("", func(context.Context) ([]Node, error) { return nil, nil }, nil, &recorder{})
	defer p.Close()
	assert.Equal(t, 5*time.Second, p.next())
}
