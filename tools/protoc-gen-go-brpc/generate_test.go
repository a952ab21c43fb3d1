package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// The tests that run protoc need it on PATH. Without it they skip, except
// in CI (CI set), where a missing protoc fails: CI installs
// protobuf-compiler so that stale generated code cannot slip through.
func requireProtoc(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("protoc")
	if err == nil {
		return p
	}
	if os.Getenv("CI") == "" {
		t.Skipf("protoc is not on PATH (%v); install protobuf-compiler to run this test", err)
	}
	t.Fatalf("protoc is not on PATH (%v); CI is set, so the generated code must be checked: install protobuf-compiler", err)
	return ""
}

// moduleRoot is the directory of the go.mod of the module under test.
func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		t.Fatalf("go env GOMOD = %q: not in a module", gomod)
	}
	return filepath.Dir(gomod)
}

// plugins are protoc-gen-go, built from the version of
// google.golang.org/protobuf in go.mod, and this plugin.
type plugins struct{ goPlugin, brpcPlugin string }

// pluginsDir holds the plugins, built once for all tests; TestMain removes it.
var pluginsDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if pluginsDir != "" {
		os.RemoveAll(pluginsDir)
	}
	os.Exit(code)
}

var buildPluginsOnce = sync.OnceValues(func() (plugins, error) {
	dir, err := os.MkdirTemp("", "protoc-gen-go-brpc-test")
	if err != nil {
		return plugins{}, err
	}
	pluginsDir = dir
	p := plugins{
		goPlugin:   filepath.Join(dir, "protoc-gen-go"),
		brpcPlugin: filepath.Join(dir, "protoc-gen-go-brpc"),
	}
	for _, b := range []struct{ out, pkg string }{
		{p.goPlugin, "google.golang.org/protobuf/cmd/protoc-gen-go"},
		{p.brpcPlugin, "."},
	} {
		if out, err := exec.Command("go", "build", "-o", b.out, b.pkg).CombinedOutput(); err != nil {
			return plugins{}, fmt.Errorf("go build %s: %v\n%s", b.pkg, err, out)
		}
	}
	return p, nil
})

func buildPlugins(t *testing.T) plugins {
	t.Helper()
	p, err := buildPluginsOnce()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// protocArgs are the flags running both plugins with paths=source_relative
// into out.
func (p plugins) protocArgs(out string) []string {
	return []string{
		"--plugin=protoc-gen-go=" + p.goPlugin,
		"--plugin=protoc-gen-go-brpc=" + p.brpcPlugin,
		"--go_out=" + out, "--go_opt=paths=source_relative",
		"--go-brpc_out=" + out, "--go-brpc_opt=paths=source_relative",
	}
}

// TestGeneratedCodeIsUpToDate regenerates the code of every .proto in the
// module (outside testdata and hidden directories) with protoc,
// protoc-gen-go and this plugin, and compares it with the committed files.
func TestGeneratedCodeIsUpToDate(t *testing.T) {
	protoc := requireProtoc(t)
	root := moduleRoot(t)
	tools := buildPlugins(t)

	var protos []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			// A nested module (tools/bench, naming/etcd) generates its
			// protos with its own tools and checks them itself.
			if _, err := os.Stat(filepath.Join(p, "go.mod")); p != root && err == nil {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(p, ".proto") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			protos = append(protos, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("looking for .proto files under %s: %v", root, err)
	}
	if len(protos) == 0 {
		t.Fatalf("no .proto file under %s; expected at least example/echo/echopb/echo.proto", root)
	}
	for _, rel := range protos {
		t.Run(rel, func(t *testing.T) { checkGenerated(t, protoc, root, rel, tools) })
	}
}

// sourceLine finds the .proto path (relative to protoc's -I) that a
// generated file names in its header.
var sourceLine = regexp.MustCompile(`(?m)^// (?:source: (\S+)|(\S+) is a deprecated file\.)$`)

// protocVersionLine is the header line naming protoc's version, which
// varies with the protoc installed and so is not compared.
var protocVersionLine = regexp.MustCompile(`(?m)^(// \tprotoc +).*$`)

func normalise(b []byte) []byte {
	return protocVersionLine.ReplaceAll(b, []byte("${1}vX.Y.Z"))
}

// checkGenerated regenerates one .proto (rel, relative to the module root)
// and compares the output with the committed files beside it.
//
// The -I directory is the one the committed code was generated with: the
// header's "source:" line is the .proto's path relative to it (it is also
// the path the descriptor registers under). Without committed code, the
// module root is assumed.
func checkGenerated(t *testing.T, protoc, root, rel string, tools plugins) {
	prefix := strings.TrimSuffix(rel, ".proto")
	candidates := []string{prefix + ".pb.go", prefix + "_brpc.pb.go"}

	include, source := "", rel
	for _, c := range candidates {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(c)))
		if err != nil {
			continue
		}
		m := sourceLine.FindSubmatch(b)
		if m == nil {
			t.Fatalf("%s has no \"// source:\" header line; regenerate it", c)
		}
		source = string(m[1]) + string(m[2])
		dir, ok := strings.CutSuffix(rel, source)
		if !ok || (dir != "" && !strings.HasSuffix(dir, "/")) {
			t.Fatalf("%s says it was generated from %s, which is not a suffix of %s", c, source, rel)
		}
		include = strings.TrimSuffix(dir, "/")
		break
	}
	includeDir := filepath.Join(root, filepath.FromSlash(include))
	shownInclude := include
	if shownInclude == "" {
		shownInclude = "."
	}
	regen := fmt.Sprintf("regenerate from the module root with protoc-gen-go (go install google.golang.org/protobuf/cmd/protoc-gen-go) "+
		"and protoc-gen-go-brpc (go install ./tools/protoc-gen-go-brpc) on PATH:\n"+
		"\tprotoc -I %[1]s --go_out=%[1]s --go_opt=paths=source_relative --go-brpc_out=%[1]s --go-brpc_opt=paths=source_relative %[2]s",
		shownInclude, path.Join(shownInclude, source))

	out := t.TempDir()
	cmd := exec.Command(protoc, append(append([]string{"-I", "."}, tools.protocArgs(out)...), source)...)
	cmd.Dir = includeDir
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", cmd, err, b)
	}

	generated := map[string]bool{}
	err := filepath.WalkDir(out, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		r, err := filepath.Rel(out, p)
		if err != nil {
			return err
		}
		committedRel := path.Join(include, filepath.ToSlash(r))
		generated[committedRel] = true
		want, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		got, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(committedRel)))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			t.Errorf("%s is missing; %s", committedRel, regen)
		case err != nil:
			t.Error(err)
		case !bytes.Equal(normalise(got), normalise(want)):
			t.Errorf("%s is stale (%s); %s", committedRel, firstDifference(normalise(got), normalise(want)), regen)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range candidates {
		if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(c))); err == nil && !generated[c] {
			t.Errorf("%s is committed but %s no longer generates it: delete it", c, rel)
		}
	}
}

// firstDifference describes the first line where got and want differ.
func firstDifference(got, want []byte) string {
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d is %q, want %q", i+1, gl, wl)
		}
	}
	return "no difference"
}
