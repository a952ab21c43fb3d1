package etcdnaming

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/gobrpc/gobrpc/channel"
	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/naming"
	"github.com/gobrpc/gobrpc/testsupport/echotest"
	"github.com/gobrpc/gobrpc/testsupport/testpb"
)

// With authentication on in etcd, the etcd_username / etcd_password flags
// let the naming service and Register in; without them Register fails
// with etcd's error and the naming service starts empty.
func TestCredentialsFromFlags(t *testing.T) {
	e := startEtcd(t)
	ctx := context.Background()
	admin := e.clientv3()
	_, err := admin.RoleAdd(ctx, "root")
	require.NoError(t, err)
	_, err = admin.UserAdd(ctx, "root", "s3cret")
	require.NoError(t, err)
	_, err = admin.UserGrantRole(ctx, "root", "root")
	require.NoError(t, err)
	_, err = admin.AuthEnable(ctx)
	require.NoError(t, err)

	old := dialTimeoutMs.Get()
	require.NoError(t, dialTimeoutMs.SetValue(500))
	defer dialTimeoutMs.SetValue(old)

	_, err = Register(ctx, []string{e.Endpoint}, "/auth", "127.0.0.1:8001", "", 2*time.Second)
	require.Error(t, err, "no credentials")
	t.Logf("without credentials: %v", err)
	rec := &recorder{}
	ns, err := naming.Start(e.url("/auth"), rec)
	require.NoError(t, err)
	ns.Close()
	assert.Empty(t, rec.last())

	require.NoError(t, username.Set("root"))
	require.NoError(t, password.Set("s3cret"))
	defer func() { username.Set(""); password.Set("") }()
	reg, err := Register(ctx, []string{e.Endpoint}, "/auth", "127.0.0.1:8001", "7", 2*time.Second)
	require.NoError(t, err)
	defer reg.Close()
	rec = &recorder{}
	ns, err = naming.Start(e.url("/auth"), rec)
	require.NoError(t, err)
	defer ns.Close()
	assert.Equal(t, []naming.Node{{Addr: "127.0.0.1:8001", Tag: "7"}}, rec.last())
	assert.Equal(t, "<hidden>", password.String())

	// Auth on: the admin client of the test must log in to switch it off
	// again (so the etcd stops cleanly).
	root, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Endpoint}, Username: "root", Password: "s3cret",
		DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	require.NoError(t, err)
	defer root.Close()
	_, err = root.AuthDisable(ctx)
	assert.NoError(t, err)
}

// An etcd:// channel works as a sub-channel of a SelectiveChannel.
func TestSelectiveChannelOverEtcd(t *testing.T) {
	e := startEtcd(t)
	srv, _ := echotest.StartServer(t, nil)
	reg, err := Register(context.Background(), []string{e.Endpoint}, "/sel", srv.ListenAddress().String(), "", 2*time.Second)
	require.NoError(t, err)
	defer reg.Close()

	var sub channel.Channel
	require.NoError(t, sub.Init(e.url("/sel"), "rr", nil))
	defer sub.Close()
	var sc channel.SelectiveChannel
	require.NoError(t, sc.Init("rr", nil))
	defer sc.Close()
	_, err = sc.AddChannel(&sub, "")
	require.NoError(t, err)

	stub := testpb.NewEchoServiceStub(&sc)
	var cntl controller.Controller
	resp := &testpb.EchoResponse{}
	stub.Echo(&cntl, &testpb.EchoRequest{Message: new("via etcd")}, resp, nil)
	require.False(t, cntl.Failed(), cntl.ErrorText())
	assert.Equal(t, "via etcd", resp.GetMessage())
	assert.Equal(t, srv.ListenAddress().String(), cntl.RemoteSide().String())
}
