package echobench

import (
	"context"
	"errors"
	"fmt"
	"net/rpc"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/gobrpc/gobrpc/channel"
	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/example/echo/echopb"
	"github.com/gobrpc/gobrpc/tools/bench/echobenchpb"
	"github.com/gobrpc/gobrpc/tools/bench/echobenchpb/grpcpb"
)

// client is one framework's client, shared by all callers of a run: one
// gobrpc Channel, one grpc ClientConn, one net/rpc Client.
type client interface {
	// caller returns the call function of one caller: it sends payload
	// and checks the echo. Its request and reusable state are its own.
	caller(payload []byte) func() error
	close()
}

// clientFramework is how the driver runs a framework: the server role's
// -framework (or brpcServerRole: brpc's echo_server) and the client (nil
// dial: brpc's echo_client, a process of its own).
type clientFramework struct {
	server string
	dial   func(addr string, timeout time.Duration) (client, error)
	// connType is brpc's echo_client -connection_type ("": single).
	connType string
}

// needsBrpc tells whether the framework runs one of brpc's example
// programs (only with ECHOBENCH_BRPC_DIR).
func (cf clientFramework) needsBrpc() bool { return cf.server == brpcServerRole || cf.dial == nil }

var clientFrameworks = map[string]clientFramework{
	"gobrpc-single": {server: "gobrpc", dial: func(a string, t time.Duration) (client, error) { return dialGobrpc(a, "single", t) }},
	"gobrpc-pooled": {server: "gobrpc", dial: func(a string, t time.Duration) (client, error) { return dialGobrpc(a, "pooled", t) }},
	"gobrpc-ctx":    {server: "gobrpc", dial: dialGobrpcCtx},
	"grpc":          {server: "grpc", dial: dialGRPC},
	"netrpc":        {server: "netrpc", dial: dialNetRPC},
	"rawtcp":        {server: "rawtcp", dial: dialRawTCP},
	"gobrpc-brpc":   {server: brpcServerRole, dial: dialGobrpcExample},
	"brpc-brpc":     {server: brpcServerRole},
	"brpc-gobrpc":   {server: "gobrpc"},
	// gRPC: gobrpc's Channel (h2:grpc, one HTTP/2 connection) calling
	// grpc-go's server, and grpc-go's client calling gobrpc's server; each
	// compares with "grpc" (grpc-go on both sides).
	"gobrpc-grpc": {server: "grpc", dial: func(a string, t time.Duration) (client, error) { return dialGobrpcProtocol(a, "h2:grpc", "single", t) }},
	"grpc-gobrpc": {server: "gobrpc", dial: dialGRPC},
	// brpc's echo_client with -connection_type=pooled: one connection per
	// caller in flight, as gobrpc-pooled.
	"brpc-brpc-pooled": {server: brpcServerRole, connType: "pooled"},
}

// frameworkNames lists clientFrameworks in the order of the help.
var frameworkNames = []string{"gobrpc-single", "gobrpc-pooled", "gobrpc-ctx", "grpc", "gobrpc-grpc", "grpc-gobrpc", "netrpc", "rawtcp", "gobrpc-brpc", "brpc-brpc", "brpc-brpc-pooled", "brpc-gobrpc"}

var errEcho = errors.New("the response is not the request's payload")

// gobrpc: one Channel; each caller has its own Controller, request and
// response, reused call after call (Reset), as brpc's benchmarks do.
type gobrpcClient struct {
	ch   channel.Channel
	stub *echobenchpb.EchoServiceStub
}

// benchOptions are the channel options of every gobrpc client here: one
// request per call (no retry), as the other frameworks, and the run's
// timeout (none when 0).
func benchOptions(connType string, timeout time.Duration) channel.Options {
	opts := channel.DefaultOptions()
	opts.ConnectionType = connType
	opts.MaxRetry = 0
	opts.TimeoutMs = -1
	if timeout > 0 {
		opts.TimeoutMs = int32(timeout.Milliseconds())
	}
	return opts
}

func dialGobrpc(addr, connType string, timeout time.Duration) (client, error) {
	return dialGobrpcProtocol(addr, "baidu_std", connType, timeout)
}

func dialGobrpcProtocol(addr, protocol, connType string, timeout time.Duration) (client, error) {
	opts := benchOptions(connType, timeout)
	opts.Protocol = protocol
	c := &gobrpcClient{}
	if err := c.ch.Init(addr, "", &opts); err != nil {
		return nil, err
	}
	c.stub = echobenchpb.NewEchoServiceStub(&c.ch)
	return c, nil
}

func (c *gobrpcClient) caller(payload []byte) func() error {
	cntl := controller.New()
	req := &echobenchpb.EchoRequest{Message: payload}
	resp := &echobenchpb.EchoResponse{}
	return func() error {
		cntl.Reset()
		resp.Reset()
		c.stub.Echo(cntl, req, resp, nil)
		if cntl.Failed() {
			return cntl.Err()
		}
		if len(resp.Message) != len(payload) {
			return errEcho
		}
		return nil
	}
}

func (c *gobrpcClient) close() { c.ch.Close() }

// gobrpc's client against brpc's echo_server: the same Channel with a
// single connection and reused Controller, request and response as
// gobrpc-single, calling example.EchoService (the service of brpc's
// examples) with gobrpc's example/echo/echopb stub. Its messages hold the
// payload in a proto2 string where echobenchpb's hold bytes: the same
// bytes on the wire for this ASCII payload.
type gobrpcExampleClient struct {
	ch   channel.Channel
	stub *echopb.EchoServiceStub
}

func dialGobrpcExample(addr string, timeout time.Duration) (client, error) {
	opts := benchOptions("single", timeout)
	c := &gobrpcExampleClient{}
	if err := c.ch.Init(addr, "", &opts); err != nil {
		return nil, err
	}
	c.stub = echopb.NewEchoServiceStub(&c.ch)
	return c, nil
}

func (c *gobrpcExampleClient) caller(payload []byte) func() error {
	cntl := controller.New()
	req := &echopb.EchoRequest{Message: proto.String(string(payload))}
	resp := &echopb.EchoResponse{}
	return func() error {
		cntl.Reset()
		resp.Reset()
		c.stub.Echo(cntl, req, resp, nil)
		if cntl.Failed() {
			return cntl.Err()
		}
		if len(resp.GetMessage()) != len(payload) {
			return errEcho
		}
		return nil
	}
}

func (c *gobrpcExampleClient) close() { c.ch.Close() }

// gobrpc's context-first client over the same single connection: the
// generated EchoServiceClient, which allocates each response as grpc-go's
// does (what the Go face costs over the brpc stub).
type gobrpcCtxClient struct {
	ch     *channel.Channel
	client echobenchpb.EchoServiceClient
}

func dialGobrpcCtx(addr string, timeout time.Duration) (client, error) {
	opts := benchOptions("single", timeout)
	ch, err := channel.New(addr, "", &opts)
	if err != nil {
		return nil, err
	}
	return &gobrpcCtxClient{ch: ch, client: echobenchpb.NewEchoServiceClient(ch)}, nil
}

func (c *gobrpcCtxClient) caller(payload []byte) func() error {
	req := &echobenchpb.EchoRequest{Message: payload}
	ctx := context.Background()
	return func() error {
		resp, err := c.client.Echo(ctx, req)
		if err != nil {
			return err
		}
		if len(resp.Message) != len(payload) {
			return errEcho
		}
		return nil
	}
}

func (c *gobrpcCtxClient) close() { c.ch.Close() }

// grpc-go: one ClientConn (one HTTP/2 connection, the grpc-go default);
// the generated client allocates each response.
type grpcClient struct {
	conn *grpc.ClientConn
	stub grpcpb.EchoServiceClient
	wait time.Duration
}

func dialGRPC(addr string, timeout time.Duration) (client, error) {
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	return &grpcClient{conn: conn, stub: grpcpb.NewEchoServiceClient(conn), wait: timeout}, nil
}

func (c *grpcClient) caller(payload []byte) func() error {
	req := &echobenchpb.EchoRequest{Message: payload}
	return func() error {
		ctx := context.Background()
		if c.wait > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, c.wait)
			defer cancel()
		}
		resp, err := c.stub.Echo(ctx, req)
		if err != nil {
			return err
		}
		if len(resp.Message) != len(payload) {
			return errEcho
		}
		return nil
	}
}

func (c *grpcClient) close() { c.conn.Close() }

// net/rpc: one Client (one TCP connection, gob), the usual way to use it.
type netrpcClient struct {
	c    *rpc.Client
	wait time.Duration
}

func dialNetRPC(addr string, timeout time.Duration) (client, error) {
	c, err := rpc.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &netrpcClient{c: c, wait: timeout}, nil
}

func (c *netrpcClient) caller(payload []byte) func() error {
	req := &NetEchoMsg{Message: payload}
	resp := &NetEchoMsg{}
	return func() error {
		resp.Message = nil
		if c.wait <= 0 {
			if err := c.c.Call(netrpcMethod, req, resp); err != nil {
				return err
			}
		} else {
			// A late response may still be decoded into this call's
			// response after a timeout: give each call its own.
			resp := &NetEchoMsg{}
			call := c.c.Go(netrpcMethod, req, resp, make(chan *rpc.Call, 1))
			t := time.NewTimer(c.wait)
			select {
			case <-call.Done:
				t.Stop()
				if call.Error != nil {
					return call.Error
				}
			case <-t.C:
				return fmt.Errorf("net/rpc: no response in %v", c.wait)
			}
			if len(resp.Message) != len(payload) {
				return errEcho
			}
			return nil
		}
		if len(resp.Message) != len(payload) {
			return errEcho
		}
		return nil
	}
}

func (c *netrpcClient) close() { c.c.Close() }
