// Package channel is gobrpc's client: a Channel sends RPCs to one server or
// to a cluster found by a naming service, with brpc's ChannelOptions
// (timeouts, retries on other servers, connection types); a
// SelectiveChannel balances over channels. A per-call Controller carries
// the call's settings and results.
//
//	var ch channel.Channel
//	if err := ch.Init("list://127.0.0.1:8000,127.0.0.1:8001", "rr", nil); err != nil { ... }
//	defer ch.Close()
//	stub := echopb.NewEchoServiceStub(&ch)
//	cntl := controller.New()
//	stub.Echo(cntl, &echopb.EchoRequest{Message: proto.String("hi")}, resp, nil)
package channel

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/gobrpc/gobrpc/backup"
	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/internal/h2client"
	"github.com/gobrpc/gobrpc/internal/transport"
	"github.com/gobrpc/gobrpc/loadbalancer"
	"github.com/gobrpc/gobrpc/naming"
)

// Channel sends RPCs to one server or to a cluster. Init it once, share it
// between goroutines, Close it when done. The zero value is ready for Init.
type Channel struct {
	opts   resolved
	state  atomic.Int32 // channelNew, channelReady, channelClosed
	target string

	// One server (lb == nil): single is its endpoint.
	single endpoint

	// A cluster: the naming service feeds servers, the balancer picks.
	lb      loadbalancer.LoadBalancer
	ns      naming.NamingService
	mu      sync.Mutex // guards servers and serializes list updates
	servers map[naming.Node]*loadbalancer.Server
	lbVar   *lbVar

	vars        *channelVars
	policy      backup.Policy // the options' policy, or owned
	ownedPolicy ownedPolicy   // built for BackupRequestMaxRatio or BackupRequestMaxExtraLoad; closed by Close
}

const (
	channelNew int32 = iota
	channelInitializing
	channelReady
	channelClosed
)

var _ Caller = (*Channel)(nil)

// Init connects the channel. With lb == "" target is one server, "ip:port"
// or "host:port" (the host is resolved now, as brpc does). Otherwise target
// is a naming-service URL ("list://...", "file://...", "dns://...",
// "http://...") and lb a load balancer name ("rr", "wrr", "random", "wr",
// "la", "c_murmurhash"). opts == nil means DefaultOptions. Connections are
// made lazily, by the first call to each server.
func (ch *Channel) Init(target, lb string, opts *Options) error {
	if !ch.state.CompareAndSwap(channelNew, channelInitializing) {
		return errors.New("channel: Init called twice")
	}
	if err := ch.init(target, lb, opts); err != nil {
		ch.state.Store(channelNew)
		return err
	}
	ch.state.Store(channelReady)
	return nil
}

// New returns a channel Init-ed with target, lb and opts (see Init):
// the same, for code that prefers a constructor.
//
//	ch, err := channel.New("list://10.0.0.1:8000,10.0.0.2:8000", "rr", nil)
//	client := echopb.NewEchoServiceClient(ch)
func New(target, lb string, opts *Options) (*Channel, error) {
	ch := new(Channel)
	if err := ch.Init(target, lb, opts); err != nil {
		return nil, err
	}
	return ch, nil
}

func (ch *Channel) init(target, lbName string, opts *Options) error {
	r, err := resolve(opts)
	if err != nil {
		return err
	}
	ch.opts, ch.target = r, target
	ch.vars = newChannelVars()
	if ch.policy, ch.ownedPolicy, err = r.backupPolicy(ch.vars.prefix); err != nil {
		ch.vars.hide()
		return err
	}
	if err := ch.initTarget(target, lbName); err != nil {
		ch.releaseBackup()
		return err
	}
	return nil
}

// releaseBackup closes what the channel owns for backups.
func (ch *Channel) releaseBackup() {
	if ch.ownedPolicy != nil {
		ch.ownedPolicy.Close()
	}
	ch.vars.hide()
}

func (ch *Channel) initTarget(target, lbName string) error {
	r := ch.opts
	var err error
	if !strings.Contains(target, "://") {
		if lbName != "" {
			return fmt.Errorf("channel: load balancer %q needs a naming service URL, got the single server %q", lbName, target)
		}
		addr, err := resolveAddr(target)
		if err != nil {
			return err
		}
		ch.single = ch.getEndpoint(addr)
		return nil
	}
	if lbName == "" {
		return fmt.Errorf("channel: naming service URL %q needs a load balancer (rr, wrr, random, wr, la, c_murmurhash)", target)
	}
	if ch.lb, err = loadbalancer.New(lbName); err != nil {
		return fmt.Errorf("channel: %w", err)
	}
	ch.servers = map[naming.Node]*loadbalancer.Server{}
	ch.lbVar = exposeLB(ch.vars.prefix, ch.lb)
	ns, err := naming.Start(target, naming.WatcherFunc(ch.updateServers))
	if err != nil {
		ch.lbVar.hide()
		return fmt.Errorf("channel: %w", err)
	}
	ch.ns = ns
	if !r.SucceedWithoutServer {
		ch.mu.Lock()
		empty := len(ch.servers) == 0
		ch.mu.Unlock()
		if empty {
			ch.closeCluster()
			return fmt.Errorf("channel: %s has no server and SucceedWithoutServer is false", target)
		}
	}
	return nil
}

// endpoint is a channel's connections to one server and its health:
// baidu_std's transport.Endpoint (shared between channels, as brpc's
// SocketMap shares sockets) or h2:grpc's h2client.Endpoint (the
// channel's own).
type endpoint interface {
	Addr() string
	Available() bool
	MarkFailed(reason string)
	Ready() bool
}

func (ch *Channel) getEndpoint(addr string) endpoint {
	if ch.opts.grpc {
		return h2client.New(addr, ch.opts.connType)
	}
	opts := transport.EndpointOptions{ConnType: ch.opts.connType, MaxBodySize: ch.opts.MaxBodySize, Auth: ch.opts.Auth}
	return transport.GetEndpoint(addr, opts, ch.opts.ConnectionGroup)
}

func putEndpoint(ep endpoint) {
	switch e := ep.(type) {
	case *transport.Endpoint:
		transport.PutEndpoint(e)
	case *h2client.Endpoint:
		e.Close()
	}
}

// updateServers applies a new list from the naming service: new nodes get
// an endpoint (shared with other channels), removed ones release theirs
// after the balancer stopped selecting them.
func (ch *Channel) updateServers(nodes []naming.Node) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.servers == nil { // closed
		return
	}
	next := make(map[naming.Node]*loadbalancer.Server, len(nodes))
	list := make([]*loadbalancer.Server, 0, len(nodes))
	for _, n := range nodes {
		if f := ch.opts.NamingServiceFilter; f != nil && !f.Accept(n) {
			continue
		}
		if _, dup := next[n]; dup {
			continue
		}
		s := ch.servers[n]
		if s == nil {
			ep := ch.getEndpoint(n.Addr)
			s = &loadbalancer.Server{Addr: n.Addr, Tag: n.Tag, Available: ep.Available,
				Value: newClusterServer(ch.vars.prefix, n.Addr, ep)}
		}
		next[n] = s
		list = append(list, s)
	}
	ch.lb.Update(list)
	for n, s := range ch.servers {
		if next[n] == nil {
			cs := s.Value.(*clusterServer)
			cs.hide()
			putEndpoint(cs.ep)
		}
	}
	ch.servers = next
}

// resolveAddr turns "host:port" into "ip:port" with the naming
// package's rules (IPv4 preferred, as brpc's hostname2endpoint).
func resolveAddr(target string) (string, error) {
	if strings.HasPrefix(target, ":") {
		target = "127.0.0.1" + target
	}
	n, err := naming.ParseNode(target)
	if err != nil {
		return "", fmt.Errorf("channel: invalid server address %q: %w", target, err)
	}
	if n.Tag != "" {
		return "", fmt.Errorf("channel: invalid server address %q: a single server takes no tag", target)
	}
	return n.Addr, nil
}

// BackupVarPrefix is the prefix of the channel's variables
// (rpc_channel_<n>): <prefix>_backup_sent, _backup_won, _backup_refused,
// and _backup_ratio when the channel owns a ratio-limited policy.
func (ch *Channel) BackupVarPrefix() string {
	if ch.vars == nil {
		return ""
	}
	return ch.vars.prefix
}

// Options returns the options in force, defaults filled in.
func (ch *Channel) Options() Options { return ch.opts.Options }

// CheckHealth reports whether a call could select a server now; a
// SelectiveChannel treats a sub-channel that cannot as unavailable.
func (ch *Channel) CheckHealth() bool {
	if ch.state.Load() != channelReady {
		return false
	}
	if ch.single != nil {
		return ch.single.Available()
	}
	ch.mu.Lock()
	defer ch.mu.Unlock()
	for _, s := range ch.servers {
		if s.IsAvailable() {
			return true
		}
	}
	return false
}

// Close stops the naming service and releases every connection the
// channel holds (connections shared with other channels stay open for
// them). Calls still in flight may fail; later calls fail with EINVAL.
func (ch *Channel) Close() error {
	if ch.state.Swap(channelClosed) != channelReady {
		return nil
	}
	ch.releaseBackup()
	if ch.single != nil {
		putEndpoint(ch.single)
		return nil
	}
	ch.closeCluster()
	return nil
}

func (ch *Channel) closeCluster() {
	if ch.ns != nil {
		ch.ns.Close() // no update runs after this
	}
	ch.mu.Lock()
	servers := ch.servers
	ch.servers = nil
	ch.mu.Unlock()
	for _, s := range servers {
		cs := s.Value.(*clusterServer)
		cs.hide()
		putEndpoint(cs.ep)
	}
	ch.lbVar.hide()
}

// CallMethod sends one RPC (see Caller). Generated stubs call it.
func (ch *Channel) CallMethod(md protoreflect.MethodDescriptor, cntl *controller.Controller,
	req, resp proto.Message, done func()) {
	if ics := ch.opts.Interceptors; len(ics) > 0 {
		startIntercepted(ch, ics, md, cntl, req, resp, done)
		return
	}
	startCall(ch, md, cntl, req, resp, done)
}

// ---- sender ----

func (ch *Channel) settings() *resolved { return &ch.opts }

func (ch *Channel) closed() bool { return ch.state.Load() != channelReady }

func (ch *Channel) describe() string {
	if ch.single != nil {
		return ch.single.Addr()
	}
	return ch.target
}

func (ch *Channel) balancer() loadbalancer.LoadBalancer { return ch.lb }

func (ch *Channel) backupPolicy() backup.Policy { return ch.policy }

func (ch *Channel) stats() *channelVars { return ch.vars }
