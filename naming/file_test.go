package naming

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
}

// quiet waits a few polls and checks no Update came.
func quiet(t *testing.T, r *recorder, n int) {
	t.Helper()
	time.Sleep(3 * filePollInterval)
	assert.Equal(t, n, r.count(), "unexpected Update: %v", r.last())
}

func TestFileParse(t *testing.T) {
	logs := captureLogs(t)
	dns := useFakeDNS(t)
	dns.set("svc.example", "10.0.0.9")
	path := filepath.Join(t.TempDir(), "servers")
	writeFile(t, path, `# servers of the echo service
127.0.0.1:8000 a

   127.0.0.1:8001   b  # second
127.0.0.1:8000 a
127.0.0.1:8000 other
	# indented comment
not-an-address
svc.example:9000
127.0.0.1:8002 1
`)
	r, _ := start(t, "file://"+path)
	assert.Equal(t, []Node{
		{Addr: "127.0.0.1:8000", Tag: "a"},
		{Addr: "127.0.0.1:8001", Tag: "b"},
		{Addr: "127.0.0.1:8000", Tag: "other"},
		{Addr: "10.0.0.9:9000"},
		{Addr: "127.0.0.1:8002", Tag: "1"},
	}, r.last())
	assert.Equal(t, 1, logs.count("skipped an entry"))
	quiet(t, r, 1)
}

func TestFileChanges(t *testing.T) {
	logs := captureLogs(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "servers")
	writeFile(t, path, "127.0.0.1:8000\n")
	r, _ := start(t, "file://"+path)
	assert.Equal(t, []Node{{Addr: "127.0.0.1:8000"}}, r.last())

	// A rewrite is seen within a few polls.
	writeFile(t, path, "127.0.0.1:8000\n127.0.0.1:8001\n")
	r.eventuallyLast(t, []Node{{Addr: "127.0.0.1:8000"}, {Addr: "127.0.0.1:8001"}})
	n := r.count()

	// Same mtime, other size: still seen.
	fi, err := os.Stat(path)
	require.NoError(t, err)
	writeFile(t, path, "127.0.0.1:8002\n")
	require.NoError(t, os.Chtimes(path, fi.ModTime(), fi.ModTime()))
	r.eventuallyLast(t, []Node{{Addr: "127.0.0.1:8002"}})

	// Same mtime and size, but another file renamed over it: still seen.
	fi, err = os.Stat(path)
	require.NoError(t, err)
	tmp := filepath.Join(dir, "servers.tmp")
	writeFile(t, tmp, "127.0.0.1:8003\n")
	require.NoError(t, os.Chtimes(tmp, fi.ModTime(), fi.ModTime()))
	require.NoError(t, os.Rename(tmp, path))
	r.eventuallyLast(t, []Node{{Addr: "127.0.0.1:8003"}})
	n = r.count()

	// Touched, or rewritten in another order: no Update.
	writeFile(t, path, "127.0.0.1:8003\n\n# comment\n127.0.0.1:8003\n")
	quiet(t, r, n)

	// Deleted: the list stays, and the failure is logged once.
	require.NoError(t, os.Remove(path))
	quiet(t, r, n)
	assert.Equal(t, 1, logs.count("keeping the last servers"))
	assert.Equal(t, []Node{{Addr: "127.0.0.1:8003"}}, r.last())

	// Back: read again, recovery logged once.
	writeFile(t, path, "127.0.0.1:8004 t\n")
	r.eventuallyLast(t, []Node{{Addr: "127.0.0.1:8004", Tag: "t"}})
	require.Eventually(t, func() bool { return logs.count("lookup works again") == 1 }, time.Second, 5*time.Millisecond)

	// Emptied: an empty list is a list.
	writeFile(t, path, "# nothing\n")
	r.eventuallyLast(t, []Node{})
	assert.NotNil(t, r.last())
}

func TestFileFirstReadFails(t *testing.T) {
	tests := []struct {
		name string
		path func(dir string) string
	}{
		{"missing", func(dir string) string { return filepath.Join(dir, "missing") }},
		{"directory", func(dir string) string { return dir }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			logs := captureLogs(t)
			path := tc.path(t.TempDir())
			r, _ := start(t, "file://"+path)
			assert.Equal(t, []Node{}, r.last())
			assert.Equal(t, 1, logs.count("first lookup failed"))
			quiet(t, r, 1)
			assert.Equal(t, 0, logs.count("keeping the last servers"), "one log per failure streak")
		})
	}
}

func TestFileAppearsLater(t *testing.T) {
	captureLogs(t)
	path := filepath.Join(t.TempDir(), "servers")
	r, _ := start(t, "file://"+path)
	assert.Equal(t, []Node{}, r.last())
	writeFile(t, path, "127.0.0.1:8000\n")
	r.eventuallyLast(t, []Node{{Addr: "127.0.0.1:8000"}})
}

func TestFileNoPath(t *testing.T) {
	_, err := Start("file://", &recorder{})
	require.Error(t, err)
}
