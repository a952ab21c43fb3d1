package channel_test

import (
	"bytes"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/gobrpc/gobrpc/channel"
	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/loadbalancer"
	"github.com/gobrpc/gobrpc/server"
	"github.com/gobrpc/gobrpc/testsupport/echotest"
	"github.com/gobrpc/gobrpc/testsupport/testpb"
)

// Tests of issue 13's client items: each failed before the fix (by
// hanging, by a race report under -race, or by a wrong count).

// silentServer accepts connections and never reads from them.
func silentServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return ln.Addr().String()
}

// Item 2: a peer that stops reading used to hold a synchronous call with
// a large attachment until the peer closed, and an asynchronous
// CallMethod never returned to its caller.
func TestPeerThatStopsReadingCannotHoldCallersPastTheDeadline(t *testing.T) {
	stub := newChannel(t, silentServer(t), func(o *channel.Options) { o.TimeoutMs = 500; o.MaxRetry = 0 })
	big := bytes.Repeat([]byte("a"), 16<<20)

	ended := make(chan *controller.Controller, 1)
	go func() {
		cntl := controller.New()
		cntl.RequestAttachment().Write(big)
		echo(stub, cntl, "sync")
		ended <- cntl
	}()
	select {
	case cntl := <-ended:
		assert.Equal(t, controller.ERPCTIMEDOUT, cntl.ErrorCode(), cntl.ErrorText())
		assert.Less(t, cntl.LatencyUs(), int64(8_000_000), "held well past its 500 ms deadline")
	case <-time.After(20 * time.Second):
		t.Fatal("a sync call is held by a peer that does not read")
	}

	var done sync.WaitGroup
	returned := make(chan struct{})
	cntls := make([]*controller.Controller, 8)
	go func() {
		for i := range cntls {
			cntls[i] = controller.New()
			cntls[i].RequestAttachment().Write(big)
			done.Add(1)
			stub.Echo(cntls[i], &testpb.EchoRequest{Message: proto.String("async")}, &testpb.EchoResponse{}, done.Done)
		}
		close(returned)
	}()
	// Eight CallMethods copy 16 MiB three times each (attachment, request,
	// queue): about 3 s under -race on a loaded 2-core machine. A hang is
	// what this catches, so the bound is wide.
	select {
	case <-returned:
	case <-time.After(30 * time.Second):
		t.Fatal("an asynchronous CallMethod did not return to its caller")
	}
	done.Wait()
	for _, c := range cntls {
		assert.Contains(t, []controller.Errno{controller.ERPCTIMEDOUT, controller.EOVERCROWDED}, c.ErrorCode(), c.ErrorText())
	}
}

// recorder is an echo service that records the log id and attachment of
// every request it receives, first attempts and backups alike; it answers
// after a delay spread around delay, so that backups often fire just as
// the call ends.
type recorder struct {
	delay time.Duration
	n     atomic.Int64
	mu    sync.Mutex
	seen  map[int64][]string // log id -> attachments received
}

func (r *recorder) Echo(cntl *controller.Controller, req *testpb.EchoRequest, resp *testpb.EchoResponse, done func()) {
	r.mu.Lock()
	if r.seen == nil {
		r.seen = map[int64][]string{}
	}
	r.seen[cntl.LogID()] = append(r.seen[cntl.LogID()], cntl.RequestAttachment().String())
	r.mu.Unlock()
	resp.Message = req.Message
	n := r.n.Add(1)
	time.AfterFunc(r.delay/2+time.Duration(n%8)*r.delay/8, done)
}

func startRecorder(t *testing.T, delay time.Duration) (*recorder, string) {
	t.Helper()
	r := &recorder{delay: delay}
	srv := server.New(nil)
	require.NoError(t, testpb.RegisterEchoServiceServer(srv, r))
	require.NoError(t, srv.Start("127.0.0.1:0"))
	t.Cleanup(func() { srv.Stop(); srv.Join() })
	return r, srv.ListenAddress().String()
}

// checkRecorded asserts that every request a server received carried the
// attachment of its own call.
func checkRecorded(t *testing.T, rs ...*recorder) int {
	t.Helper()
	n := 0
	for _, r := range rs {
		r.mu.Lock()
		for id, atts := range r.seen {
			for _, a := range atts {
				n++
				assert.Equal(t, "att-"+strconv.FormatInt(id, 10), a, "a request of call %d carried another call's attachment", id)
			}
		}
		r.mu.Unlock()
	}
	return n
}

// Items 4 and 7: backups (and retries) are built from what the call took
// when it started, never from the caller's Controller or request after
// the call ended, which the caller reuses at once.
func TestAbandonedBackupsSendTheirOwnCallsRequest(t *testing.T) {
	r1, a1 := startRecorder(t, 2*time.Millisecond)
	r2, a2 := startRecorder(t, 2*time.Millisecond)
	opts := func(o *channel.Options) { o.BackupRequestMs = 1; o.TimeoutMs = 20000 }

	var ch channel.Channel
	o := channel.DefaultOptions()
	opts(&o)
	require.NoError(t, ch.Init("list://"+a1+","+a2, "rr", &o))
	defer ch.Close()

	var sel channel.SelectiveChannel
	so := channel.DefaultOptions()
	opts(&so)
	require.NoError(t, sel.Init("rr", &so))
	defer sel.Close()
	for _, a := range []string{a1, a2} {
		sub := &channel.Channel{}
		require.NoError(t, sub.Init(a, "", nil))
		_, err := sel.AddChannel(sub, "")
		require.NoError(t, err)
	}

	for _, caller := range []channel.Caller{&ch, &sel} {
		stub := testpb.NewEchoServiceStub(caller)
		cntl := controller.New()
		req, resp := &testpb.EchoRequest{}, &testpb.EchoResponse{}
		for i := range 300 {
			id := int64(i + 1)
			if caller == channel.Caller(&sel) {
				id += 1000
			}
			cntl.Reset()
			cntl.SetLogID(id)
			cntl.RequestAttachment().WriteString("att-" + strconv.FormatInt(id, 10))
			req.Message = proto.String(strconv.FormatInt(id, 10))
			stub.Echo(cntl, req, resp, nil)
			require.NoError(t, cntl.Err())
			require.Equal(t, req.GetMessage(), resp.GetMessage())
			// Reuse at once: what a late backup would read if it still
			// looked at the caller's things.
			cntl.RequestAttachment().Reset()
			cntl.RequestAttachment().WriteString("garbage")
			req.Message = proto.String("garbage")
		}
	}
	time.Sleep(20 * time.Millisecond) // late backups land
	assert.Greater(t, checkRecorded(t, r1, r2), 600, "some backups were sent")
}

// endPolicy allows every backup and records, per log id, when the RPC
// ended; a DoBackup after that is a violation.
type endPolicy struct {
	mu         sync.Mutex
	ended      map[int64]bool
	backups    map[int64]int
	ends       map[int64]int
	violations []string
}

func (p *endPolicy) GetBackupRequestMs(*controller.Controller) int32 { return 1 }

func (p *endPolicy) DoBackup(cntl *controller.Controller) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if id := cntl.LogID(); p.ended[id] {
		p.violations = append(p.violations, fmt.Sprintf("DoBackup of call %d after its OnRPCEnd", id))
	} else {
		p.backups[id]++
	}
	return true
}

func (p *endPolicy) OnRPCEnd(cntl *controller.Controller) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ended[cntl.LogID()] = true
	p.ends[cntl.LogID()]++
}

// Item 5: the policy is asked while the call is live, under its lock: it
// never counts a backup of an RPC that ended (RateLimitedPolicy counts
// what DoBackup allows).
func TestDoBackupNeverAfterOnRPCEnd(t *testing.T) {
	r, addr := startRecorder(t, time.Millisecond)
	p := &endPolicy{ended: map[int64]bool{}, backups: map[int64]int{}, ends: map[int64]int{}}
	stub := newChannel(t, addr, func(o *channel.Options) { o.BackupRequestPolicy = p; o.TimeoutMs = 20000 })
	cntl := controller.New()
	for i := range 500 {
		cntl.Reset()
		cntl.SetLogID(int64(i + 1))
		cntl.RequestAttachment().WriteString("att-" + strconv.Itoa(i+1))
		echo(stub, cntl, "x")
		require.NoError(t, cntl.Err())
	}
	time.Sleep(20 * time.Millisecond)
	p.mu.Lock()
	defer p.mu.Unlock()
	assert.Empty(t, p.violations)
	for id := int64(1); id <= 500; id++ {
		assert.Equal(t, 1, p.ends[id], "OnRPCEnd once for call %d", id)
	}
	r.mu.Lock()
	for id, n := range p.backups {
		assert.Equal(t, 1+n, len(r.seen[id]), "call %d: every backup the policy allowed was sent", id)
	}
	r.mu.Unlock()
}

// Item 6: done may Reset the Controller and start the next call with it;
// this used to panic with "sync: negative WaitGroup counter".
func TestDoneResetsTheControllerAndCallsAgain(t *testing.T) {
	srv, _ := echotest.StartServer(t, nil)
	for _, backupMs := range []int32{-1, 0} {
		stub := newChannel(t, srv.ListenAddress().String(), func(o *channel.Options) {
			o.BackupRequestMs = backupMs
			o.TimeoutMs = 20000
		})
		cntl := controller.New()
		const n = 300
		var calls atomic.Int32
		finished := make(chan struct{})
		var next func()
		resp := &testpb.EchoResponse{}
		next = func() {
			if cntl.Failed() {
				t.Errorf("call %d: %v", calls.Load(), cntl.Err())
			}
			if calls.Add(1) == n {
				close(finished)
				return
			}
			cntl.Reset()
			stub.Echo(cntl, &testpb.EchoRequest{Message: proto.String("again")}, resp, next)
		}
		stub.Echo(cntl, &testpb.EchoRequest{Message: proto.String("first")}, resp, next)
		select {
		case <-finished:
		case <-time.After(30 * time.Second):
			t.Fatalf("backup %d ms: %d calls of %d", backupMs, calls.Load(), n)
		}
		cntl.Join()
		assert.Equal(t, int32(n), calls.Load())
	}
}

// recordingLB is round robin over its servers that remembers the code of
// every attempt fed back, by server.
type recordingLB struct {
	mu      sync.Mutex
	servers []*loadbalancer.Server
	next    int
	codes   map[string][]int32
}

func (b *recordingLB) Update(s []*loadbalancer.Server) {
	b.mu.Lock()
	b.servers = append([]*loadbalancer.Server(nil), s...)
	b.mu.Unlock()
}

func (b *recordingLB) Select(in loadbalancer.SelectIn) (*loadbalancer.Server, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.servers) == 0 {
		return nil, loadbalancer.ErrNoServer
	}
	for range b.servers {
		s := b.servers[b.next%len(b.servers)]
		b.next++
		if in.Excluded == nil || !in.Excluded.Contains(s) {
			return s, nil
		}
	}
	return b.servers[0], nil
}

func (b *recordingLB) Feedback(info loadbalancer.CallInfo) {
	b.mu.Lock()
	b.codes[info.Server.Addr] = append(b.codes[info.Server.Addr], info.ErrorCode)
	b.mu.Unlock()
}

var recording = struct {
	once sync.Once
	mu   sync.Mutex
	last *recordingLB
}{}

// recordingChannel is a Channel over url balanced by a new recordingLB.
func recordingChannel(t *testing.T, url string, o *channel.Options) (*channel.Channel, *recordingLB) {
	t.Helper()
	recording.once.Do(func() {
		loadbalancer.Register("test_recording", func(string) (loadbalancer.LoadBalancer, error) {
			b := &recordingLB{codes: map[string][]int32{}}
			recording.mu.Lock()
			recording.last = b
			recording.mu.Unlock()
			return b, nil
		})
	})
	ch := &channel.Channel{}
	require.NoError(t, ch.Init(url, "test_recording", o))
	t.Cleanup(func() { ch.Close() })
	recording.mu.Lock()
	defer recording.mu.Unlock()
	return ch, recording.last
}

// Item 9: an attempt abandoned because the other one won is fed back as
// brpc feeds it back: EBACKUPREQUEST for a first attempt whose backup won
// (so "la" learns to avoid the slow server), ECANCELED for a backup the
// first attempt beat. It used to be fed back with the call's code, 0.
func TestAbandonedAttemptsAreFedBackWithBrpcsCodes(t *testing.T) {
	slow, slowSvc := echotest.StartServer(t, nil)
	slowSvc.Delay.Store(int64(200 * time.Millisecond))
	fast, _ := echotest.StartServer(t, nil)
	o := channel.DefaultOptions()
	o.BackupRequestMs = 20
	o.TimeoutMs = 5000
	ch, lb := recordingChannel(t, "list://"+slow.ListenAddress().String()+","+fast.ListenAddress().String(), &o)
	stub := testpb.NewEchoServiceStub(ch)
	const n = 10
	for range n {
		cntl := controller.New()
		echo(stub, cntl, "x")
		require.NoError(t, cntl.Err())
	}
	lb.mu.Lock()
	defer lb.mu.Unlock()
	slowCodes := lb.codes[slow.ListenAddress().String()]
	fastCodes := lb.codes[fast.ListenAddress().String()]
	// Every call starts on the slow server (the balancer's cursor moves
	// past the fast one for the backup), whose backup on the fast one
	// wins.
	assert.Equal(t, n, count(slowCodes, int32(controller.EBACKUPREQUEST)), "slow: %v", slowCodes)
	assert.Equal(t, 0, count(slowCodes, 0), "slow: %v", slowCodes)
	assert.Equal(t, n, count(fastCodes, 0), "fast: %v", fastCodes)
}

func count(codes []int32, code int32) int {
	n := 0
	for _, c := range codes {
		if c == code {
			n++
		}
	}
	return n
}

// A backup the first attempt beat is fed back with ECANCELED.
func TestBeatenBackupIsFedBackCanceled(t *testing.T) {
	// The first attempt's server answers after 60 ms, the backup's after
	// 2 s: the first wins, the backup is abandoned.
	first, firstSvc := echotest.StartServer(t, nil)
	firstSvc.Delay.Store(int64(60 * time.Millisecond))
	backup, backupSvc := echotest.StartServer(t, nil)
	backupSvc.Delay.Store(int64(2 * time.Second))
	o := channel.DefaultOptions()
	o.BackupRequestMs = 10
	o.TimeoutMs = 5000
	ch, lb := recordingChannel(t, "list://"+first.ListenAddress().String()+","+backup.ListenAddress().String(), &o)
	cntl := controller.New()
	echo(testpb.NewEchoServiceStub(ch), cntl, "x")
	require.NoError(t, cntl.Err())
	require.True(t, cntl.HasBackupRequest())
	lb.mu.Lock()
	defer lb.mu.Unlock()
	assert.Equal(t, []int32{0}, lb.codes[first.ListenAddress().String()])
	assert.Equal(t, []int32{int32(controller.ECANCELED)}, lb.codes[backup.ListenAddress().String()])
}

// Item 10: the client's decompression is bounded by the channel's
// MaxBodySize, as an uncompressed response is.
func TestCompressedResponseBoundedByMaxBodySize(t *testing.T) {
	srv := server.New(nil)
	require.NoError(t, testpb.RegisterEchoServiceServer(srv, bigCompressed{}))
	require.NoError(t, srv.Start("127.0.0.1:0"))
	t.Cleanup(func() { srv.Stop(); srv.Join() })
	stub := newChannel(t, srv.ListenAddress().String(), func(o *channel.Options) {
		o.MaxBodySize = 1 << 20
		o.MaxRetry = 0
		o.TimeoutMs = 20000 // compressing 1.5 MB under -race on a busy machine takes a while
	})
	for _, ct := range []controller.CompressType{controller.CompressGzip, controller.CompressZlib, controller.CompressSnappy} {
		cntl := controller.New()
		echo(stub, cntl, strconv.Itoa(int(ct)))
		assert.Equal(t, controller.ERESPONSE, cntl.ErrorCode(), "compress %v: %s", ct, cntl.ErrorText())
		assert.Contains(t, cntl.ErrorText(), "larger than 1048576 bytes")
	}
}

// bigCompressed answers 1.5 MB of message, compressed with the type the
// request names.
type bigCompressed struct{}

func (bigCompressed) Echo(cntl *controller.Controller, req *testpb.EchoRequest, resp *testpb.EchoResponse, done func()) {
	defer done()
	ct, _ := strconv.Atoi(req.GetMessage())
	cntl.SetResponseCompressType(controller.CompressType(ct))
	resp.Message = proto.String(strings.Repeat("z", 3<<19))
}

// flaky fails every request with ELIMIT (retried on another server) after
// about delay.
type flaky struct {
	delay time.Duration
	n     atomic.Int64
}

func (f *flaky) Echo(cntl *controller.Controller, req *testpb.EchoRequest, resp *testpb.EchoResponse, done func()) {
	n := f.n.Add(1)
	time.AfterFunc(f.delay/2+time.Duration(n%8)*f.delay/8, func() {
		cntl.SetFailed(controller.ELIMIT, "busy")
		done()
	})
}

// Item 8: the load balancer's feedback (retry counts, the attempt's
// server and start) is read under the call's lock, while retries and the
// backup timer change them. Under -race this used to report.
func TestFeedbackTakenUnderTheCallsLock(t *testing.T) {
	var addrs []string
	for range 3 {
		srv := server.New(nil)
		require.NoError(t, testpb.RegisterEchoServiceServer(srv, &flaky{delay: time.Millisecond}))
		require.NoError(t, srv.Start("127.0.0.1:0"))
		t.Cleanup(func() { srv.Stop(); srv.Join() })
		addrs = append(addrs, srv.ListenAddress().String())
	}
	var ch channel.Channel
	o := channel.DefaultOptions()
	o.BackupRequestMs = 1
	o.MaxRetry = 3
	o.TimeoutMs = 20000
	require.NoError(t, ch.Init("list://"+strings.Join(addrs, ","), "la", &o))
	defer ch.Close()
	stub := testpb.NewEchoServiceStub(&ch)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 100 {
				cntl := controller.New()
				echo(stub, cntl, "x")
				assert.Equal(t, controller.ELIMIT, cntl.ErrorCode(), cntl.ErrorText())
			}
		})
	}
	wg.Wait()
}
