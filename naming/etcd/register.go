package etcdnaming

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Registration is a server's key in etcd, kept alive until Close.
type Registration struct {
	cli   *clientv3.Client
	key   string
	tag   string
	ttl   int64 // seconds
	url   string
	ctx   context.Context
	stop  context.CancelFunc
	done  chan struct{}
	once  sync.Once
	mu    sync.Mutex
	lease clientv3.LeaseID // the lease the key is under now
}

// Register puts the key prefix/addr with the value tag under a lease of
// ttl (whole seconds, at least 1), keeps the lease alive, and registers
// again whenever etcd loses the lease (etcd restarted without its data, or
// was unreachable for longer than ttl). If the server crashes, its key goes
// away ttl after the last keep-alive.
//
// ctx bounds the first registration, which must succeed for Register to
// return a Registration; the registration then lasts until Close (or until
// ctx is done, which also deletes the key). Call Close before the server
// stops answering, so clients stop sending first:
//
//	reg, err := etcdnaming.Register(ctx, []string{"127.0.0.1:2379"}, "/services/echo", "10.0.0.1:8000", "", 10*time.Second)
//	...
//	srv.OnStop(func() { reg.Close() })
func Register(ctx context.Context, endpoints []string, prefix, addr, tag string, ttl time.Duration) (*Registration, error) {
	if len(endpoints) == 0 {
		return nil, errors.New("etcdnaming: Register: no etcd endpoint")
	}
	eps, err := parseEndpoints(strings.Join(endpoints, ","))
	if err != nil {
		return nil, fmt.Errorf("etcdnaming: Register: %w", err)
	}
	dir, err := normalizePrefix(prefix)
	if err != nil {
		return nil, fmt.Errorf("etcdnaming: Register: %w", err)
	}
	n, err := nodeOf(addr, tag)
	if err != nil {
		return nil, fmt.Errorf("etcdnaming: Register: server address: %w", err)
	}
	if n.Addr != addr {
		return nil, fmt.Errorf("etcdnaming: Register: server address %q must be ip:port (it resolves to %s)", addr, n.Addr)
	}
	if ttl < time.Second {
		return nil, fmt.Errorf("etcdnaming: Register: ttl %v is under etcd's 1 s", ttl)
	}
	cli, err := newClient(eps)
	if err != nil {
		return nil, fmt.Errorf("etcdnaming: Register: %w", err)
	}
	rctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	r := &Registration{
		cli: cli, key: dir + "/" + addr, tag: n.Tag, ttl: int64(math.Ceil(ttl.Seconds())),
		url: strings.Join(eps, ","), ctx: rctx, stop: stop, done: make(chan struct{}),
	}
	first, cancel := context.WithTimeout(ctx, dialTimeout())
	defer cancel()
	ka, err := r.register(first)
	if err != nil {
		stop()
		cli.Close()
		return nil, fmt.Errorf("etcdnaming: Register %s at %s: %w", r.key, r.url, err)
	}
	go r.keep(ka)
	if ctx.Done() != nil {
		go func() {
			select {
			case <-ctx.Done():
				r.Close()
			case <-r.done:
			}
		}()
	}
	return r, nil
}

// Key is the key the server is registered under.
func (r *Registration) Key() string { return r.key }

// register grants a lease, puts the key under it and starts keeping it
// alive.
func (r *Registration) register(ctx context.Context) (<-chan *clientv3.LeaseKeepAliveResponse, error) {
	lease, err := r.cli.Grant(ctx, r.ttl)
	if err != nil {
		return nil, err
	}
	if _, err := r.cli.Put(ctx, r.key, r.tag, clientv3.WithLease(lease.ID)); err != nil {
		r.cli.Revoke(context.WithoutCancel(ctx), lease.ID) // best effort; it expires anyway
		return nil, err
	}
	ka, err := r.cli.KeepAlive(r.ctx, lease.ID)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.lease = lease.ID
	r.mu.Unlock()
	return ka, nil
}

// keep consumes keep-alive answers; the channel closes when the lease is
// lost (expired, revoked, or no answer within its TTL) or Close stops it.
// A lost lease is registered again, retrying until etcd answers.
func (r *Registration) keep(ka <-chan *clientv3.LeaseKeepAliveResponse) {
	defer close(r.done)
	for {
		for range ka {
		}
		if r.ctx.Err() != nil {
			return
		}
		slog.Warn("gobrpc: etcd registration: lease lost; registering again", "key", r.key, "etcd", r.url)
		warn := logEvery{interval: 10 * time.Second}
		for {
			ctx, cancel := context.WithTimeout(r.ctx, dialTimeout())
			var err error
			ka, err = r.register(ctx)
			cancel()
			if err == nil {
				slog.Info("gobrpc: etcd registration: registered again", "key", r.key, "etcd", r.url)
				break
			}
			if r.ctx.Err() != nil {
				return
			}
			if warn.allow() {
				slog.Warn("gobrpc: etcd registration: cannot register; retrying", "key", r.key, "etcd", r.url, "err", err)
			}
			t := time.NewTimer(retryInterval())
			select {
			case <-t.C:
			case <-r.ctx.Done():
				t.Stop()
				return
			}
		}
	}
}

// Close deletes the key (by revoking its lease) and stops keeping it
// alive. It waits up to etcd_dial_timeout_ms for etcd; if etcd cannot be
// reached, the key goes away when its lease expires. Close is idempotent.
func (r *Registration) Close() error {
	var err error
	r.once.Do(func() {
		r.stop()
		<-r.done
		r.mu.Lock()
		lease := r.lease
		r.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), dialTimeout())
		defer cancel()
		// A lease etcd no longer has (it expired, or etcd lost its data)
		// took the key with it.
		if _, e := r.cli.Revoke(ctx, lease); e != nil && !errors.Is(e, rpctypes.ErrLeaseNotFound) {
			err = fmt.Errorf("etcdnaming: deregister %s: %w (the key expires with its lease)", r.key, e)
		}
		r.cli.Close()
	})
	return err
}
