package transport

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestSocketMapSharesEndpointsByGroup(t *testing.T) {
	opts := EndpointOptions{ConnType: Single}
	a := GetEndpoint("127.0.0.1:1", opts, "")
	b := GetEndpoint("127.0.0.1:1", opts, "")
	c := GetEndpoint("127.0.0.1:1", opts, "other")
	d := GetEndpoint("127.0.0.1:1", EndpointOptions{ConnType: Pooled}, "")
	assert.Same(t, a, b, "same server, type and group: shared")
	assert.NotSame(t, a, c, "another group")
	assert.NotSame(t, a, d, "another connection type")
	PutEndpoint(a)
	e := GetEndpoint("127.0.0.1:1", opts, "")
	assert.Same(t, b, e, "still referenced")
	PutEndpoint(b)
	PutEndpoint(e)
	f := GetEndpoint("127.0.0.1:1", opts, "")
	assert.NotSame(t, b, f, "the last Put closed it")
	for _, x := range []*Endpoint{c, d, f} {
		PutEndpoint(x)
	}
}

// A failed server is probed every health_check_interval and revived once
// it accepts connections again.
func TestHealthCheckRevives(t *testing.T) {
	old := HealthCheckInterval.Get()
	require.NoError(t, HealthCheckInterval.SetValue(1))
	defer HealthCheckInterval.SetValue(old)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()

	e := GetEndpoint(addr, EndpointOptions{ConnType: Single}, "hc-test")
	defer PutEndpoint(e)
	_, err = e.Acquire(100 * time.Millisecond)
	require.Error(t, err)
	e.MarkFailed("connection refused")
	assert.False(t, e.Available())

	ln, err = net.Listen("tcp", addr)
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	require.Eventually(t, e.Available, 3*time.Second, 20*time.Millisecond)
	conn, err := e.Acquire(100 * time.Millisecond)
	require.NoError(t, err)
	assert.True(t, conn.Healthy())
}

func TestParseConnType(t *testing.T) {
	for in, want := range map[string]ConnType{"": Single, "single": Single, "pooled": Pooled, "short": Short} {
		got, err := ParseConnType(in)
		require.NoError(t, err)
		assert.Equal(t, want, got)
	}
	_, err := ParseConnType("multi")
	assert.Error(t, err)
}
