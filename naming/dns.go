package naming

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

func init() {
	Register("dns", domainBuilder{})
	Register("http", domainBuilder{defaultPort: 80})
	Register("https", domainBuilder{defaultPort: 443})
}

// domainBuilder is brpc's DomainNamingService: the IPv4 addresses of a host
// name, looked up again every ns_access_interval seconds. "dns://host:port"
// needs a port; http:// and https:// default to 80 and 443 and ignore any
// path.
type domainBuilder struct {
	defaultPort int // 0: the port is required
}

func (b domainBuilder) Build(t Target, w Watcher) (NamingService, error) {
	host, port, err := b.split(t.Name)
	if err != nil {
		return nil, fmt.Errorf("naming: %q: %w", t.URL, err)
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		w.Update([]Node{{Addr: joinHostPort(ip, port)}})
		return staticService{}, nil
	}
	lookup := lookupHost
	fetch := func(ctx context.Context) ([]Node, error) {
		ips, err := resolveIPv4(ctx, lookup, host)
		if err != nil {
			return nil, err
		}
		slices.SortFunc(ips, netip.Addr.Compare)
		nodes := make([]Node, len(ips))
		for i, ip := range ips {
			nodes[i] = Node{Addr: joinHostPort(ip, port)}
		}
		return nodes, nil
	}
	return newPeriodic(t.URL, fetch, accessInterval, w), nil
}

// split takes "host[:port][/path]".
func (b domainBuilder) split(name string) (string, int, error) {
	if i := strings.IndexAny(name, "/?#"); i >= 0 {
		name = name[:i]
	}
	hasPort := strings.HasPrefix(name, "[") && strings.Contains(name, "]:") ||
		!strings.HasPrefix(name, "[") && strings.Contains(name, ":")
	if !hasPort {
		if b.defaultPort == 0 {
			return "", 0, fmt.Errorf("no port in %q", name)
		}
		host := strings.TrimSuffix(strings.TrimPrefix(name, "["), "]")
		if host == "" {
			return "", 0, errors.New("no host")
		}
		return host, b.defaultPort, nil
	}
	return splitHostPort(name)
}
