package rpc_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// goList returns the packages pkg links, with the go tool of the running
// toolchain.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	out, err := exec.Command(goTool, append([]string{"list"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list %v: %v\n%s", args, err, out)
	}
	return strings.Fields(string(out))
}

// Generated code depends on the leaf rpc package: a binary that only calls
// services links neither the server (its flags, pages, limiters) nor
// net/http/pprof, which would register handlers on http.DefaultServeMux.
func TestClientBinaryLinksNoServer(t *testing.T) {
	for _, dep := range goList(t, "-deps", "github.com/gobrpc/gobrpc/example/echo/client") {
		switch {
		case dep == "net/http/pprof",
			dep == "github.com/gobrpc/gobrpc/server",
			strings.HasPrefix(dep, "github.com/gobrpc/gobrpc/server/"):
			t.Errorf("the echo client links %s", dep)
		}
	}
}

// A client binary defines no server flag: its -help lists none of them.
func TestClientBinaryRegistersNoServerFlags(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	bin := filepath.Join(t.TempDir(), "client")
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if out, err := exec.Command(goTool, "build", "-o", bin, "github.com/gobrpc/gobrpc/example/echo/client").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	out, _ := exec.Command(bin, "-help").CombinedOutput()
	help := string(out)
	if !strings.Contains(help, "-timeout_ms") {
		t.Fatalf("-help does not list the client's flags:\n%s", help)
	}
	for _, serverFlag := range []string{"-auto_cl_", "-timeout_cl_", "-max_concurrency", "-idle_timeout_s"} {
		if strings.Contains(help, serverFlag) {
			t.Errorf("a client binary registers the server flag %s", serverFlag)
		}
	}
}

// The leaf itself stays small: protobuf, the standard library and the
// few gobrpc packages a Controller needs.
func TestRPCIsALeaf(t *testing.T) {
	allowed := map[string]bool{
		"github.com/gobrpc/gobrpc/rpc": true, "github.com/gobrpc/gobrpc/controller": true,
		"github.com/gobrpc/gobrpc/errno": true, "github.com/gobrpc/gobrpc/auth": true,
		"github.com/gobrpc/gobrpc/internal/ctrl": true,
	}
	for _, dep := range goList(t, "-deps", "github.com/gobrpc/gobrpc/rpc") {
		if strings.HasPrefix(dep, "github.com/gobrpc/") && !allowed[dep] {
			t.Errorf("rpc depends on %s", dep)
		}
		if dep == "net/http" {
			t.Errorf("rpc depends on net/http")
		}
	}
}
