package loadtest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/gobrpc/gobrpc/backup"
	"github.com/gobrpc/gobrpc/bvar"
	"github.com/gobrpc/gobrpc/channel"
	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/testsupport/testpb"
)

// StrictMode chooses the flag backup_request_ratio_strict for the
// channel a Run builds (the channel reads it once, in Init).
type StrictMode int

const (
	// StrictFromFlag leaves the flag as it is.
	StrictFromFlag StrictMode = iota
	// StrictOff builds the channel with best-effort mode (brpc's).
	StrictOff
	// StrictOn builds the channel with strict mode.
	StrictOn
)

// Phase is a stretch of a run with one server Profile.
type Phase struct {
	Name    string // e.g. "normal", "stall"; shown in Second.Phase
	Seconds int    // whole sampler seconds, >= 1
	Profile Profile
}

// Config describes a Run.
type Config struct {
	// Servers is the number of echo servers; 0 means 3.
	Servers int
	// Callers is the number of closed-loop callers, each sending its next
	// call as soon as the previous one ended; 0 means 16.
	Callers int
	// LB is the load balancer; "" means "rr".
	LB string
	// Options are the channel's; nil means channel.DefaultOptions(). Note
	// that a literal's zero MaxRetry leaves no retry for a backup, so no
	// backup is ever sent: start from DefaultOptions.
	Options *channel.Options
	// Strict sets the flag backup_request_ratio_strict while the channel
	// is built (and restores it), for channels with BackupRequestMaxRatio.
	Strict StrictMode
	// WarmupSeconds are whole sampler seconds with the first phase's
	// profile before the measured ones. The partial second before the
	// sampler's first tick is never measured either.
	WarmupSeconds int
	// Phases follow each other at sampler ticks; at least one.
	Phases []Phase
	// Message is the request's message; "" means "hello".
	Message string
	// Observe, when set, is called by the callers after each call (from
	// many goroutines at once), e.g. to study the calls that sent a
	// backup. It must be quick: the next call waits for it.
	Observe func(cntl *controller.Controller, latency time.Duration)
	// BackupDelay, when set, reports a backup policy's current delay
	// (false: none yet) at the end of each second, for Second.BackupDelay;
	// else the channel's own <prefix>_backup_delay_us is read.
	BackupDelay func() (time.Duration, bool)
}

// Second is what happened in one sampler second. Calls, errors and
// latencies belong to the second a call completed in; backups to the
// second they were sent in; server requests to the second they arrived.
type Second struct {
	Index int    // from 0, the first measured second
	Phase string // the phase's name
	// Calls completed (successfully or not), and how many failed.
	Calls, Errors int64
	// Backups sent (the channel's <prefix>_backup_sent) and refused by
	// the policy (<prefix>_backup_refused).
	Backups, Refused int64
	// BackedUpCalls are the calls completed in this second that had sent
	// a backup (Controller.HasBackupRequest).
	BackedUpCalls int64
	// ServerRequests is the number of requests the servers received.
	ServerRequests int64
	// Latency percentiles of the calls completed in this second, exact
	// (nearest rank over every latency), and the largest.
	P50, P99, P999, Max time.Duration
	// BackupDelay is the adaptive policy's delay at the end of the second
	// (<prefix>_backup_delay_us), -1 without one or before it is trusted.
	BackupDelay time.Duration
}

// BackupRatio is backups sent / calls completed in the second.
func (s Second) BackupRatio() float64 { return ratio(s.Backups, s.Calls) }

// Load is server requests / calls completed in the second: 1 means no
// extra request, 2 twice the load.
func (s Second) Load() float64 { return ratio(s.ServerRequests, s.Calls) }

// Summary aggregates a range of seconds.
type Summary struct {
	Seconds                                        int
	Calls, Errors, Backups, Refused, BackedUpCalls int64
	ServerRequests                                 int64
	// Exact percentiles over every call of the range.
	P50, P99, P999, Max time.Duration
}

// QPS is calls per second.
func (s Summary) QPS() float64 { return ratio(s.Calls, int64(s.Seconds)) }

// BackupRatio is backups sent / calls completed.
func (s Summary) BackupRatio() float64 { return ratio(s.Backups, s.Calls) }

// Load is server requests / calls completed.
func (s Summary) Load() float64 { return ratio(s.ServerRequests, s.Calls) }

// ExtraLoad is the share of requests beyond one per call: server
// requests / calls − 1.
func (s Summary) ExtraLoad() float64 {
	if s.Calls == 0 {
		return 0
	}
	return s.Load() - 1
}

// Result is a run's measurements.
type Result struct {
	Seconds []Second // the measured seconds, in order
	Total   Summary  // all of them
	// BackupVarPrefix is the channel's variable prefix (rpc_channel_<n>).
	BackupVarPrefix string
	// BackupLatenessUs is how long after its due time each backup left,
	// in µs, over the channel's <prefix>_backup_lateness window (its last
	// 10 s); -1 where no backup was sent.
	BackupLatenessUs struct{ Avg, P90, P99, P999, Max int64 }
	// FirstError is the text of the first failed call, if any.
	FirstError string

	lat [][]time.Duration // per second, sorted
}

// Summarize aggregates seconds [from, to) (clamped to the run).
func (r *Result) Summarize(from, to int) Summary {
	from, to = max(from, 0), min(to, len(r.Seconds))
	return r.summarize(func(i int) bool { return i >= from && i < to })
}

// Phase aggregates every second of the phases with that name (several
// phases may share one, e.g. "normal" before and after a spike).
func (r *Result) Phase(name string) Summary {
	return r.summarize(func(i int) bool { return r.Seconds[i].Phase == name })
}

func (r *Result) summarize(in func(i int) bool) Summary {
	var s Summary
	var all []time.Duration
	for i, sec := range r.Seconds {
		if !in(i) {
			continue
		}
		s.Seconds++
		s.Calls += sec.Calls
		s.Errors += sec.Errors
		s.Backups += sec.Backups
		s.Refused += sec.Refused
		s.BackedUpCalls += sec.BackedUpCalls
		s.ServerRequests += sec.ServerRequests
		all = append(all, r.lat[i]...)
	}
	slices.Sort(all)
	s.P50, s.P99, s.P999, s.Max = percentiles(all)
	return s
}

// PhaseStart is the index of the first second of the phase with that
// name, -1 if none.
func (r *Result) PhaseStart(name string) int {
	for i, s := range r.Seconds {
		if s.Phase == name {
			return i
		}
	}
	return -1
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// percentiles reads p50, p99, p99.9 and the max of sorted latencies by
// nearest rank.
func percentiles(sorted []time.Duration) (p50, p99, p999, maxLat time.Duration) {
	if len(sorted) == 0 {
		return
	}
	at := func(q float64) time.Duration {
		i := int(math.Ceil(q*float64(len(sorted)))) - 1
		return sorted[min(max(i, 0), len(sorted)-1)]
	}
	return at(0.50), at(0.99), at(0.999), sorted[len(sorted)-1]
}

// initMu serializes building channels while the strict flag is switched.
var initMu sync.Mutex

func newChannel(url string, cfg *Config) (*channel.Channel, error) {
	opts := channel.DefaultOptions()
	if cfg.Options != nil {
		opts = *cfg.Options
	}
	initMu.Lock()
	defer initMu.Unlock()
	if cfg.Strict != StrictFromFlag {
		old := backup.StrictFlag.Get()
		if err := backup.StrictFlag.SetValue(cfg.Strict == StrictOn); err != nil {
			return nil, err
		}
		defer backup.StrictFlag.SetValue(old)
	}
	ch := &channel.Channel{}
	if err := ch.Init(url, cfg.LB, &opts); err != nil {
		return nil, err
	}
	return ch, nil
}

// counter reads an int64 Adder of the channel by name.
// readInt reads an exposed integer variable, -1 when absent.
func readInt(name string) int64 {
	if d, ok := bvar.Describe(name); ok {
		if n, err := strconv.ParseInt(strings.TrimSpace(d), 10, 64); err == nil {
			return n
		}
	}
	return -1
}

func counter(name string) (*bvar.Adder[int64], error) {
	v, ok := bvar.Find(name)
	if !ok {
		return nil, fmt.Errorf("loadtest: no variable %s", name)
	}
	a, ok := v.(*bvar.Adder[int64])
	if !ok {
		return nil, fmt.Errorf("loadtest: variable %s is a %T, want *bvar.Adder[int64]", name, v)
	}
	return a, nil
}

// snapshot holds the counters at one sampler tick.
type snapshot struct{ sent, refused, requests, delayUs int64 }

// callerSecond is what one caller saw in one second.
type callerSecond struct {
	lat              []time.Duration
	errors, backedUp int64
}

// Run starts cfg.Servers echo servers, a channel to them and cfg.Callers
// closed-loop callers, plays the phases and returns every second's
// measurements. Everything it started is stopped before it returns: the
// callers end their last call, the servers answer the attempts that lost
// (waited for at most 2 s), the channel is closed and the servers stop.
// A run lasts the phases and warm-up plus up to two seconds; it gives up (with what it measured so far and
// an error) when ctx ends or when the bvar sampler does not tick (manual
// sampling).
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if cfg.Servers == 0 {
		cfg.Servers = 3
	}
	if cfg.Callers == 0 {
		cfg.Callers = 16
	}
	if cfg.LB == "" {
		cfg.LB = "rr"
	}
	if cfg.Message == "" {
		cfg.Message = "hello"
	}
	if cfg.Callers < 1 || cfg.WarmupSeconds < 0 || len(cfg.Phases) == 0 {
		return nil, errors.New("loadtest: Config needs Callers >= 1, WarmupSeconds >= 0 and at least one phase")
	}
	// slotPhase[k] is the phase of sampler second k (warm-up included).
	var slotPhase []int
	for range cfg.WarmupSeconds {
		slotPhase = append(slotPhase, 0)
	}
	for i, p := range cfg.Phases {
		if p.Seconds < 1 {
			return nil, fmt.Errorf("loadtest: phase %d (%q) lasts %d s, want >= 1", i, p.Name, p.Seconds)
		}
		for range p.Seconds {
			slotPhase = append(slotPhase, i)
		}
	}
	slots := len(slotPhase)

	cl, err := StartCluster(cfg.Servers, cfg.Phases[0].Profile)
	if err != nil {
		return nil, err
	}
	defer cl.Stop()
	ch, err := newChannel(cl.ListURL(), &cfg)
	if err != nil {
		return nil, err
	}
	defer ch.Close() // before the servers stop (defers run last first)
	prefix := ch.BackupVarPrefix()
	sent, err := counter(prefix + "_backup_sent")
	if err != nil {
		return nil, err
	}
	refused, err := counter(prefix + "_backup_refused")
	if err != nil {
		return nil, err
	}

	// The hook starts sampler second k at its k-th call: it switches the
	// profile at phase boundaries, snapshots the counters and moves the
	// callers to the new second. Callers record into slot+1 (0: before
	// the first tick, slots+1: after the last second).
	var (
		slot     atomic.Int64
		mu       sync.Mutex // guards ticks and snaps
		ticks    int
		snaps    = make([]snapshot, slots+1)
		finished = make(chan struct{})
	)
	slot.Store(-1)
	hook := bvar.NewSampleHook(func(time.Time) {
		mu.Lock()
		defer mu.Unlock()
		k := ticks
		if k > slots {
			return
		}
		ticks++
		if k < slots && k > 0 && slotPhase[k] != slotPhase[k-1] {
			cl.SetProfile(cfg.Phases[slotPhase[k]].Profile)
		}
		delayUs := readInt(prefix + "_backup_delay_us")
		if cfg.BackupDelay != nil {
			delayUs = -1
			if d, ok := cfg.BackupDelay(); ok {
				delayUs = d.Microseconds()
			}
		}
		snaps[k] = snapshot{sent.Get(), refused.Get(), cl.Requests(), delayUs}
		slot.Store(int64(k))
		if k == slots {
			close(finished)
		}
	})
	defer hook.Close()

	stop := make(chan struct{})
	perCaller := make([][]callerSecond, cfg.Callers)
	var firstErr atomic.Pointer[string]
	stub := testpb.NewEchoServiceStub(ch)
	var wg sync.WaitGroup
	for i := range cfg.Callers {
		secs := make([]callerSecond, slots+2)
		perCaller[i] = secs
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := &testpb.EchoRequest{Message: proto.String(cfg.Message)}
			for {
				select {
				case <-stop:
					return
				default:
				}
				cntl := controller.New()
				resp := &testpb.EchoResponse{}
				begin := time.Now()
				stub.Echo(cntl, req, resp, nil)
				lat := time.Since(begin)
				s := &secs[slot.Load()+1]
				s.lat = append(s.lat, lat)
				if cntl.Failed() {
					s.errors++
					if firstErr.Load() == nil {
						text := cntl.ErrorText()
						firstErr.CompareAndSwap(nil, &text)
					}
				}
				if cntl.HasBackupRequest() {
					s.backedUp++
				}
				if cfg.Observe != nil {
					cfg.Observe(cntl, lat)
				}
			}
		}()
	}

	var runErr error
	limit := time.NewTimer(time.Duration(slots+5) * time.Second)
	select {
	case <-finished:
	case <-ctx.Done():
		runErr = ctx.Err()
	case <-limit.C:
		runErr = errors.New("loadtest: the bvar sampler stopped ticking (manual sampling?)")
	}
	limit.Stop()
	close(stop)
	wg.Wait()
	hook.Close()
	// Let the servers answer the attempts that lost (a backup, or the
	// original a backup beat) while the channel still reads them.
	cl.WaitIdle(2 * time.Second)

	mu.Lock()
	done := min(ticks-1, slots) // seconds whose end was snapshotted
	mu.Unlock()
	res := &Result{BackupVarPrefix: prefix}
	// Read while the channel still exposes it (it is closed on return).
	for name, v := range map[string]*int64{"latency": &res.BackupLatenessUs.Avg, "latency_90": &res.BackupLatenessUs.P90,
		"latency_99": &res.BackupLatenessUs.P99, "latency_999": &res.BackupLatenessUs.P999, "max_latency": &res.BackupLatenessUs.Max} {
		*v = readInt(prefix + "_backup_lateness_" + name)
	}
	if p := firstErr.Load(); p != nil {
		res.FirstError = *p
	}
	for k := cfg.WarmupSeconds; k < done; k++ {
		sec := Second{Index: k - cfg.WarmupSeconds, Phase: cfg.Phases[slotPhase[k]].Name}
		var lat []time.Duration
		for _, secs := range perCaller {
			cs := &secs[k+1]
			lat = append(lat, cs.lat...)
			sec.Errors += cs.errors
			sec.BackedUpCalls += cs.backedUp
		}
		slices.Sort(lat)
		sec.Calls = int64(len(lat))
		sec.Backups = snaps[k+1].sent - snaps[k].sent
		sec.Refused = snaps[k+1].refused - snaps[k].refused
		sec.ServerRequests = snaps[k+1].requests - snaps[k].requests
		sec.P50, sec.P99, sec.P999, sec.Max = percentiles(lat)
		sec.BackupDelay = -1
		if us := snaps[k+1].delayUs; us >= 0 {
			sec.BackupDelay = time.Duration(us) * time.Microsecond
		}
		res.Seconds = append(res.Seconds, sec)
		res.lat = append(res.lat, lat)
	}
	res.Total = res.Summarize(0, len(res.Seconds))
	return res, runErr
}
