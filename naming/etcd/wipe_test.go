package etcdnaming

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gobrpc/gobrpc/naming"
)

// etcd comes back empty (its data lost, or a new cluster at the same
// address): registrations are made again under new leases, and the naming
// service, whose last revision is now in etcd's future, notices and lists
// again instead of waiting for revisions that will not come.
func TestEtcdComesBackEmpty(t *testing.T) {
	e := startEtcd(t)
	ctx := context.Background()
	cli := e.clientv3()
	for i := range 50 { // history the new etcd will not have
		_, err := cli.Put(ctx, "/other/k", string(rune('a'+i%26)))
		require.NoError(t, err)
	}
	reg, err := Register(ctx, []string{e.Endpoint}, "/s", "127.0.0.1:8001", "", 2*time.Second)
	require.NoError(t, err)
	defer func() { require.NoError(t, reg.Close()) }()
	rec := &recorder{}
	ns, err := naming.Start(e.url("/s"), rec)
	require.NoError(t, err)
	defer ns.Close()
	rec.waitFor(t, []naming.Node{{Addr: "127.0.0.1:8001"}})

	e.stop()
	require.NoError(t, os.RemoveAll(filepath.Join(e.dataDir, "data")))
	e.start()
	// The registration comes back by itself; a new server registers.
	reg2, err := Register(ctx, []string{e.Endpoint}, "/s", "127.0.0.1:8002", "", 2*time.Second)
	require.NoError(t, err)
	defer reg2.Close()
	rec.waitFor(t, []naming.Node{{Addr: "127.0.0.1:8001"}, {Addr: "127.0.0.1:8002"}})
}

// Close of a registration whose lease etcd no longer has is not an error:
// the key went with the lease.
func TestCloseAfterTheLeaseIsGone(t *testing.T) {
	e := startEtcd(t)
	ctx := context.Background()
	reg, err := Register(ctx, []string{e.Endpoint}, "/s", "127.0.0.1:8001", "", 2*time.Second)
	require.NoError(t, err)
	cli := e.clientv3()
	reg.mu.Lock()
	lease := reg.lease
	reg.mu.Unlock()
	_, err = cli.Revoke(ctx, lease)
	require.NoError(t, err)
	require.NoError(t, reg.Close())
}
