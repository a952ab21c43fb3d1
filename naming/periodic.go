package naming

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// errNotModified lets file:// say "nothing changed" without a re-parse or a
// failure; it is neither logged nor counted as one.
var errNotModified = errors.New("naming: not modified")

// NewPeriodic runs fetch now and then once per interval, as brpc's
// PeriodicNamingService does, and keeps w up to date:
//   - the first fetch runs before NewPeriodic returns and always reaches w,
//     as an empty list when it fails, so a channel's Init is not blocked;
//   - a later failure keeps the last list (logged once per run of failures);
//   - w.Update runs only when the set of nodes changes; duplicates are removed.
//
// interval is called before every wait, so it may follow a reloadable flag;
// nil (or a result <= 0) means the flag ns_access_interval. ctx is
// cancelled by Close, which waits for a running fetch to return; Close must
// not be called from w.Update.
func NewPeriodic(fetch func(ctx context.Context) ([]Node, error), interval func() time.Duration, w Watcher) NamingService {
	return newPeriodic("", fetch, interval, w)
}

type periodic struct {
	url      string // for logs
	fetch    func(ctx context.Context) ([]Node, error)
	interval func() time.Duration
	n        notifier
	failing  bool

	cancel    context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
}

func newPeriodic(url string, fetch func(ctx context.Context) ([]Node, error), interval func() time.Duration, w Watcher) *periodic {
	if interval == nil {
		interval = flagInterval
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &periodic{url: url, fetch: fetch, interval: interval, n: notifier{w: w},
		cancel: cancel, done: make(chan struct{})}
	p.step(ctx)
	go p.run(ctx)
	return p
}

func (p *periodic) next() time.Duration {
	if d := p.interval(); d > 0 {
		return d
	}
	return flagInterval()
}

func (p *periodic) run(ctx context.Context) {
	defer close(p.done)
	t := time.NewTimer(p.next())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p.step(ctx)
		t.Reset(p.next())
	}
}

func (p *periodic) step(ctx context.Context) {
	nodes, err := p.fetch(ctx)
	if ctx.Err() != nil {
		return // closing: the result may be partial, and nobody waits for it
	}
	switch {
	case errors.Is(err, errNotModified) && p.n.started:
		return
	case err != nil:
		if !p.n.started {
			slog.Warn("gobrpc: naming: first lookup failed, starting with no servers", "url", p.url, "err", err)
			p.failing = true
			p.n.deliver(nil)
		} else if !p.failing {
			slog.Warn("gobrpc: naming: lookup failed, keeping the last servers", "url", p.url, "err", err)
			p.failing = true
		}
		return
	}
	if p.failing {
		slog.Info("gobrpc: naming: lookup works again", "url", p.url)
		p.failing = false
	}
	p.n.deliver(nodes)
}

func (p *periodic) Close() {
	p.closeOnce.Do(func() {
		p.cancel()
		<-p.done
	})
}
