package naming

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fastInterval makes dns:// and http:// look up every d.
func fastInterval(t *testing.T, d time.Duration) {
	old := accessInterval
	accessInterval = func() time.Duration { return d }
	t.Cleanup(func() { accessInterval = old })
}

func TestDomainTargets(t *testing.T) {
	tests := []struct {
		name, url string
		want      []Node
		lookups   int // 0: an IP literal needs none
		wantErr   bool
	}{
		{"http default port", "http://svc.example", []Node{{Addr: "10.0.0.1:80"}, {Addr: "10.0.0.2:80"}}, 1, false},
		{"https default port", "https://svc.example", []Node{{Addr: "10.0.0.1:443"}, {Addr: "10.0.0.2:443"}}, 1, false},
		{"http port and path", "http://svc.example:8080/a/b?c=d", []Node{{Addr: "10.0.0.1:8080"}, {Addr: "10.0.0.2:8080"}}, 1, false},
		{"http path, no port", "http://svc.example/x", []Node{{Addr: "10.0.0.1:80"}, {Addr: "10.0.0.2:80"}}, 1, false},
		{"dns", "dns://svc.example:53", []Node{{Addr: "10.0.0.1:53"}, {Addr: "10.0.0.2:53"}}, 1, false},
		{"dns ip literal", "dns://127.0.0.1:8000", []Node{{Addr: "127.0.0.1:8000"}}, 0, false},
		{"http ip literal", "http://127.0.0.1/x", []Node{{Addr: "127.0.0.1:80"}}, 0, false},
		{"https ipv6 literal", "https://[::1]", []Node{{Addr: "[::1]:443"}}, 0, false},
		{"ipv6 literal and port", "dns://[::1]:81", []Node{{Addr: "[::1]:81"}}, 0, false},
		{"ipv6 answers ignored", "http://mixed.example", []Node{{Addr: "10.0.0.3:80"}}, 1, false},
		{"unknown host starts empty", "http://nohost.example", []Node{}, 1, false},
		{"dns needs a port", "dns://svc.example", nil, 0, true},
		{"no host", "http://", nil, 0, true},
		{"no host with port", "http://:80", nil, 0, true},
		{"bad port", "http://svc.example:0", nil, 0, true},
		{"port not a number", "https://svc.example:https", nil, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			captureLogs(t)
			dns := useFakeDNS(t)
			dns.set("svc.example", "10.0.0.2", "10.0.0.1")
			dns.set("mixed.example", "2001:db8::1", "10.0.0.3")
			if tc.wantErr {
				_, err := Start(tc.url, &recorder{})
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.url)
				return
			}
			r, _ := start(t, tc.url)
			assert.Equal(t, tc.want, r.last())
			assert.Equal(t, tc.lookups, dns.numCalls())
		})
	}
}

func TestDomainLocalhost(t *testing.T) {
	r, _ := start(t, "http://localhost:8000")
	if len(r.last()) == 0 {
		t.Skip("localhost does not resolve to IPv4 here")
	}
	assert.Contains(t, r.last(), Node{Addr: "127.0.0.1:8000"})
}

func TestDomainPeriodic(t *testing.T) {
	logs := captureLogs(t)
	fastInterval(t, 10*time.Millisecond)
	dns := useFakeDNS(t)
	dns.set("svc.example", "10.0.0.1")
	r, ns := start(t, "http://svc.example:8000")
	assert.Equal(t, []Node{{Addr: "10.0.0.1:8000"}}, r.last())

	// Re-resolved every interval.
	dns.set("svc.example", "10.0.0.2", "10.0.0.1")
	r.eventuallyLast(t, []Node{{Addr: "10.0.0.1:8000"}, {Addr: "10.0.0.2:8000"}})
	n := r.count()

	// Same set in another order: no Update.
	dns.set("svc.example", "10.0.0.1", "10.0.0.2")
	calls := dns.numCalls()
	require.Eventually(t, func() bool { return dns.numCalls() >= calls+5 }, 2*time.Second, time.Millisecond)
	assert.Equal(t, n, r.count())

	// Failures keep the old list and log once per streak.
	dns.fail("svc.example", errors.New("server misbehaving"))
	calls = dns.numCalls()
	require.Eventually(t, func() bool { return dns.numCalls() >= calls+5 }, 2*time.Second, time.Millisecond)
	assert.Equal(t, n, r.count())
	assert.Equal(t, 1, logs.count("keeping the last servers"))

	dns.set("svc.example", "10.0.0.3")
	r.eventuallyLast(t, []Node{{Addr: "10.0.0.3:8000"}})
	assert.Equal(t, 1, logs.count("lookup works again"))

	// No lookup and no Update after Close.
	ns.Close()
	calls, n = dns.numCalls(), r.count()
	dns.set("svc.example", "10.0.0.4")
	time.Sleep(50 * time.Millisecond)
	assert.Equal(t, calls, dns.numCalls())
	assert.Equal(t, n, r.count())
	ns.Close() // idempotent
}

func TestDomainFirstLookupFailsThenWorks(t *testing.T) {
	captureLogs(t)
	fastInterval(t, 10*time.Millisecond)
	dns := useFakeDNS(t)
	r, _ := start(t, "dns://late.example:9")
	assert.Equal(t, []Node{}, r.last())
	dns.set("late.example", "10.1.1.1")
	r.eventuallyLast(t, []Node{{Addr: "10.1.1.1:9"}})
}
