// Package loadbalancer picks a server for each RPC attempt, as brpc's load
// balancers do. Balancers are registered by name ("rr", "wrr", "random",
// "wr", "la", "c_murmurhash"), so a user adds one with Register.
//
// A balancer keeps an immutable snapshot of its servers behind an atomic
// pointer: Select reads it without a lock, and a server-list change builds
// a new snapshot and swaps it in, so updates never block selections.
package loadbalancer

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// Server is one selectable server. Identity is the pointer: the channel
// keeps one *Server per node while the node stays in the list.
type Server struct {
	Addr string
	Tag  string

	// Available reports whether the server can take a request now (its
	// connection is healthy and it did not answer ELOGOFF). nil means
	// always available. Balancers skip unavailable servers.
	Available func() bool

	// Value is the channel's own data for this server (its connections).
	Value any
}

// IsAvailable calls Available, treating nil as available.
func (s *Server) IsAvailable() bool { return s.Available == nil || s.Available() }

// Excluded is the set of servers already tried by this RPC (brpc's
// ExcludedServers): balancers avoid them on a best-effort basis, and would
// rather return an excluded server than nothing.
type Excluded interface {
	Contains(s *Server) bool
}

// SelectIn describes one selection.
type SelectIn struct {
	Excluded       Excluded // may be nil
	RequestCode    uint64   // for consistent hashing
	HasRequestCode bool

	// BeginTime is when this attempt starts. "la" counts the attempt as in
	// flight from then until its Feedback, which must carry the same
	// instant in CallInfo.BeginTime. Zero: the attempt is not counted.
	BeginTime time.Time
}

// CallInfo is the feedback of one finished attempt (for "la").
type CallInfo struct {
	Server    *Server
	Latency   time.Duration
	ErrorCode int32     // 0 on success
	TimeoutMs int64     // the RPC's timeout, -1 for none
	Retries   int       // retries left when the attempt ended
	Retried   int       // retries already made when the attempt ended (brpc's retried_count)
	BeginTime time.Time // SelectIn.BeginTime of this attempt; zero if that was zero
}

// Errors a selection can end with; the channel maps them to brpc's codes.
var (
	ErrNoServer          = errors.New("loadbalancer: no server in the list")                                          // ENODATA
	ErrNoAvailableServer = errors.New("loadbalancer: no server is available")                                         // EHOSTDOWN
	ErrNoRequestCode     = errors.New("loadbalancer: this balancer needs a request code (Controller.SetRequestCode)") // EINVAL
)

// LoadBalancer selects servers. Every method may be called concurrently.
type LoadBalancer interface {
	// Update replaces the server list. It must not block Select.
	Update(servers []*Server)
	// Select picks a server for one attempt.
	Select(in SelectIn) (*Server, error)
	// Feedback reports a finished attempt; balancers that ignore it do
	// nothing.
	Feedback(info CallInfo)
}

// Builder makes a balancer. params is the part of the name after ':'
// (brpc's "rr:min_working_instances=2"), "" when none.
type Builder func(params string) (LoadBalancer, error)

var registry = struct {
	sync.RWMutex
	m map[string]Builder
}{m: map[string]Builder{}}

// Register makes name available to Channel.Init and SelectiveChannel.Init.
func Register(name string, b Builder) {
	registry.Lock()
	defer registry.Unlock()
	registry.m[name] = b
}

// New builds the balancer named by spec ("rr", "la", "rr:params").
func New(spec string) (LoadBalancer, error) {
	name, params, _ := strings.Cut(spec, ":")
	registry.RLock()
	b, ok := registry.m[name]
	registry.RUnlock()
	if !ok {
		return nil, fmt.Errorf("loadbalancer: unknown load balancer %q (registered: %s)", name, strings.Join(Names(), ", "))
	}
	return b(params)
}

// Names lists the registered balancers, sorted.
func Names() []string {
	registry.RLock()
	defer registry.RUnlock()
	out := make([]string, 0, len(registry.m))
	for n := range registry.m {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
