package etcdnaming

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gobrpc/gobrpc/naming"
)

func init() { naming.Register("etcd", builder{}) }

type builder struct{}

// parseTarget splits the name of "etcd://host:port[,host:port...]/prefix".
func parseTarget(name string) (endpoints []string, prefix string, err error) {
	i := strings.IndexByte(name, '/')
	if i < 0 {
		return nil, "", fmt.Errorf("no prefix after the endpoints in %q (want etcd://host:port[,host:port...]/prefix)", name)
	}
	if endpoints, err = parseEndpoints(name[:i]); err != nil {
		return nil, "", err
	}
	if prefix, err = normalizePrefix(name[i:]); err != nil {
		return nil, "", err
	}
	return endpoints, prefix, nil
}

// Build lists the servers under the prefix and delivers them before it
// returns (no server if etcd cannot be reached within etcd_dial_timeout_ms,
// as brpc's naming services start), then follows the prefix with a watch.
func (builder) Build(t naming.Target, w naming.Watcher) (naming.NamingService, error) {
	endpoints, prefix, err := parseTarget(t.Name)
	if err != nil {
		return nil, fmt.Errorf("etcdnaming: %s: %w", t.URL, err)
	}
	cli, err := newClient(endpoints)
	if err != nil {
		return nil, fmt.Errorf("etcdnaming: %s: %w", t.URL, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ns := &service{
		url: t.URL, cli: cli, dir: prefix + "/", w: w,
		nodes: map[string]naming.Node{}, bad: map[string]bool{},
		ctx: ctx, cancel: cancel, done: make(chan struct{}),
	}
	rev, err := ns.load()
	if err != nil {
		slog.Warn("gobrpc: etcd naming: first list failed, starting with no servers; retrying", "url", t.URL, "err", err)
		w.Update(nil)
	}
	go ns.run(rev)
	return ns, nil
}

// service follows the keys under dir.
type service struct {
	url string
	cli *clientv3.Client
	dir string // the prefix and a slash: keys are dir + address
	w   naming.Watcher

	nodes map[string]naming.Node // by key; only run (and Build before it) touch it
	bad   map[string]bool        // keys already logged as not an address

	// The etcd the list came from: its cluster id, the last revision
	// applied and the raft term then. etcd that comes back with another
	// id, a lower revision or a lower term has lost the history a watch
	// would resume from (see checkHistory).
	clusterID uint64
	lastRev   atomic.Int64
	lastTerm  atomic.Uint64

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// Close stops the watch and waits for it; no Update follows.
func (s *service) Close() {
	s.once.Do(func() {
		s.cancel()
		<-s.done
		s.cli.Close()
	})
}

// load reads every key under dir and delivers the list; it returns the
// revision the list is as of.
func (s *service) load() (int64, error) {
	ctx, cancel := context.WithTimeout(s.ctx, dialTimeout())
	defer cancel()
	resp, err := s.cli.Get(ctx, s.dir, clientv3.WithPrefix())
	if err != nil {
		return 0, err
	}
	clear(s.nodes)
	for _, kv := range resp.Kvs {
		s.put(kv)
	}
	s.deliver()
	s.clusterID = resp.Header.ClusterId
	s.lastRev.Store(resp.Header.Revision)
	s.lastTerm.Store(resp.Header.RaftTerm)
	return resp.Header.Revision, nil
}

// run keeps the list current: a watch from the revision after the last one
// seen, so nothing is missed across reconnections (the client resumes a
// broken watch from there too); when that revision was compacted away, or
// the watch ends, the list is read again.
func (s *service) run(rev int64) {
	defer close(s.done)
	warn := logEvery{interval: 10 * time.Second}
	for s.ctx.Err() == nil {
		if rev == 0 {
			var err error
			if rev, err = s.load(); err != nil {
				if s.ctx.Err() == nil && warn.allow() {
					slog.Warn("gobrpc: etcd naming: cannot list servers; keeping the last list and retrying", "url", s.url, "err", err)
				}
				s.sleep(retryInterval())
				continue
			}
		}
		rev = s.watch(rev)
	}
}

// watch applies the changes after rev until the watch ends; it returns the
// last revision applied, or 0 when the list must be read again.
func (s *service) watch(rev int64) int64 {
	ctx, cancel := context.WithCancel(s.ctx)
	var lost atomic.Bool
	checked := make(chan struct{})
	go func() {
		defer close(checked)
		if s.checkHistory(ctx) {
			lost.Store(true)
			cancel()
		}
	}()
	defer func() {
		cancel()
		<-checked
	}()
	// WithRequireLeader: a member cut off from its cluster's leader ends
	// the watch (and the list is read again, from a member that has one)
	// instead of silently sending no more changes.
	wctx := clientv3.WithRequireLeader(ctx)
	for resp := range s.cli.Watch(wctx, s.dir, clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
		if resp.CompactRevision != 0 {
			slog.Warn("gobrpc: etcd naming: changes since the last one seen were compacted; listing again",
				"url", s.url, "revision", rev, "compacted", resp.CompactRevision)
			return 0
		}
		if err := resp.Err(); err != nil {
			if s.ctx.Err() == nil {
				slog.Warn("gobrpc: etcd naming: watch failed; listing again", "url", s.url, "err", err)
				s.sleep(retryInterval())
			}
			return 0
		}
		if len(resp.Events) == 0 {
			continue // progress notification
		}
		for _, ev := range resp.Events {
			switch ev.Type {
			case mvccpb.PUT:
				s.put(ev.Kv)
			case mvccpb.DELETE:
				delete(s.nodes, string(ev.Kv.Key))
			}
		}
		rev = resp.Header.Revision
		s.lastRev.Store(rev)
		s.lastTerm.Store(max(s.lastTerm.Load(), resp.Header.RaftTerm))
		s.deliver()
	}
	if lost.Load() {
		return 0
	}
	return rev // the watch channel closed: Close, or the client gave up
}

// checkHistory asks etcd for its revision every etcd_check_interval_ms
// until ctx ends. It returns true when etcd has lost the history the watch
// follows: a revision below the last one applied, another cluster id, or a
// raft term below the last one seen (a wiped member starts again from term
// 1). A watch from a revision in etcd's future would wait silently for
// revisions that may never come (etcd restarted without its data, or a new
// cluster at the same address), so the list must be read again.
func (s *service) checkHistory(ctx context.Context) bool {
	t := time.NewTicker(checkInterval())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, dialTimeout())
		resp, err := s.cli.Get(rctx, s.dir, clientv3.WithPrefix(), clientv3.WithCountOnly())
		cancel()
		if err != nil {
			continue // etcd unreachable: the watch resumes by itself
		}
		h := resp.Header
		if h.ClusterId != s.clusterID || h.Revision < s.lastRev.Load() || h.RaftTerm < s.lastTerm.Load() {
			slog.Warn("gobrpc: etcd naming: etcd lost the history being watched; listing again", "url", s.url,
				"revision", h.Revision, "last_seen", s.lastRev.Load(), "raft_term", h.RaftTerm, "term_seen", s.lastTerm.Load(),
				"cluster_id", h.ClusterId, "was", s.clusterID)
			return true
		}
		t.Reset(checkInterval())
	}
}

// put records one key; a key that is not an address is skipped with one
// log line (per key).
func (s *service) put(kv *mvccpb.KeyValue) {
	key := string(kv.Key)
	n, err := nodeOf(key[len(s.dir):], string(kv.Value))
	if err != nil {
		delete(s.nodes, key)
		if !s.bad[key] {
			s.bad[key] = true
			slog.Warn("gobrpc: etcd naming: skipped a key that is not a server address", "url", s.url, "key", key, "err", err)
		}
		return
	}
	delete(s.bad, key)
	s.nodes[key] = n
}

// nodeOf turns the key's address part and its value into a node: the
// address must be ip:port (or host:port, resolved as list:// does), the
// value is the tag.
func nodeOf(addr, tag string) (naming.Node, error) {
	if addr == "" || strings.ContainsAny(addr, " \t\r\n#/") {
		return naming.Node{}, fmt.Errorf("%q is not host:port", addr)
	}
	n, err := naming.ParseNode(addr)
	if err != nil {
		return naming.Node{}, err
	}
	n.Tag = strings.TrimSpace(tag)
	return n, nil
}

// deliver gives the watcher the whole list, sorted by address so the
// balancers see a stable order.
func (s *service) deliver() {
	if s.ctx.Err() != nil {
		return // closing: no Update after Close
	}
	list := make([]naming.Node, 0, len(s.nodes))
	for _, n := range s.nodes {
		list = append(list, n)
	}
	slices.SortFunc(list, func(a, b naming.Node) int {
		if c := strings.Compare(a.Addr, b.Addr); c != 0 {
			return c
		}
		return strings.Compare(a.Tag, b.Tag)
	})
	s.w.Update(list)
}

func (s *service) sleep(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.ctx.Done():
	}
}
