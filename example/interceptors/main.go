// Command interceptors shows interceptors on both sides, in one process:
//
//   - the server logs every call (method, caller, latency, result) and
//     rejects calls without an "x-tenant" user field (brpc's user_fields, a
//     header-like value in the baidu_std meta) with EREQUEST;
//
//   - the client adds "x-tenant" to every call and logs it;
//
//   - the server authenticates connections with a shared token
//     (auth.Token, brpc's Authenticator) and handlers see who called.
//
//     go run ./example/interceptors
package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/gobrpc/gobrpc/auth"
	"github.com/gobrpc/gobrpc/channel"
	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/example/echo/echopb"
	"github.com/gobrpc/gobrpc/server"
)

type echoService struct {
	echopb.UnimplementedEchoServiceServer // methods added to the .proto later answer ENOMETHOD
}

func (echoService) Echo(cntl *controller.Controller, req *echopb.EchoRequest, resp *echopb.EchoResponse, done func()) {
	defer done()
	who := "?"
	if ac := cntl.AuthContext(); ac != nil {
		who = ac.User
	}
	resp.Message = proto.String(fmt.Sprintf("%s (tenant %s, authenticated as %s)",
		req.GetMessage(), cntl.RequestUserFields()["x-tenant"], who))
}

// logServerCalls logs each call when the handler answers.
func logServerCalls(cntl *controller.Controller, req, resp proto.Message, done func(), next server.Handler) {
	start := time.Now()
	next(cntl, req, resp, func() {
		result := "OK"
		if cntl.Failed() {
			result = cntl.ErrorText()
		}
		log.Printf("server: %s from %v: %s in %v", cntl.Method(), cntl.RemoteSide(), result, time.Since(start))
		done()
	})
}

// requireTenant rejects a call without the x-tenant user field, as brpc's
// Interceptor::Accept would.
func requireTenant(cntl *controller.Controller, req, resp proto.Message, done func(), next server.Handler) {
	if cntl.RequestUserFields()["x-tenant"] == "" {
		cntl.SetFailed(controller.EREQUEST, "Reject by Interceptor: no x-tenant")
		done()
		return
	}
	next(cntl, req, resp, done)
}

// addTenant is a client interceptor: every call carries x-tenant.
func addTenant(tenant string) channel.Interceptor {
	return func(ctx context.Context, md protoreflect.MethodDescriptor, cntl *controller.Controller,
		req, resp proto.Message, invoke channel.Invoker) error {
		cntl.RequestUserFields()["x-tenant"] = tenant
		err := invoke(ctx, md, cntl, req, resp)
		log.Printf("client: %s as tenant %s: %v", md.Name(), tenant, err)
		return err
	}
}

func main() {
	srv := server.New(&server.Options{
		Auth:         auth.Token("s3cret"),
		Interceptors: []server.Interceptor{logServerCalls, requireTenant},
	})
	if err := echopb.RegisterEchoServiceServer(srv, echoService{}); err != nil {
		log.Fatal(err)
	}
	if err := srv.Start("127.0.0.1:0"); err != nil {
		log.Fatal(err)
	}
	defer func() { srv.Stop(); srv.Join() }()
	addr := srv.ListenAddress().String()

	newClient := func(mutate func(*channel.Options)) echopb.EchoServiceClient {
		opts := channel.DefaultOptions()
		opts.Auth = auth.Token("s3cret")
		mutate(&opts)
		ch, err := channel.New(addr, "", &opts)
		if err != nil {
			log.Fatal(err)
		}
		return echopb.NewEchoServiceClient(ch)
	}
	tenant := newClient(func(o *channel.Options) { o.Interceptors = []channel.Interceptor{addTenant("acme")} })
	anonymous := newClient(func(o *channel.Options) { o.ConnectionGroup = "anonymous" })
	intruder := newClient(func(o *channel.Options) { o.Auth = auth.Token("guess"); o.ConnectionGroup = "intruder" })

	ctx := context.Background()
	for _, c := range []struct {
		name   string
		client echopb.EchoServiceClient
	}{{"with x-tenant", tenant}, {"without x-tenant", anonymous}, {"wrong token", intruder}} {
		resp, err := c.client.Echo(ctx, &echopb.EchoRequest{Message: proto.String("hello")})
		if err != nil {
			fmt.Printf("%-17s -> error: %v\n", c.name, err)
			continue
		}
		fmt.Printf("%-17s -> %s\n", c.name, resp.GetMessage())
	}
}
