package loadtest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/testsupport/testpb"
)

func TestCapacityServerDrive(t *testing.T) {
	srv, err := StartCapacityServer(2, 20*time.Millisecond, nil)
	require.NoError(t, err)
	defer srv.Stop()
	assert.InDelta(t, 100, srv.Service.Capacity(), 1e-9)
	assert.Equal(t, "2 workers × 20ms = 100/s", srv.Service.String())

	res, err := Drive(context.Background(), DriveConfig{Addr: srv.Addr(), Loads: []Load{
		{Name: "closed", Duration: 600 * time.Millisecond, Callers: 4},
		{Name: "open", Duration: 500 * time.Millisecond, Rate: 40},
	}})
	require.NoError(t, err)
	require.Len(t, res, 2)
	// 4 callers on 2 workers: the server is saturated, and each call
	// waits for one other.
	closed := res[0]
	assert.Equal(t, "closed", closed.Name)
	assert.InDelta(t, 90, closed.Goodput(), 25)
	assert.Zero(t, closed.Rejected+closed.Failed, closed.FirstError)
	assert.GreaterOrEqual(t, closed.OKLatency(0.5), 35*time.Millisecond)
	// 40 calls/s, below the capacity: no queue (the closed-loop callers'
	// last calls end early in this load).
	open := res[1]
	assert.InDelta(t, 20, open.Started, 3)
	assert.Zero(t, open.Rejected+open.Failed, open.FirstError)
	assert.InDelta(t, 20*time.Millisecond, open.OKLatency(0.5), float64(15*time.Millisecond))
	assert.Zero(t, srv.Service.Inflight())
}

func TestCapacityServerLimited(t *testing.T) {
	srv, err := StartCapacityServer(2, 50*time.Millisecond, 2)
	require.NoError(t, err)
	defer srv.Stop()
	// 200 calls/s against 40/s: most are rejected, at once.
	res, err := Drive(context.Background(), DriveConfig{Addr: srv.Addr(), Loads: []Load{
		{Name: "overload", Duration: 400 * time.Millisecond, Rate: 200},
	}})
	require.NoError(t, err)
	o := res[0]
	assert.Positive(t, o.OK)
	assert.Greater(t, o.RejectedShare(), 0.5)
	assert.Zero(t, o.Failed, o.FirstError)
	assert.Less(t, o.RejectedLatency(0.5), 25*time.Millisecond)
	assert.GreaterOrEqual(t, o.OKLatency(0.5), 50*time.Millisecond)
}

func TestCapacityServiceClose(t *testing.T) {
	svc := NewCapacityService(1, 100*time.Millisecond)
	ended := make(chan *controller.Controller, 3)
	for range 3 {
		go func() {
			cntl := controller.New()
			req := &testpb.EchoRequest{Message: proto.String("x")}
			svc.Echo(cntl, req, &testpb.EchoResponse{}, func() { ended <- cntl })
		}()
	}
	for svc.Inflight() < 3 {
		time.Sleep(time.Millisecond)
	}
	svc.Close()
	svc.Close()
	// The two waiting for the worker fail at once, the one served ends.
	for range 2 {
		select {
		case c := <-ended:
			assert.Equal(t, controller.EINTERNAL, c.ErrorCode())
		case <-time.After(50 * time.Millisecond):
			t.Fatal("a waiting request was not failed by Close")
		}
	}
	c := <-ended
	assert.False(t, c.Failed())
	assert.Zero(t, svc.Inflight())
	assert.EqualValues(t, 3, svc.Requests())
}

func TestDriveRejectsBadLoads(t *testing.T) {
	_, err := Drive(context.Background(), DriveConfig{Addr: "127.0.0.1:1"})
	assert.Error(t, err)
	_, err = Drive(context.Background(), DriveConfig{Addr: "127.0.0.1:1", Loads: []Load{{Duration: time.Second, Rate: 1, Callers: 1}}})
	assert.Error(t, err)
	_, err = Drive(context.Background(), DriveConfig{Addr: "127.0.0.1:1", Loads: []Load{{Rate: 1}}})
	assert.Error(t, err)
}
