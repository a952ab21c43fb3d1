package naming

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// lookupHost resolves host names, as net.Resolver.LookupHost does. Builders
// capture it when they build, so tests can fake DNS without racing with
// running naming services.
var lookupHost = net.DefaultResolver.LookupHost

type lookupFunc func(ctx context.Context, host string) ([]string, error)

func isSpace(c byte) bool {
	switch c {
	case ' ', '\t', '\n', '\v', '\f', '\r': // C's isspace, as brpc uses
		return true
	}
	return false
}

// splitServerAndTag is brpc's SplitIntoServerAndTag: leading blanks are
// skipped, the address is the following run of non-blanks, and the tag is
// the rest up to a '#', trimmed. ok is false for blank and comment lines.
func splitServerAndTag(line string) (addr, tag string, ok bool) {
	i := 0
	for i < len(line) && isSpace(line[i]) {
		i++
	}
	if i == len(line) || line[i] == '#' {
		return "", "", false
	}
	start := i
	for i < len(line) && !isSpace(line[i]) {
		i++
	}
	addr, rest := line[start:i], line[i:]
	if j := strings.IndexByte(rest, '#'); j >= 0 {
		rest = rest[:j]
	}
	b, e := 0, len(rest)
	for b < e && isSpace(rest[b]) {
		b++
	}
	for e > b && isSpace(rest[e-1]) {
		e--
	}
	return addr, rest[b:e], true
}

// ParseNode parses one "addr [tag]" entry of list:// or file://, as brpc
// does: addr is "ip:port" or "host:port" (a host name is resolved now, to
// its first IPv4 address), the tag is what follows up to a '#', with
// surrounding blanks removed. The port must be in 1..65535.
func ParseNode(entry string) (Node, error) {
	n, err := parseNode(context.Background(), lookupHost, entry)
	if err != nil {
		return Node{}, fmt.Errorf("naming: %w", err)
	}
	return n, nil
}

func parseNode(ctx context.Context, lookup lookupFunc, entry string) (Node, error) {
	addr, tag, ok := splitServerAndTag(entry)
	if !ok {
		return Node{}, fmt.Errorf("no address in %q", entry)
	}
	host, port, err := splitHostPort(addr)
	if err != nil {
		return Node{}, err
	}
	ips, err := resolveIPv4(ctx, lookup, host)
	if err != nil {
		return Node{}, err
	}
	return Node{Addr: joinHostPort(ips[0], port), Tag: tag}, nil
}

func splitHostPort(addr string) (host string, port int, err error) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("bad address %q: %w", addr, err)
	}
	if h == "" {
		return "", 0, fmt.Errorf("no host in %q", addr)
	}
	n, err := parsePort(p)
	if err != nil {
		return "", 0, fmt.Errorf("bad address %q: %w", addr, err)
	}
	return h, n, nil
}

func parsePort(s string) (int, error) {
	// Atoi alone would accept "+80".
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, fmt.Errorf("bad port %q", s)
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("port %q out of 1..65535", s)
	}
	return n, nil
}

func joinHostPort(ip netip.Addr, port int) string {
	return netip.AddrPortFrom(ip, uint16(port)).String()
}

// resolveIPv4 returns host itself when it is an IP literal (of any family),
// else its IPv4 addresses in resolver order: brpc looks up A records only
// unless -dns_support_ipv6 is set.
func resolveIPv4(ctx context.Context, lookup lookupFunc, host string) ([]netip.Addr, error) {
	if ip, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{ip}, nil
	}
	addrs, err := lookup(ctx, host)
	if err != nil {
		return nil, fmt.Errorf("cannot resolve %q: %w", host, err)
	}
	var out []netip.Addr
	for _, a := range addrs {
		ip, err := netip.ParseAddr(a)
		if err != nil {
			continue
		}
		if ip = ip.Unmap(); ip.Is4() {
			out = append(out, ip)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%q has no IPv4 address", host)
	}
	return out, nil
}

// parseEntries parses list:// entries or file:// lines. A bad entry costs
// one log line, not the whole list, as in brpc.
func parseEntries(ctx context.Context, lookup lookupFunc, url string, entries []string) []Node {
	nodes := make([]Node, 0, len(entries))
	for _, e := range entries {
		if _, _, ok := splitServerAndTag(e); !ok {
			continue
		}
		n, err := parseNode(ctx, lookup, e)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			slog.Warn("gobrpc: naming: skipped an entry", "url", url, "entry", strings.TrimSpace(e), "err", err)
			continue
		}
		nodes = append(nodes, n)
	}
	return Dedupe(nodes)
}

// Dedupe returns nodes without repeated (Addr, Tag) pairs, in the order
// first seen; the same address with another tag stays. The result is a new
// slice, never nil.
func Dedupe(nodes []Node) []Node {
	out := make([]Node, 0, len(nodes))
	seen := make(map[Node]struct{}, len(nodes))
	for _, n := range nodes {
		if _, dup := seen[n]; dup {
			continue
		}
		seen[n] = struct{}{}
		out = append(out, n)
	}
	return out
}

// notifier calls Update with the first list and then only with lists that
// differ as sets, so reordered DNS answers or an unchanged file are silent.
type notifier struct {
	w       Watcher
	started bool
	last    []Node // sorted
}

func (n *notifier) deliver(nodes []Node) {
	nodes = Dedupe(nodes)
	sorted := sortedNodes(nodes)
	if n.started && slices.Equal(sorted, n.last) {
		return
	}
	n.started, n.last = true, sorted
	n.w.Update(nodes)
}

// staticService is what list:// (and an IP-literal dns://) returns: there
// is nothing to stop.
type staticService struct{}

func (staticService) Close() {}

func sortedNodes(nodes []Node) []Node {
	s := slices.Clone(nodes)
	slices.SortFunc(s, func(a, b Node) int {
		return cmp.Or(cmp.Compare(a.Addr, b.Addr), cmp.Compare(a.Tag, b.Tag))
	})
	return s
}
