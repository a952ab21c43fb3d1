package naming

import (
	"context"
	"errors"
	"os"
	"strings"
	"time"
)

func init() { Register("file", fileBuilder{}) }

// filePollInterval is how often file:// checks the file, as brpc's
// FileNamingService checks its mtime.
var filePollInterval = 100 * time.Millisecond

// fileBuilder is brpc's FileNamingService: "file://path", one "addr [tag]"
// per line. The file is re-read when its mtime, size or identity (a new
// file renamed over it) changes; a file that cannot be read keeps the last
// list.
type fileBuilder struct{}

func (fileBuilder) Build(t Target, w Watcher) (NamingService, error) {
	if t.Name == "" {
		return nil, errors.New("naming: file:// needs a path")
	}
	f := &fileSource{url: t.URL, path: t.Name, lookup: lookupHost}
	poll := filePollInterval
	return newPeriodic(t.URL, f.fetch, func() time.Duration { return poll }, w), nil
}

type fileSource struct {
	url, path string
	lookup    lookupFunc
	seen      os.FileInfo // of the last good read; nil forces a read
}

func (f *fileSource) fetch(ctx context.Context) ([]Node, error) {
	fi, err := os.Stat(f.path)
	if err != nil {
		f.seen = nil
		return nil, err
	}
	if f.seen != nil && os.SameFile(f.seen, fi) && fi.ModTime().Equal(f.seen.ModTime()) && fi.Size() == f.seen.Size() {
		return nil, errNotModified
	}
	data, err := os.ReadFile(f.path)
	if err != nil {
		f.seen = nil
		return nil, err
	}
	// A write after the Stat shows up as a new mtime at the next poll.
	f.seen = fi
	return parseEntries(ctx, f.lookup, f.url, strings.Split(string(data), "\n")), nil
}
