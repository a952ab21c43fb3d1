package server_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gobrpc/gobrpc/auth"
	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/example/echo/echopb"
	"github.com/gobrpc/gobrpc/rpcz"
	"github.com/gobrpc/gobrpc/server"
)

// interopSeen is what the handler saw of one brpc request.
type interopSeen struct {
	timeoutMs   int64
	deadlineIn  time.Duration // 0: cntl.Context() had no deadline
	user        string        // "" when AuthContext() is nil
	hasAuthCtxt bool
}

type interopEcho struct {
	mu   sync.Mutex
	seen map[int64]interopSeen // by log_id
}

func (s *interopEcho) Echo(cntl *controller.Controller, req *echopb.EchoRequest, resp *echopb.EchoResponse, done func()) {
	defer done()
	v := interopSeen{timeoutMs: cntl.ServerTimeoutMs()}
	if d, ok := cntl.Context().Deadline(); ok {
		v.deadlineIn = time.Until(d)
	}
	if ac := cntl.AuthContext(); ac != nil {
		v.user, v.hasAuthCtxt = ac.User, true
	}
	s.mu.Lock()
	s.seen[cntl.LogID()] = v
	s.mu.Unlock()
	resp.Message = req.Message
}

func (s *interopEcho) take() map[int64]interopSeen {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.seen
	s.seen = map[int64]interopSeen{}
	return m
}

// TestBrpcInteropServerAuth has a real C++ brpc client call a gobrpc server
// whose Options.Auth is auth.Token("s3cret"). It runs only when
// GOBRPC_BRPC_INTEROP_DIR names a folder holding interop_client: a brpc
// example.EchoService client (not part of this repository) whose
// ChannelOptions.auth generates the credential -credential (empty: no
// Authenticator), making -count sequential calls with log_id 0, 1, ... and
// -timeout_ms, -max_retry, -interval_ms; it also takes brpc's own gflags
// (-baidu_std_protocol_deliver_timeout_ms, -enable_rpcz), prints
// "FAILED code=<code> text=<text>" per failed call and exits 1 if any failed.
func TestBrpcInteropServerAuth(t *testing.T) {
	dir := os.Getenv("GOBRPC_BRPC_INTEROP_DIR")
	if dir == "" {
		t.Skip("GOBRPC_BRPC_INTEROP_DIR is not set: no C++ brpc interop client")
	}
	bin := filepath.Join(dir, "interop_client")
	_, err := os.Stat(bin)
	require.NoError(t, err, "GOBRPC_BRPC_INTEROP_DIR has no interop_client")

	svc := &interopEcho{seen: map[int64]interopSeen{}}
	srv := server.New(&server.Options{Auth: auth.Token("s3cret")})
	require.NoError(t, echopb.RegisterEchoServiceServer(srv, svc))
	require.NoError(t, srv.Start("127.0.0.1:0"))
	t.Cleanup(func() {
		srv.Stop()
		srv.Join()
	})
	addr := srv.ListenAddress().String()

	run := func(t *testing.T, args ...string) (string, error) {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"-server", addr, "-interval_ms", "50"}, args...)...)
		cmd.Dir = t.TempDir() // brpc's rpcz writes ./rpc_data there, not in the package
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	t.Run("GoodCredentialDeliversTimeout", func(t *testing.T) {
		out, err := run(t, "-credential", "s3cret", "-count", "3", "-timeout_ms", "500",
			"-baidu_std_protocol_deliver_timeout_ms=true")
		require.NoError(t, err, out)
		seen := svc.take()
		require.Len(t, seen, 3, out)
		for id, v := range seen {
			assert.True(t, v.hasAuthCtxt, "log_id %d: no AuthContext", id)
			assert.Equal(t, "token", v.user, "log_id %d", id)
			assert.True(t, v.timeoutMs > 300 && v.timeoutMs <= 500, "log_id %d: ServerTimeoutMs = %d, want brpc's remaining part of 500", id, v.timeoutMs)
			assert.True(t, v.deadlineIn > 0 && v.deadlineIn <= 500*time.Millisecond, "log_id %d: deadline in %v", id, v.deadlineIn)
		}
	})

	t.Run("GoodCredentialNoTimeout", func(t *testing.T) {
		out, err := run(t, "-credential", "s3cret", "-count", "1") // brpc's default: no timeout_ms
		require.NoError(t, err, out)
		seen := svc.take()
		require.Contains(t, seen, int64(0), out)
		assert.Equal(t, int64(-1), seen[0].timeoutMs)
		assert.Zero(t, seen[0].deadlineIn, "a deadline without a delivered timeout")
	})

	for _, c := range []struct{ name, credential string }{{"WrongCredential", "wrong"}, {"NoAuthenticator", ""}} {
		t.Run(c.name, func(t *testing.T) {
			out, err := run(t, "-credential", c.credential, "-count", "1", "-max_retry", "0")
			require.Error(t, err, out)
			assert.Contains(t, out, "FAILED code="+strconv.Itoa(int(controller.ERPCAUTH))+" text=[E1004]Fail to authenticate")
			time.Sleep(50 * time.Millisecond) // a handler that wrongly ran has logged by now
			assert.Empty(t, svc.take(), "the handler ran for a refused credential")
		})
	}

	t.Run("RpczTraceFromBrpc", func(t *testing.T) {
		was := rpcz.Enabled.Get()
		require.NoError(t, rpcz.Enabled.SetValue(true))
		defer rpcz.Enabled.SetValue(was)
		rpcz.Reset()
		out, err := run(t, "-credential", "s3cret", "-count", "2", "-enable_rpcz")
		require.NoError(t, err, out)
		svc.take()
		var spans []rpcz.Span
		for _, s := range rpcz.Recent(rpcz.MaxSpans) {
			if s.Server && s.Method == "example.EchoService.Echo" {
				spans = append(spans, s)
			}
		}
		require.Len(t, spans, 2)
		for _, s := range spans {
			assert.NotZero(t, s.TraceID, "brpc's trace_id")
			assert.NotZero(t, s.SpanID, "brpc's span_id")
		}
		assert.NotEqual(t, spans[0].TraceID, spans[1].TraceID, "one trace per brpc call")
	})
}
