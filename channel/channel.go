// Package channel is gobrpc's client: a Channel sends RPCs to a server
// with brpc's ChannelOptions (timeouts, retries, connection types), and a
// per-call Controller carries the call's settings and results.
//
//	var ch channel.Channel
//	if err := ch.Init("127.0.0.1:8000", "", nil); err != nil { ... }
//	defer ch.Close()
//	stub := echopb.NewEchoServiceStub(&ch)
//	cntl := controller.New()
//	stub.Echo(cntl, &echopb.EchoRequest{Message: proto.String("hi")}, resp, nil)
package channel

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/internal/transport"
)

// Channel sends RPCs to one server. Init it once, share it between
// goroutines, Close it when done. The zero value is ready for Init.
type Channel struct {
	opts   resolved
	ep     *transport.Endpoint
	state  atomic.Int32 // channelNew, channelReady, channelClosed
	target string
}

const (
	channelNew int32 = iota
	channelReady
	channelClosed
)

var _ Caller = (*Channel)(nil)

// Init connects the channel to target. With lb == "" target is one server,
// "ip:port" or "host:port" (the host is resolved now, as brpc does).
// opts == nil means DefaultOptions. Connections are made lazily, by the
// first call.
func (ch *Channel) Init(target, lb string, opts *Options) error {
	if !ch.state.CompareAndSwap(channelNew, channelReady) {
		return errors.New("channel: Init called twice")
	}
	err := ch.init(target, lb, opts)
	if err != nil {
		ch.state.Store(channelNew)
	}
	return err
}

func (ch *Channel) init(target, lb string, opts *Options) error {
	r, err := resolve(opts)
	if err != nil {
		return err
	}
	if i := strings.Index(target, "://"); i >= 0 {
		return fmt.Errorf("channel: naming service %q is not supported yet", target[:i])
	}
	if lb != "" {
		return fmt.Errorf("channel: load balancer %q needs a naming service URL, got the single server %q", lb, target)
	}
	addr, err := resolveAddr(target)
	if err != nil {
		return err
	}
	ch.opts = r
	ch.target = target
	ch.ep = transport.NewEndpoint(addr, transport.EndpointOptions{
		ConnType:    r.connType,
		MaxBodySize: r.MaxBodySize,
	})
	return nil
}

// resolveAddr turns "host:port" into "ip:port".
func resolveAddr(target string) (string, error) {
	host, port, err := net.SplitHostPort(target)
	if err != nil {
		return "", fmt.Errorf("channel: invalid server address %q: %w", target, err)
	}
	if _, err := net.LookupPort("tcp", port); err != nil || port == "" || port == "0" {
		return "", fmt.Errorf("channel: invalid port in server address %q", target)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	if ip := net.ParseIP(host); ip != nil {
		return net.JoinHostPort(ip.String(), port), nil
	}
	ips, err := net.LookupIP(host)
	if err != nil || len(ips) == 0 {
		return "", fmt.Errorf("channel: cannot resolve %q: %v", host, err)
	}
	for _, ip := range ips { // prefer IPv4, as brpc's hostname2endpoint does
		if ip.To4() != nil {
			return net.JoinHostPort(ip.String(), port), nil
		}
	}
	return net.JoinHostPort(ips[0].String(), port), nil
}

// Options returns the options in force, defaults filled in.
func (ch *Channel) Options() Options { return ch.opts.Options }

// Close closes every connection of the channel. Calls still in flight
// fail; calls made afterwards fail with EINVAL.
func (ch *Channel) Close() error {
	if ch.state.Swap(channelClosed) != channelReady {
		return nil
	}
	ch.ep.Close()
	return nil
}

// CallMethod sends one RPC (see Caller). Generated stubs call it.
func (ch *Channel) CallMethod(md protoreflect.MethodDescriptor, cntl *controller.Controller,
	req, resp proto.Message, done func()) {
	startCall(ch, md, cntl, req, resp, done)
}

func (ch *Channel) closed() bool { return ch.state.Load() != channelReady }
