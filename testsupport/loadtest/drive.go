package loadtest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/gobrpc/gobrpc/channel"
	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/testsupport/testpb"
)

// Load is a stretch of offered load for Drive: open loop (Rate) or closed
// loop (Callers).
//
// Open loop is what overload is: calls arrive at Rate whatever happens to
// the earlier ones, as from many independent clients, so "k× the
// capacity" means k×C calls per second whether the server queues them
// or rejects them. Closed-loop callers instead adapt to the server: they
// wait in its queue (an unlimited server sees at most C calls per
// second) and fire again as soon as they are rejected (a limited one sees
// as many calls as the CPU can send). Closed loop is the way to measure
// the peak throughput: enough callers keep every worker busy.
type Load struct {
	Name     string
	Duration time.Duration
	// Rate > 0: open loop, calls started at this many per second, evenly
	// paced.
	Rate float64
	// Callers > 0 (with Rate 0): closed loop, each caller starting its
	// next call as soon as the previous one ended.
	Callers int
}

// Outcome is what happened to the calls that ended during one Load
// (whenever they started).
type Outcome struct {
	Name     string
	Duration time.Duration // the Load's actual length
	Started  int64         // calls started during the Load
	// Calls that succeeded, got ELIMIT, or failed otherwise (timeouts ...).
	OK, Rejected, Failed int64
	FirstError           string // text of the first call that failed otherwise

	ok, rejected []time.Duration // latencies, sorted
}

// Goodput is successful calls per second.
func (o *Outcome) Goodput() float64 {
	if o.Duration <= 0 {
		return 0
	}
	return float64(o.OK) / o.Duration.Seconds()
}

// Calls is the number of calls that ended.
func (o *Outcome) Calls() int64 { return o.OK + o.Rejected + o.Failed }

// RejectedShare is the share of the calls that ended with ELIMIT.
func (o *Outcome) RejectedShare() float64 { return ratio(o.Rejected, o.Calls()) }

// FailedShare is the share of the calls that failed with anything but
// ELIMIT.
func (o *Outcome) FailedShare() float64 { return ratio(o.Failed, o.Calls()) }

// OKLatency is the q-quantile (nearest rank, exact) of the successful
// calls' latencies, 0 when none.
func (o *Outcome) OKLatency(q float64) time.Duration { return quantile(o.ok, q) }

// RejectedLatency is the q-quantile of the ELIMIT calls' latencies.
func (o *Outcome) RejectedLatency(q float64) time.Duration { return quantile(o.rejected, q) }

func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// DriveConfig describes a Drive.
type DriveConfig struct {
	// Addr is the server, "127.0.0.1:port".
	Addr string
	// TimeoutMs is the calls' timeout; 0 means 1000. The channel has
	// MaxRetry 0, so an ELIMIT comes back to the caller instead of being
	// retried.
	TimeoutMs int32
	// Message is the request's message; "" means "hello".
	Message string
	Loads   []Load
}

// Drive builds a channel to cfg.Addr and plays the loads one after the
// other, returning one Outcome per load. A call belongs to the load in
// which it ended. After the last load no call is started; Drive waits for
// the calls still out (at most their timeout; they are counted nowhere),
// closes the channel and returns. It gives up early, with an error and
// what it measured, when ctx ends.
func Drive(ctx context.Context, cfg DriveConfig) ([]Outcome, error) {
	if len(cfg.Loads) == 0 {
		return nil, errors.New("loadtest: Drive needs at least one Load")
	}
	for i, l := range cfg.Loads {
		if l.Duration <= 0 || (l.Rate <= 0) == (l.Callers <= 0) {
			return nil, fmt.Errorf("loadtest: load %d (%q) needs a positive Duration and either Rate or Callers", i, l.Name)
		}
	}
	if cfg.TimeoutMs == 0 {
		cfg.TimeoutMs = 1000
	}
	if cfg.Message == "" {
		cfg.Message = "hello"
	}
	opts := channel.DefaultOptions()
	opts.MaxRetry = 0
	opts.TimeoutMs = cfg.TimeoutMs
	ch := &channel.Channel{}
	if err := ch.Init(cfg.Addr, "", &opts); err != nil {
		return nil, err
	}
	defer ch.Close()
	stub := testpb.NewEchoServiceStub(ch)

	d := &driver{out: make([]Outcome, len(cfg.Loads))}
	for i, l := range cfg.Loads {
		d.out[i].Name = l.Name
	}
	msg := proto.String(cfg.Message)
	// call sends one call; done (nil: synchronous) runs after it is
	// recorded.
	call := func(done func()) {
		cntl := controller.New()
		req := &testpb.EchoRequest{Message: msg}
		resp := &testpb.EchoResponse{}
		d.started()
		begin := time.Now()
		if done == nil {
			stub.Echo(cntl, req, resp, nil)
			d.record(cntl, time.Since(begin))
			return
		}
		stub.Echo(cntl, req, resp, func() {
			d.record(cntl, time.Since(begin))
			done()
		})
	}

	var wg sync.WaitGroup // every call and caller
	var err error
	for i, l := range cfg.Loads {
		begin := time.Now()
		d.cur.Store(int64(i))
		end := begin.Add(l.Duration)
		if l.Rate > 0 {
			err = openLoop(ctx, end, l.Rate, func() { wg.Add(1); call(wg.Done) })
		} else {
			stop := make(chan struct{})
			for range l.Callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						call(nil)
					}
				}()
			}
			err = sleepUntil(ctx, end)
			close(stop) // the callers end their last call in the next load
		}
		d.out[i].Duration = time.Since(begin)
		if err != nil {
			break
		}
	}
	d.cur.Store(int64(len(cfg.Loads))) // later calls are counted nowhere
	wg.Wait()
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := range d.out {
		slices.Sort(d.out[i].ok)
		slices.Sort(d.out[i].rejected)
	}
	return d.out, err
}

type driver struct {
	cur atomic.Int64 // the load being played
	mu  sync.Mutex
	out []Outcome
}

func (d *driver) started() {
	d.mu.Lock()
	if i := d.cur.Load(); i < int64(len(d.out)) {
		d.out[i].Started++
	}
	d.mu.Unlock()
}

func (d *driver) record(cntl *controller.Controller, lat time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	i := d.cur.Load()
	if i >= int64(len(d.out)) {
		return
	}
	o := &d.out[i]
	switch {
	case !cntl.Failed():
		o.OK++
		o.ok = append(o.ok, lat)
	case cntl.ErrorCode() == controller.ELIMIT:
		o.Rejected++
		o.rejected = append(o.rejected, lat)
	default:
		o.Failed++
		if o.FirstError == "" {
			o.FirstError = cntl.ErrorText()
		}
	}
}

// openLoop calls issue rate times per second, evenly paced from now until
// end. Sleeps overshoot (by up to a millisecond or so), so calls go out
// in small bursts that catch up with the schedule.
func openLoop(ctx context.Context, end time.Time, rate float64, issue func()) error {
	start := time.Now()
	var n int64
	for {
		now := time.Now()
		if !now.Before(end) {
			return nil
		}
		for due := int64(now.Sub(start).Seconds()*rate) + 1; n < due; n++ {
			issue()
		}
		next := start.Add(time.Duration(float64(n) / rate * float64(time.Second)))
		if next.After(end) {
			next = end
		}
		if err := sleepUntil(ctx, next); err != nil {
			return err
		}
	}
}

func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
