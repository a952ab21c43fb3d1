// Package naming turns a naming-service URL ("list://a,b", "file://path",
// "dns://host:port", "http://host") into a changing list of servers, as
// brpc's naming services do. Schemes are registered by name, so a user adds
// one (consul, etcd ...) with Register and no change to gobrpc:
//
//	naming.Register("myns", myBuilder{})
//	ch.Init("myns://service", "rr", nil)
package naming

import (
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Node is one server: its address ("ip:port") and an opaque tag (a weight
// for wrr and wr, anything else for other uses). The same address with
// another tag is another node.
type Node struct {
	Addr string
	Tag  string
}

// Watcher receives the full server list every time it changes. Update is
// called from the naming service's goroutine; it must not block for long.
type Watcher interface {
	Update(nodes []Node)
}

// WatcherFunc adapts a function to Watcher.
type WatcherFunc func(nodes []Node)

// Update calls f.
func (f WatcherFunc) Update(nodes []Node) { f(nodes) }

// Target is a parsed naming-service URL: Scheme "file", Name "/etc/servers".
type Target struct {
	Scheme string
	Name   string // everything after "scheme://"
	URL    string // the URL as given
}

// ParseTarget splits "scheme://name". A URL without "://" is not a
// naming-service URL.
func ParseTarget(url string) (Target, error) {
	i := strings.Index(url, "://")
	if i <= 0 {
		return Target{}, fmt.Errorf("naming: %q is not a naming service URL (want scheme://name)", url)
	}
	return Target{Scheme: strings.ToLower(url[:i]), Name: url[i+3:], URL: url}, nil
}

// Builder starts a naming service for a target. Build must deliver the
// first list to w before it returns (an empty list when the first lookup
// failed, as brpc's periodic services do), then keep w up to date until
// the returned NamingService is closed.
type Builder interface {
	Build(t Target, w Watcher) (NamingService, error)
}

// NamingService is a running naming service.
type NamingService interface {
	// Close stops it; no Update runs after Close returns.
	Close()
}

var registry = struct {
	sync.RWMutex
	m map[string]Builder
}{m: map[string]Builder{}}

// Register makes scheme available to Channel.Init. Registering a scheme
// again replaces its builder. Call it from init functions.
func Register(scheme string, b Builder) {
	registry.Lock()
	defer registry.Unlock()
	registry.m[strings.ToLower(scheme)] = b
}

// Lookup returns the builder of scheme.
func Lookup(scheme string) (Builder, bool) {
	registry.RLock()
	defer registry.RUnlock()
	b, ok := registry.m[strings.ToLower(scheme)]
	return b, ok
}

// Schemes lists the registered schemes, sorted.
func Schemes() []string {
	registry.RLock()
	defer registry.RUnlock()
	out := make([]string, 0, len(registry.m))
	for s := range registry.m {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// Start parses url and builds its naming service.
func Start(url string, w Watcher) (NamingService, error) {
	t, err := ParseTarget(url)
	if err != nil {
		return nil, err
	}
	b, ok := Lookup(t.Scheme)
	if !ok {
		return nil, fmt.Errorf("naming: unknown scheme %q in %q (registered: %s)", t.Scheme, url, strings.Join(Schemes(), ", "))
	}
	return b.Build(t, w)
}

// Filter decides which nodes a channel uses (brpc's NamingServiceFilter).
type Filter interface {
	Accept(n Node) bool
}

// FilterFunc adapts a function to Filter.
type FilterFunc func(n Node) bool

// Accept calls f.
func (f FilterFunc) Accept(n Node) bool { return f(n) }
