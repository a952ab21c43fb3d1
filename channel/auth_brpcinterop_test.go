package channel_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/gobrpc/gobrpc/auth"
	"github.com/gobrpc/gobrpc/channel"
	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/example/echo/echopb"
	"github.com/gobrpc/gobrpc/rpcz"
)

// TestBrpcInteropAuth calls a real C++ brpc server with gobrpc's channel. It
// runs only when GOBRPC_BRPC_INTEROP_DIR names a folder holding
// interop_server: a brpc example.EchoService server (not part of this
// repository) taking -port and -enable_rpcz, whose brpc::Authenticator
// accepts exactly the credential "s3cret" (AuthContext user "token"), and
// which logs, per request, a line
//
//	REQ log_id=N ... timeout_ms=<cntl->timeout_ms()> auth_user=<user> trace: trace_id=%016llx span_id=%016llx ...
//
// (or "trace: none") and, for a refused credential, `AUTH reject credential="<c>"`.
func TestBrpcInteropAuth(t *testing.T) {
	dir := os.Getenv("GOBRPC_BRPC_INTEROP_DIR")
	if dir == "" {
		t.Skip("GOBRPC_BRPC_INTEROP_DIR is not set: no C++ brpc interop server")
	}
	bin := filepath.Join(dir, "interop_server")
	_, err := os.Stat(bin)
	require.NoError(t, err, "GOBRPC_BRPC_INTEROP_DIR has no interop_server")

	addr, log := startBrpcInteropServer(t, bin)

	deliver := channel.DeliverTimeoutMs.Get()
	require.NoError(t, channel.DeliverTimeoutMs.SetValue(true))
	t.Cleanup(func() { channel.DeliverTimeoutMs.SetValue(deliver) })

	call := func(t *testing.T, a auth.Authenticator, logID int64) *controller.Controller {
		t.Helper()
		opts := channel.DefaultOptions() // TimeoutMs 500
		opts.Auth = a
		ch, err := channel.New(addr, "", &opts)
		require.NoError(t, err)
		defer ch.Close()
		cntl := controller.New()
		cntl.SetLogID(logID)
		resp := &echopb.EchoResponse{}
		echopb.NewEchoServiceStub(ch).Echo(cntl, &echopb.EchoRequest{Message: proto.String("hello brpc")}, resp, nil)
		if !cntl.Failed() {
			assert.Equal(t, "hello brpc", resp.GetMessage())
		}
		return cntl
	}

	t.Run("GoodToken", func(t *testing.T) {
		for i := range 3 {
			cntl := call(t, auth.Token("s3cret"), int64(1000+i))
			require.False(t, cntl.Failed(), "call %d: %s", i, cntl.ErrorText())
		}
		for i := range 3 {
			line := log.waitFor(t, regexp.MustCompile(fmt.Sprintf(`REQ log_id=%d .*`, 1000+i)))
			m := regexp.MustCompile(`timeout_ms=(-?\d+) auth_user=(\S+)`).FindStringSubmatch(line)
			require.NotNil(t, m, line)
			ms, _ := strconv.Atoi(m[1])
			assert.True(t, ms > 300 && ms <= 500, "brpc saw timeout_ms=%d, want the remaining part of 500: %s", ms, line)
			assert.Equal(t, "token", m[2], "brpc's AuthContext")
		}
	})

	t.Run("WrongToken", func(t *testing.T) {
		cntl := call(t, auth.Token("wrong"), 2000)
		require.True(t, cntl.Failed())
		assert.Equal(t, controller.ERPCAUTH, cntl.ErrorCode())
		assert.Contains(t, cntl.ErrorText(), "Fail to authenticate")
		log.waitFor(t, regexp.MustCompile(`AUTH reject credential="wrong"`))
	})

	t.Run("NoAuthenticator", func(t *testing.T) {
		cntl := call(t, nil, 3000)
		assert.Equal(t, controller.ERPCAUTH, cntl.ErrorCode(), cntl.ErrorText())
	})

	t.Run("DeliverTimeoutOff", func(t *testing.T) {
		require.NoError(t, channel.DeliverTimeoutMs.SetValue(false))
		defer channel.DeliverTimeoutMs.SetValue(true)
		cntl := call(t, auth.Token("s3cret"), 4000)
		require.False(t, cntl.Failed(), cntl.ErrorText())
		line := log.waitFor(t, regexp.MustCompile(`REQ log_id=4000 .*`))
		m := regexp.MustCompile(`timeout_ms=(-?\d+) `).FindStringSubmatch(line)
		require.NotNil(t, m, line)
		ms, _ := strconv.Atoi(m[1])
		assert.LessOrEqual(t, ms, 0, "no timeout_ms sent: brpc keeps its unset value: %s", line)
	})

	t.Run("RpczTraceIDs", func(t *testing.T) {
		was := rpcz.Enabled.Get()
		require.NoError(t, rpcz.Enabled.SetValue(true))
		defer rpcz.Enabled.SetValue(was)
		cntl := call(t, auth.Token("s3cret"), 5000)
		require.False(t, cntl.Failed(), cntl.ErrorText())
		var span *rpcz.Span
		for _, s := range rpcz.Recent(rpcz.MaxSpans) {
			if !s.Server && s.LogID == 5000 {
				span = &s
				break
			}
		}
		require.NotNil(t, span, "no client span for log_id 5000")
		require.NotZero(t, span.TraceID)
		line := log.waitFor(t, regexp.MustCompile(`REQ log_id=5000 .*`))
		assert.Contains(t, line, fmt.Sprintf("trace_id=%016x span_id=%016x", uint64(span.TraceID), uint64(span.SpanID)))
	})
}

// brpcLog is the interop server's output file.
type brpcLog struct{ path string }

func (l brpcLog) String() string {
	b, _ := os.ReadFile(l.path)
	return string(b)
}

// waitFor returns the first line of the log matching re, failing after 5s.
func (l brpcLog) waitFor(t *testing.T, re *regexp.Regexp) string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		for _, line := range strings.Split(l.String(), "\n") {
			if re.MatchString(line) {
				return line
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("brpc server never logged %q; its log:\n%s", re, l.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startBrpcInteropServer runs bin on a free port with -enable_rpcz, in a
// temporary directory, its output in a file (no copying goroutines), until
// the test ends.
func startBrpcInteropServer(t *testing.T, bin string) (string, brpcLog) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	log := brpcLog{path: filepath.Join(t.TempDir(), "brpc_server.log")}
	f, err := os.Create(log.path)
	require.NoError(t, err)
	defer f.Close()
	cmd := exec.Command(bin, "-port", strconv.Itoa(port), "-enable_rpcz")
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Dir = t.TempDir() // brpc's rpcz writes ./rpc_data there, not in the package
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return addr, log
		}
		if time.Now().After(deadline) {
			t.Fatalf("brpc interop server not listening on %s: %v; its log:\n%s", addr, err, log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
