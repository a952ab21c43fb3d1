// Package etcdnaming is gobrpc's etcd naming service and server
// self-registration. Importing it registers the etcd:// scheme:
//
//	import _ "github.com/gobrpc/gobrpc/naming/etcd"
//
//	ch.Init("etcd://127.0.0.1:2379/services/echo", "rr", nil)
//
// Under the prefix, every key is a server: the key "/services/echo/10.0.0.1:8000"
// is the server 10.0.0.1:8000, and its value is the server's tag (a weight
// for wrr and wr, or empty). The list is read once when the channel starts
// and then followed with a watch: a change reaches the load balancer within
// milliseconds, with no polling.
//
// A server registers itself with Register: its key is put under a lease
// that is kept alive, so a crashed server disappears after its TTL, and
// Registration.Close (or Server.Stop with Server.OnStop(reg.Close)) deletes
// the key first, so clients stop sending before the server stops answering.
//
// This is a module of its own, so users of gobrpc who do not use etcd never
// download the etcd client and its gRPC dependencies.
package etcdnaming

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/gobrpc/gobrpc/flags"
)

// Flags in the style of brpc's consul naming service flags. They are read
// when a naming service or a registration connects.
var (
	dialTimeoutMs = flags.DefineInt32("etcd_dial_timeout_ms", 2000,
		"Timeout of connecting to etcd and of each etcd request made to start a naming service or a registration",
		flags.Positive[int32])
	retryIntervalMs = flags.DefineInt32("etcd_retry_interval_ms", 500,
		"Wait so many milliseconds before listing the servers or registering again after etcd failed",
		flags.Positive[int32])
	checkIntervalMs = flags.DefineInt32("etcd_check_interval_ms", 1000,
		"While watching, ask etcd for its revision so often: a revision below the last one seen, or another cluster id (etcd lost its data or was replaced), lists the servers again",
		flags.Positive[int32])
	username = flags.DefineString("etcd_username", "", "User name for etcd authentication (empty: none)", nil)
	password = flags.DefineSecret("etcd_password", "Password for etcd authentication")
	certFile = flags.DefineString("etcd_tls_cert_file", "", "Client certificate for TLS to etcd (PEM); with etcd_tls_key_file", nil)
	keyFile  = flags.DefineString("etcd_tls_key_file", "", "Client key for TLS to etcd (PEM)", nil)
	caFile   = flags.DefineString("etcd_tls_ca_file", "", "CA bundle to verify etcd's certificate (PEM); setting any etcd_tls_* flag turns TLS on", nil)
)

func dialTimeout() time.Duration { return time.Duration(dialTimeoutMs.Get()) * time.Millisecond }

func retryInterval() time.Duration { return time.Duration(retryIntervalMs.Get()) * time.Millisecond }

func checkInterval() time.Duration { return time.Duration(checkIntervalMs.Get()) * time.Millisecond }

// parseEndpoints checks "host:port[,host:port...]".
func parseEndpoints(s string) ([]string, error) {
	if s == "" {
		return nil, errors.New("no etcd endpoint (want host:port[,host:port...])")
	}
	var out []string
	for _, ep := range strings.Split(s, ",") {
		ep = strings.TrimSpace(ep)
		host, port, err := net.SplitHostPort(ep)
		if err != nil || host == "" {
			return nil, fmt.Errorf("etcd endpoint %q is not host:port", ep)
		}
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return nil, fmt.Errorf("etcd endpoint %q: port must be 1-65535", ep)
		}
		out = append(out, ep)
	}
	return out, nil
}

// normalizePrefix makes "/services/echo" of "services/echo/" and refuses an
// empty prefix, which would take every key of etcd for a server.
func normalizePrefix(prefix string) (string, error) {
	p := "/" + strings.Trim(prefix, "/")
	if p == "/" {
		return "", errors.New("empty prefix: the keys of the servers must be under a prefix such as /services/echo")
	}
	return p, nil
}

// newClient connects to endpoints with the flags' timeout, credentials and
// TLS files. clientv3.New does not wait for a connection: the first request
// does, within the context its caller gives.
func newClient(endpoints []string) (*clientv3.Client, error) {
	cfg := clientv3.Config{
		Endpoints:            endpoints,
		DialTimeout:          dialTimeout(),
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 3 * time.Second,
		Username:             username.Get(),
		Password:             password.Get(),
		// The client logs every reconnection attempt through zap; gobrpc
		// logs what a user acts on (a failed list, a lost lease) itself.
		Logger: zap.NewNop(),
	}
	if certFile.Get() != "" || keyFile.Get() != "" || caFile.Get() != "" {
		tlsCfg, err := tlsConfig()
		if err != nil {
			return nil, err
		}
		cfg.TLS = tlsCfg
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd %s: %w", strings.Join(endpoints, ","), err)
	}
	return cli, nil
}

func tlsConfig() (*tls.Config, error) {
	if (certFile.Get() == "") != (keyFile.Get() == "") {
		return nil, errors.New("etcd TLS: etcd_tls_cert_file and etcd_tls_key_file go together")
	}
	info := transport.TLSInfo{CertFile: certFile.Get(), KeyFile: keyFile.Get(), TrustedCAFile: caFile.Get()}
	cfg, err := info.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("etcd TLS: %w", err)
	}
	return cfg, nil
}

// logEvery lets a retry loop log its failure once per interval instead of
// at every retry while etcd is down. One goroutine uses each.
type logEvery struct {
	interval time.Duration
	next     time.Time
}

func (l *logEvery) allow() bool {
	now := time.Now()
	if now.Before(l.next) {
		return false
	}
	l.next = now.Add(l.interval)
	return true
}
