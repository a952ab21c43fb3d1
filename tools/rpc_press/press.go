package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/gobrpc/gobrpc/bvar"
	"github.com/gobrpc/gobrpc/channel"
	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/server"
)

// Options are rpc_press's settings; main fills them from the flags of the
// same names (see README.md).
type Options struct {
	ProtoFile string   // -proto
	Includes  []string // -inc, split at ';'
	Method    string   // -method, "package.Service.Method"
	Server    string   // -server: an address, or a naming URL with LBPolicy
	LBPolicy  string   // -lb_policy
	Input     string   // -input: a file of JSON objects, or the JSON itself
	Output    string   // -output: responses as JSON, "" for none
	Pretty    bool     // -pretty: indent the responses in Output

	QPS         int           // -qps: calls a second in all; <= 0 is unlimited
	ThreadNum   int           // -thread_num: 0 picks autoThreadNum(QPS)
	Duration    time.Duration // -duration: 0 runs until the context ends
	MaxInflight int           // -max_inflight: calls in flight per thread; 0 picks autoMaxInflight

	Protocol             string // -protocol
	ConnectionType       string // -connection_type
	TimeoutMs            int32  // -timeout_ms; <= 0 is no deadline
	ConnectTimeoutMs     int32  // -connection_timeout_ms; <= 0 is only the deadline
	MaxRetry             int    // -max_retry
	RequestCompressType  int32  // -request_compress_type
	ResponseCompressType int32  // -response_compress_type: accepted, the server decides
	AttachmentSize       int    // -attachment_size: bytes of 'a' with every request

	// DummyAddr is where the dummy server with the builtin pages (/vars
	// shows rpc_press_*) listens, e.g. "127.0.0.1:8888" or "127.0.0.1:0";
	// "" starts none.
	DummyAddr string

	// Stdout receives the per-second lines and [Latency] blocks; nil is
	// os.Stdout.
	Stdout io.Writer
}

// Stats are the totals of a run.
type Stats struct {
	Sent, Success, Errors int64
}

// press is one run of rpc_press: brpc's RpcPress with its InfoThread.
type press struct {
	opts        Options
	threads     int
	interval    float64 // ns between two calls of one thread; 0 is unlimited
	maxInflight int

	md         protoreflect.MethodDescriptor
	reqs       []proto.Message
	ch         channel.Channel
	chReady    bool
	dummy      *server.Server
	attachment []byte
	compress   controller.CompressType
	stdout     io.Writer
	out        *responseWriter

	latency       *bvar.LatencyRecorder // successes, µs: rpc_press_latency ...
	errCount      *bvar.Adder[int64]    // rpc_press_error_count
	sent          *bvar.Adder[int64]    // not exposed, as in brpc
	inflightWaits *bvar.Adder[int64]    // rpc_press_inflight_wait_count
	calls         sync.WaitGroup        // calls in flight
	errLog        logLimiter
	inflightLog   logLimiter
}

// Run loads the method and the requests, sends calls until ctx ends or
// opts.Duration passes, waits for the calls in flight, prints the last
// statistics and releases everything.
func Run(ctx context.Context, opts Options) (Stats, error) {
	p, err := newPress(opts)
	if err != nil {
		return Stats{}, err
	}
	defer p.close()
	return p.run(ctx), nil
}

func newPress(opts Options) (*press, error) {
	p := &press{opts: opts, stdout: opts.Stdout}
	if p.stdout == nil {
		p.stdout = os.Stdout
	}
	if err := p.init(); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

// init does newPress's work; close releases what it made, even on error.
func (p *press) init() (err error) {
	opts := p.opts
	if opts.DummyAddr != "" {
		// brpc's StartDummyServerAt: a failure is logged, not fatal.
		srv := server.New(nil)
		if err := srv.Start(opts.DummyAddr); err != nil {
			log.Printf("ERROR: fail to start dummy server at %s: %v", opts.DummyAddr, err)
		} else {
			p.dummy = srv
			log.Printf("Dummy server (builtin pages, /vars) is serving on %v", srv.ListenAddress())
		}
	}
	switch t := controller.CompressType(opts.RequestCompressType); t {
	case controller.CompressNone, controller.CompressSnappy, controller.CompressGzip, controller.CompressZlib:
		p.compress = t
	default:
		return fmt.Errorf("unsupported -request_compress_type=%d (0 none, 1 snappy, 2 gzip, 3 zlib)", opts.RequestCompressType)
	}
	if opts.ResponseCompressType != 0 {
		log.Printf("NOTE: -response_compress_type=%d is ignored: a gobrpc (or brpc) server chooses how it compresses its response", opts.ResponseCompressType)
	}
	if opts.AttachmentSize < 0 {
		return fmt.Errorf("invalid -attachment_size=%d", opts.AttachmentSize)
	}
	p.attachment = bytes.Repeat([]byte{'a'}, opts.AttachmentSize)

	p.threads = opts.ThreadNum
	if p.threads <= 0 {
		p.threads = autoThreadNum(opts.QPS)
	}
	p.interval = callInterval(opts.QPS, p.threads)
	if opts.QPS > 0 && float64(opts.QPS)/float64(p.threads) > maxQPSPerThread {
		log.Printf("WARNING: -qps=%d over %d threads is more than %.0f calls a second per thread; each sends at most that",
			opts.QPS, p.threads, float64(maxQPSPerThread))
	}
	p.maxInflight = opts.MaxInflight
	if p.maxInflight <= 0 {
		p.maxInflight = autoMaxInflight(opts.QPS, p.threads, opts.TimeoutMs)
	}

	if p.md, err = findMethod(opts.ProtoFile, opts.Includes, opts.Method); err != nil {
		return err
	}
	if opts.Output != "" {
		if p.out, err = openResponseWriter(opts.Output, opts.Pretty); err != nil {
			return err
		}
	}
	chOpts := channel.DefaultOptions()
	chOpts.TimeoutMs = noLimitIfNotPositive(opts.TimeoutMs)
	chOpts.ConnectTimeoutMs = noLimitIfNotPositive(opts.ConnectTimeoutMs)
	chOpts.MaxRetry = opts.MaxRetry
	chOpts.Protocol = opts.Protocol
	chOpts.ConnectionType = opts.ConnectionType
	if err := p.ch.Init(opts.Server, opts.LBPolicy, &chOpts); err != nil {
		return fmt.Errorf("fail to initialize channel: %w", err)
	}
	p.chReady = true
	if p.reqs, err = loadRequests(opts.Input, p.md.Input()); err != nil {
		return err
	}
	log.Printf("Loaded %d requests", len(p.reqs))

	p.latency = bvar.NewLatencyRecorder("rpc_press")
	p.errCount = bvar.NewAdder[int64]("rpc_press_error_count")
	p.inflightWaits = bvar.NewAdder[int64]("rpc_press_inflight_wait_count")
	p.sent = bvar.NewAdder[int64]("")
	return nil
}

// noLimitIfNotPositive maps a flag's 0 or negative to the channel's -1
// (no limit): in a channel.Options literal 0 means the default instead.
func noLimitIfNotPositive(ms int32) int32 {
	if ms <= 0 {
		return -1
	}
	return ms
}

// DummyAddr is where the dummy server listens, nil without one.
func (p *press) DummyAddr() net.Addr {
	if p.dummy == nil {
		return nil
	}
	return p.dummy.ListenAddress()
}

// run sends until ctx ends or the duration passes, then stops the
// senders, waits for the calls in flight and prints the last statistics.
func (p *press) run(ctx context.Context) Stats {
	if p.opts.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.opts.Duration)
		defer cancel()
	}
	if p.interval > 0 {
		log.Printf("Sending %s to %s: %d threads, qps=%d (a call every %v per thread, at most %d in flight per thread)",
			p.md.FullName(), p.opts.Server, p.threads, p.opts.QPS, time.Duration(p.interval), p.maxInflight)
	} else {
		log.Printf("Sending %s to %s: %d threads, unlimited qps (each thread waits for its call)",
			p.md.FullName(), p.opts.Server, p.threads)
	}
	stop := ctx.Done()
	infoStop, infoDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(infoDone)
		p.info(infoStop)
	}()
	var senders sync.WaitGroup
	start := time.Now()
	for i := range p.threads {
		senders.Go(func() { p.sender(stop, i, start) })
	}
	<-stop
	senders.Wait()
	p.calls.Wait()
	close(infoStop)
	<-infoDone
	return Stats{Sent: p.sent.Get(), Success: p.latency.Count(), Errors: p.errCount.Get()}
}

// sender is one of brpc's sending threads: it cycles through the requests
// from its own index, striding by the thread count, and paces its calls
// (or, with unlimited qps, waits for each).
func (p *press) sender(stop <-chan struct{}, idx int, start time.Time) {
	n := len(p.reqs)
	next := idx % n
	if p.interval <= 0 {
		for !closed(stop) {
			p.send(p.reqs[next], nil).Join()
			next = (next + p.threads) % n
		}
		return
	}
	slots := make(chan struct{}, p.maxInflight)
	release := func() { <-slots }
	pace := newPacer(p.interval, int64(time.Since(start)))
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		if closed(stop) {
			return
		}
		if d := pace.wait(int64(time.Since(start))); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-stop:
				return
			}
			continue // wait again: it may resynchronize after a long sleep
		}
		select {
		case slots <- struct{}{}:
		default:
			// The server is slower than the pace: wait for a call to end
			// instead of piling up calls. The thread falls behind and
			// resynchronizes when it is too far behind.
			p.inflightWaits.Add(1)
			if ok, _ := p.inflightLog.allow(time.Now()); ok {
				log.Printf("WARNING: a thread has %d calls in flight (-max_inflight); waiting for one to end before sending more", p.maxInflight)
			}
			select {
			case slots <- struct{}{}:
			case <-stop:
				return
			}
		}
		p.send(p.reqs[next], release)
		pace.sent()
		next = (next + p.threads) % n
	}
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// send starts one asynchronous call; release runs when it ends.
func (p *press) send(req proto.Message, release func()) *controller.Controller {
	cntl := controller.New()
	if p.compress != controller.CompressNone {
		cntl.SetRequestCompressType(p.compress)
	}
	if len(p.attachment) > 0 {
		cntl.RequestAttachment().Write(p.attachment)
	}
	resp := dynamicpb.NewMessage(p.md.Output())
	p.calls.Add(1)
	p.sent.Add(1)
	start := time.Now()
	p.ch.CallMethod(p.md, cntl, req, resp, func() {
		p.handleResponse(cntl, resp, time.Since(start))
		if release != nil {
			release()
		}
		p.calls.Done()
	})
	return cntl
}

// maxErrorLogsPerSecond bounds the error lines logged each second; the
// others are counted and reported with the next line logged.
const maxErrorLogsPerSecond = 10

func (p *press) handleResponse(cntl *controller.Controller, resp proto.Message, latency time.Duration) {
	if !cntl.Failed() {
		p.latency.Record(latency)
		if p.out != nil {
			p.out.write(resp)
		}
		return
	}
	p.errCount.Add(1)
	if ok, dropped := p.errLog.allow(time.Now()); ok {
		if dropped > 0 {
			log.Printf("WARNING: %d more errors were not logged", dropped)
		}
		log.Printf("WARNING: error_code=%d, %s", int32(cntl.ErrorCode()), cntl.ErrorText())
	}
}

// info is brpc's InfoThread: every second a line of counts, every ten
// seconds and at the end a [Latency] block.
func (p *press) info(stop <-chan struct{}) {
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	var lastSent, lastSucc, lastErr int64
	for i := 1; ; i++ {
		stopped := false
		select {
		case <-ticker.C:
		case <-stop:
			stopped = true
		}
		if p.out != nil {
			p.out.flush()
		}
		sent, succ, errs := p.sent.Get(), p.latency.Count(), p.errCount.Get()
		fmt.Fprint(p.stdout, statsLine(time.Now(), sent-lastSent, succ-lastSucc, errs-lastErr, errs, sent))
		lastSent, lastSucc, lastErr = sent, succ, errs
		if stopped || i%10 == 0 {
			fmt.Fprint(p.stdout, latencyBlock(p.latency))
		}
		if stopped {
			if dropped := p.errLog.takeDropped(); dropped > 0 {
				log.Printf("WARNING: %d more errors were not logged", dropped)
			}
			return
		}
	}
}

// statsLine is brpc's per-second line (its printf pads each count to a
// width; here a count always has a space after it).
func statsLine(now time.Time, sent, succ, errs, totalErr, totalSent int64) string {
	return fmt.Sprintf("%s\tsent:%-9d success:%-9d error:%-5d total_error:%-9d total_sent:%d\n",
		now.Format("2006/01/02-15:04:05"), sent, succ, errs, totalErr, totalSent)
}

// latencyBlock is brpc's [Latency] block, over the recorder's window
// (the last 10 sampled seconds).
func latencyBlock(r *bvar.LatencyRecorder) string {
	var b bytes.Buffer
	b.WriteString("[Latency]\n")
	fmt.Fprintf(&b, "  avg     %10d us\n", r.Latency())
	for _, q := range []struct {
		label string
		p     float64
	}{
		{"50%", 0.5}, {"70%", 0.7}, {"90%", 0.9}, {"95%", 0.95}, {"97%", 0.97},
		{"99%", 0.99}, {"99.9%", 0.999}, {"99.99%", 0.9999},
	} {
		fmt.Fprintf(&b, "  %-7s %10d us\n", q.label, r.LatencyPercentile(q.p))
	}
	fmt.Fprintf(&b, "  max     %10d us\n", r.MaxLatency())
	return b.String()
}

// close releases what newPress made, in reverse; it is safe on a
// partly made press.
func (p *press) close() {
	if p.out != nil {
		if err := p.out.close(); err != nil {
			log.Printf("ERROR: fail to write %s: %v", p.opts.Output, err)
		}
	}
	if p.chReady {
		p.ch.Close()
	}
	if p.latency != nil {
		p.latency.Close()
		p.errCount.Hide()
		p.inflightWaits.Hide()
	}
	if p.dummy != nil {
		p.dummy.Stop()
		p.dummy.Join()
	}
}

// logLimiter lets through at most maxErrorLogsPerSecond lines a second
// and counts the others.
type logLimiter struct {
	mu      sync.Mutex
	second  int64
	n       int
	dropped int64
}

// allow reports whether a line may be logged now and, if so, how many
// were dropped since the last one allowed.
func (l *logLimiter) allow(now time.Time) (ok bool, dropped int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s := now.Unix(); s != l.second {
		l.second, l.n = s, 0
	}
	if l.n >= maxErrorLogsPerSecond {
		l.dropped++
		return false, 0
	}
	l.n++
	dropped, l.dropped = l.dropped, 0
	return true, dropped
}

// takeDropped returns how many lines were dropped since the last one
// allowed, and resets the count.
func (l *logLimiter) takeDropped() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	d := l.dropped
	l.dropped = 0
	return d
}

// responseWriter writes responses as JSON to -output: with pretty, each
// one indented over several lines; otherwise each one compact on one
// line. Either way the file is a run of JSON objects that -input reads.
type responseWriter struct {
	pretty bool
	mu     sync.Mutex
	f      *os.File
	w      *bufio.Writer
	err    error
}

func openResponseWriter(path string, pretty bool) (*responseWriter, error) {
	if dir := filepath.Dir(path); dir != "." {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("fail to create directory `%s': %w", dir, err)
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("fail to open %s: %w", path, err)
	}
	return &responseWriter{pretty: pretty, f: f, w: bufio.NewWriterSize(f, 64<<10)}, nil
}

// jsonOptions print field names as the .proto spells them, as brpc's
// json2pb does.
var jsonOptions = protojson.MarshalOptions{UseProtoNames: true}

func (w *responseWriter) write(m proto.Message) {
	raw, err := jsonOptions.Marshal(m)
	if err != nil {
		log.Printf("WARNING: fail to convert response to JSON: %v", err)
		return
	}
	// protojson varies its spacing on purpose; normalize it.
	var b bytes.Buffer
	if w.pretty {
		err = json.Indent(&b, raw, "", "  ")
	} else {
		err = json.Compact(&b, raw)
	}
	if err != nil {
		log.Printf("WARNING: fail to format response JSON: %v", err)
		return
	}
	b.WriteByte('\n')
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, err := w.w.Write(b.Bytes()); err != nil && w.err == nil {
		w.err = err
	}
}

func (w *responseWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.w.Flush(); err != nil && w.err == nil {
		w.err = err
	}
}

func (w *responseWriter) close() error {
	w.flush()
	return errors.Join(w.err, w.f.Close())
}
