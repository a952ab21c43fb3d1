package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/example/echo/echopb"
	"github.com/gobrpc/gobrpc/server"
)

const echoProto = "../../example/echo/echopb/echo.proto"

// echoService echoes the message and counts requests and attachment bytes.
type echoService struct {
	requests        atomic.Int64
	attachmentBytes atomic.Int64
}

func (s *echoService) Echo(cntl *controller.Controller, req *echopb.EchoRequest, resp *echopb.EchoResponse, done func()) {
	defer done()
	s.requests.Add(1)
	s.attachmentBytes.Add(int64(cntl.RequestAttachment().Len()))
	resp.Message = req.Message
}

func startEcho(t *testing.T) (*echoService, string) {
	t.Helper()
	svc := &echoService{}
	srv := server.New(nil)
	if err := echopb.RegisterEchoServiceServer(srv, svc); err != nil {
		t.Fatal(err)
	}
	if err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv.Stop()
		srv.Join()
	})
	return svc, srv.ListenAddress().String()
}

// syncBuffer is the Stdout of a run: the info goroutine writes it while
// a test may read it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var (
	statsLineRE = regexp.MustCompile(`^\d{4}/\d\d/\d\d-\d\d:\d\d:\d\d\tsent:(\d+) +success:(\d+) +error:(\d+) +total_error:(\d+) +total_sent:(\d+)$`)
	latencyRE   = regexp.MustCompile(`(?m)^\[Latency\]\n  avg +\d+ us\n  50% +\d+ us\n  70% +\d+ us\n  90% +\d+ us\n  95% +\d+ us\n  97% +\d+ us\n  99% +\d+ us\n  99\.9% +\d+ us\n  99\.99% +\d+ us\n  max +\d+ us\n`)
)

func TestEndToEnd(t *testing.T) {
	svc, addr := startEcho(t)
	dir := t.TempDir()
	input := filepath.Join(dir, "requests.json")
	// Two requests, one with braces and an escaped quote in its string,
	// pretty-printed over several lines as a file of requests may be.
	if err := os.WriteFile(input, []byte("{\n  \"message\": \"hello\"\n}\n{\"message\": \"a {brace} and a \\\"quote\\\"\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	output := filepath.Join(dir, "out", "responses.json")
	var stdout syncBuffer
	opts := Options{
		ProtoFile:        echoProto,
		Method:           "example.EchoService.Echo",
		Server:           addr,
		Input:            input,
		Output:           output,
		Pretty:           false,
		QPS:              200,
		Duration:         2 * time.Second,
		TimeoutMs:        1000,
		ConnectTimeoutMs: 500,
		MaxRetry:         3,
		AttachmentSize:   10,
		DummyAddr:        "127.0.0.1:0",
		Stdout:           &stdout,
	}
	p, err := newPress(opts)
	if err != nil {
		t.Fatal(err)
	}
	if p.threads != 1 {
		t.Errorf("threads = %d, want 1 for -qps=200", p.threads)
	}
	// The dummy server shows rpc_press's bvars while it runs.
	varsSeen := make(chan string, 1)
	go func() {
		time.Sleep(1500 * time.Millisecond)
		resp, err := http.Get("http://" + p.DummyAddr().String() + "/vars/rpc_press_count?console=1")
		if err != nil {
			varsSeen <- err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		varsSeen <- string(b)
	}()
	stats := p.run(context.Background())
	p.close()

	if v := <-varsSeen; !strings.HasPrefix(v, "rpc_press_count : ") {
		t.Errorf("/vars/rpc_press_count = %q", v)
	}
	if stats.Errors != 0 {
		t.Errorf("errors = %d, want 0", stats.Errors)
	}
	if stats.Success < 370 || stats.Success > 410 {
		t.Errorf("successes = %d, want about 400 (2 s at 200 qps)", stats.Success)
	}
	if stats.Sent != stats.Success+stats.Errors {
		t.Errorf("sent %d != success %d + errors %d after waiting for calls in flight", stats.Sent, stats.Success, stats.Errors)
	}
	if got := svc.requests.Load(); got != stats.Success {
		t.Errorf("server saw %d requests, press counted %d successes", got, stats.Success)
	}
	if got := svc.attachmentBytes.Load(); got != 10*stats.Success {
		t.Errorf("server saw %d attachment bytes, want %d", got, 10*stats.Success)
	}

	// -output: one compact JSON response per line, cycling the requests.
	data, err := os.ReadFile(output)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if int64(len(lines)) != stats.Success {
		t.Errorf("%d output lines, want %d", len(lines), stats.Success)
	}
	counts := map[string]int{}
	for i, l := range lines {
		var m map[string]string
		if err := json.Unmarshal([]byte(l), &m); err != nil || len(m) != 1 {
			t.Fatalf("line %d %q: %v", i, l, err)
		}
		counts[m["message"]]++
	}
	if len(counts) != 2 || counts["hello"] == 0 || counts[`a {brace} and a "quote"`] == 0 ||
		abs(counts["hello"]-counts[`a {brace} and a "quote"`]) > 1 {
		t.Errorf("responses by message = %v, want the two requests in turn", counts)
	}

	// Stdout: a line a second, their totals adding up, and a [Latency]
	// block at the end.
	out := stdout.String()
	var sumSent, sumSucc, lastTotal int64
	n := 0
	for _, l := range strings.Split(out, "\n") {
		m := statsLineRE.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		n++
		sumSent += atoi(m[1])
		sumSucc += atoi(m[2])
		lastTotal = atoi(m[5])
		if atoi(m[3]) != 0 || atoi(m[4]) != 0 {
			t.Errorf("error counts in %q", l)
		}
	}
	if n < 2 || n > 4 {
		t.Errorf("%d stats lines in 2 s, want 2 to 4:\n%s", n, out)
	}
	if sumSent != stats.Sent || lastTotal != stats.Sent || sumSucc != stats.Success {
		t.Errorf("lines add up to sent %d (total %d) success %d; want %d and %d:\n%s",
			sumSent, lastTotal, sumSucc, stats.Sent, stats.Success, out)
	}
	if !latencyRE.MatchString(out) {
		t.Errorf("no [Latency] block in:\n%s", out)
	}

	// The dynamic file registered nothing: the generated echopb's file is
	// the only one defining example.EchoService.
	if _, err := protoregistry.GlobalFiles.FindFileByPath("echo.proto"); err == nil {
		t.Error("echo.proto was registered in protoregistry.GlobalFiles")
	}
}

func TestPrettyOutputReadsBack(t *testing.T) {
	_, addr := startEcho(t)
	output := filepath.Join(t.TempDir(), "responses.json")
	stats, err := Run(context.Background(), Options{
		ProtoFile: echoProto, Method: "example.EchoService.Echo", Server: addr,
		Input: `{"message":"x}"}`, Output: output, Pretty: true,
		QPS: 50, ThreadNum: 2, Duration: 500 * time.Millisecond, TimeoutMs: 1000, MaxRetry: 3,
		Stdout: io.Discard,
	})
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(output)
	if err != nil {
		t.Fatal(err)
	}
	objs, tail := splitJSON(data)
	if int64(len(objs)) != stats.Success || tail != nil || stats.Success == 0 {
		t.Fatalf("%d objects (tail %q) for %d successes", len(objs), tail, stats.Success)
	}
	if want := "{\n  \"message\": \"x}\"\n}"; string(objs[0]) != want {
		t.Errorf("pretty response = %q, want %q", objs[0], want)
	}
	// The responses are valid requests of the echo method again.
	md, err := findMethod(echoProto, nil, "example.EchoService.Echo")
	if err != nil {
		t.Fatal(err)
	}
	reqs, err := loadRequests(output, md.Input())
	if err != nil || int64(len(reqs)) != stats.Success {
		t.Fatalf("read back %d requests, err %v", len(reqs), err)
	}
}

func TestUnlimitedQPS(t *testing.T) {
	svc, addr := startEcho(t)
	stats, err := Run(context.Background(), Options{
		ProtoFile: echoProto, Method: "example.EchoService.Echo", Server: addr,
		Input: `{"message":"a"}{"message":"b"}{"message":"c"}`,
		QPS:   0, ThreadNum: 4, Duration: 300 * time.Millisecond, TimeoutMs: 1000,
		Stdout: io.Discard,
	})
	if err != nil {
		t.Fatal(err)
	}
	if stats.Success < 100 || stats.Errors != 0 || stats.Sent != stats.Success {
		t.Errorf("stats = %+v, want many successes and no error", stats)
	}
	if svc.requests.Load() != stats.Success {
		t.Errorf("server saw %d, want %d", svc.requests.Load(), stats.Success)
	}
}

func TestErrorsCounted(t *testing.T) {
	// A port nothing listens on: every call fails, quickly.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var stdout syncBuffer
	stats, err := Run(context.Background(), Options{
		ProtoFile: echoProto, Method: "example.EchoService.Echo", Server: addr,
		Input: `{"message":"a"}`, QPS: 100, Duration: 1200 * time.Millisecond,
		TimeoutMs: 200, ConnectTimeoutMs: 50, MaxRetry: 0, Stdout: &stdout,
	})
	if err != nil {
		t.Fatal(err)
	}
	if stats.Success != 0 || stats.Errors == 0 || stats.Errors != stats.Sent {
		t.Errorf("stats = %+v, want every call failed", stats)
	}
	if !strings.Contains(stdout.String(), "total_error:"+itoa(stats.Errors)) {
		t.Errorf("no total_error:%d in:\n%s", stats.Errors, stdout.String())
	}
}

func TestInflightBound(t *testing.T) {
	// A server that never answers within the run: each thread stops at
	// -max_inflight calls instead of sending 100 a second.
	release := make(chan struct{})
	srv := server.New(nil)
	var got atomic.Int64
	if err := echopb.RegisterEchoServiceServer(srv, stuckEcho{release: release, n: &got}); err != nil {
		t.Fatal(err)
	}
	if err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	defer func() {
		srv.Stop()
		srv.Join()
	}()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		time.Sleep(700 * time.Millisecond)
		cancel()
		close(release)
	}()
	stats, err := Run(ctx, Options{
		ProtoFile: echoProto, Method: "example.EchoService.Echo", Server: srv.ListenAddress().String(),
		Input: `{"message":"a"}`, QPS: 100, ThreadNum: 2, MaxInflight: 5, TimeoutMs: -1,
		Stdout: io.Discard,
	})
	if err != nil {
		t.Fatal(err)
	}
	if stats.Sent != 10 || stats.Success != 10 {
		t.Errorf("stats = %+v, want 10 sent (2 threads x 5 in flight), all answered", stats)
	}
}

type stuckEcho struct {
	release chan struct{}
	n       *atomic.Int64
}

func (s stuckEcho) Echo(cntl *controller.Controller, req *echopb.EchoRequest, resp *echopb.EchoResponse, done func()) {
	s.n.Add(1)
	go func() {
		<-s.release
		resp.Message = req.Message
		done()
	}()
}

func TestInitErrors(t *testing.T) {
	base := Options{ProtoFile: echoProto, Method: "example.EchoService.Echo", Server: "127.0.0.1:1",
		Input: `{"message":"a"}`, QPS: 1, Stdout: io.Discard}
	tests := []struct {
		name   string
		modify func(*Options)
		want   string
	}{
		{"no proto", func(o *Options) { o.ProtoFile = "" }, "-proto is required"},
		{"missing proto", func(o *Options) { o.ProtoFile = "nope/none.proto" }, "fail to import"},
		{"bad method form", func(o *Options) { o.Method = "Echo" }, "package.service.method"},
		{"no service", func(o *Options) { o.Method = "example.Nope.Echo" }, "fail to find service example.Nope"},
		{"no method", func(o *Options) { o.Method = "example.EchoService.Nope" }, "fail to find method=example.EchoService.Nope"},
		{"not a service", func(o *Options) { o.Method = "example.EchoRequest.Echo" }, "is not a service"},
		{"no input", func(o *Options) { o.Input = "" }, "-input is required"},
		{"no valid input", func(o *Options) { o.Input = `{"nope":1} {"message":` }, "fail to load requests"},
		{"missing required field", func(o *Options) { o.Input = `{}` }, "fail to load requests"},
		{"lz4", func(o *Options) { o.RequestCompressType = 4 }, "unsupported -request_compress_type=4"},
		{"bad protocol", func(o *Options) { o.Protocol = "http" }, "fail to initialize channel"},
		{"lb without url", func(o *Options) { o.LBPolicy = "rr" }, "fail to initialize channel"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := base
			tt.modify(&o)
			_, err := Run(context.Background(), o)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestIncludePaths(t *testing.T) {
	// a.proto imports b/b.proto, found through an -inc root, and
	// google/protobuf/empty.proto, built in.
	dir := t.TempDir()
	inc := filepath.Join(dir, "inc")
	if err := os.MkdirAll(filepath.Join(inc, "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(p, s string) {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(inc, "b", "b.proto"), `syntax = "proto3"; package b; message Req { string s = 1; int64 n = 2; }`)
	write(filepath.Join(dir, "a.proto"), `syntax = "proto3"; package a;
import "b/b.proto"; import "google/protobuf/empty.proto";
service S { rpc M(b.Req) returns (google.protobuf.Empty); }`)
	md, err := findMethod(filepath.Join(dir, "a.proto"), []string{"", inc}, "a.S.M")
	if err != nil {
		t.Fatal(err)
	}
	if md.Input().FullName() != "b.Req" || md.Output().FullName() != "google.protobuf.Empty" {
		t.Fatalf("method %s: %s -> %s", md.FullName(), md.Input().FullName(), md.Output().FullName())
	}
	reqs, err := loadRequests(`{"s":"x","n":"5"} {"s": 1} {"n": 7}`, md.Input())
	if err != nil || len(reqs) != 2 { // {"s": 1} is skipped
		t.Fatalf("loaded %d requests, err %v", len(reqs), err)
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

func atoi(s string) int64 {
	var n int64
	for _, c := range s {
		n = n*10 + int64(c-'0')
	}
	return n
}

func itoa(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}
