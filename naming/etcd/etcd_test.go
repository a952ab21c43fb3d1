package etcdnaming

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// etcdServer is a real etcd (Debian's etcd-server) on free loopback ports
// with a temporary data directory, stopped at the end of the test.
type etcdServer struct {
	t        *testing.T
	bin      string
	dataDir  string
	client   int // client port
	peer     int
	cmd      *exec.Cmd
	exited   chan struct{}
	Endpoint string
	tlsArgs  []string    // etcd's TLS flags, when it serves clients over TLS
	tls      *tls.Config // what the test's own clients use then
}

// etcdBinary finds etcd: $ETCD_BIN, then PATH, then Debian's location. In
// CI (CI set) a missing etcd fails the test; elsewhere it skips it.
func etcdBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("ETCD_BIN"); p != "" {
		return p
	}
	if p, err := exec.LookPath("etcd"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/bin/etcd"); err == nil {
		return "/usr/bin/etcd"
	}
	if os.Getenv("CI") != "" {
		t.Fatal("etcd not found (CI installs Debian's etcd-server)")
	}
	t.Skip("etcd not found: apt-get install etcd-server, or set ETCD_BIN")
	return ""
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startEtcd starts an etcd and waits until it answers.
func startEtcd(t *testing.T) *etcdServer {
	t.Helper()
	return startEtcdWith(t, nil, nil)
}

// startEtcdWith starts an etcd with extra flags (tlsArgs) that the test's
// own clients reach with tlsCfg (nil: plain TCP).
func startEtcdWith(t *testing.T, tlsArgs []string, tlsCfg *tls.Config) *etcdServer {
	t.Helper()
	e := &etcdServer{t: t, bin: etcdBinary(t), dataDir: t.TempDir(), client: freePort(t), peer: freePort(t),
		tlsArgs: tlsArgs, tls: tlsCfg}
	e.Endpoint = "127.0.0.1:" + strconv.Itoa(e.client)
	e.start()
	t.Cleanup(e.stop)
	return e
}

func (e *etcdServer) start() {
	t := e.t
	t.Helper()
	clientURL := "http://" + e.Endpoint
	if e.tls != nil {
		clientURL = "https://" + e.Endpoint
	}
	peerURL := "http://127.0.0.1:" + strconv.Itoa(e.peer)
	e.cmd = exec.Command(e.bin, append([]string{
		"--name", "gobrpc-test",
		"--data-dir", filepath.Join(e.dataDir, "data"),
		"--listen-client-urls", clientURL, "--advertise-client-urls", clientURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "gobrpc-test=" + peerURL,
		"--log-level", "error",
	}, e.tlsArgs...)...)
	logf, err := os.OpenFile(filepath.Join(e.dataDir, "etcd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	require.NoError(t, err)
	e.cmd.Stdout, e.cmd.Stderr = logf, logf
	dieWithTest(e.cmd)
	require.NoError(t, e.cmd.Start())
	e.exited = make(chan struct{})
	cmd := e.cmd
	go func() {
		cmd.Wait()
		logf.Close()
		close(e.exited)
	}()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Endpoint}, DialTimeout: time.Second, Logger: zap.NewNop(), TLS: e.tls})
	require.NoError(t, err)
	defer cli.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		_, err := cli.Get(ctx, "health")
		cancel()
		if err == nil {
			return
		}
		select {
		case <-e.exited:
			log, _ := os.ReadFile(filepath.Join(e.dataDir, "etcd.log"))
			t.Fatalf("etcd exited: %s", log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd did not answer in 20 s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop ends etcd (SIGTERM, then SIGKILL after 5 s); start brings it back
// with the same data and ports.
func (e *etcdServer) stop() {
	if e.cmd == nil {
		return
	}
	e.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-e.exited:
	case <-time.After(5 * time.Second):
		e.cmd.Process.Kill()
		<-e.exited
	}
	e.cmd = nil
}

// client is a plain etcd client for the test's own reads and writes.
func (e *etcdServer) clientv3() *clientv3.Client {
	e.t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Endpoint}, DialTimeout: 2 * time.Second, Logger: zap.NewNop(), TLS: e.tls})
	require.NoError(e.t, err)
	e.t.Cleanup(func() { cli.Close() })
	return cli
}

func (e *etcdServer) url(prefix string) string { return fmt.Sprintf("etcd://%s%s", e.Endpoint, prefix) }
