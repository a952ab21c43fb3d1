package channel_test

import (
	"context"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/testsupport/echotest"
	"github.com/gobrpc/gobrpc/testsupport/testpb"
)

// One round trip over loopback, client and server in this process, with a
// 16-byte message. Allocations count both sides.
func BenchmarkEchoSerial(b *testing.B) {
	srv, _ := echotest.StartServer(b, nil)
	stub := newChannel(b, srv.ListenAddress().String(), nil)
	req := &testpb.EchoRequest{Message: proto.String("0123456789abcdef")}
	resp := &testpb.EchoResponse{}
	cntl := controller.New()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		cntl.Reset()
		resp.Reset()
		stub.Echo(cntl, req, resp, nil)
		if cntl.Failed() {
			b.Fatal(cntl.ErrorText())
		}
	}
}

func BenchmarkEchoParallel(b *testing.B) {
	srv, _ := echotest.StartServer(b, nil)
	stub := newChannel(b, srv.ListenAddress().String(), nil)
	b.ReportAllocs()
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req := &testpb.EchoRequest{Message: proto.String("0123456789abcdef")}
		resp := &testpb.EchoResponse{}
		cntl := controller.New()
		for pb.Next() {
			cntl.Reset()
			resp.Reset()
			stub.Echo(cntl, req, resp, nil)
			if cntl.Failed() {
				b.Fatal(cntl.ErrorText())
			}
		}
	})
}

// The same round trip through the context-first client, which allocates
// the response it returns (the stub above reuses one).
func BenchmarkEchoCtxSerial(b *testing.B) {
	srv, _ := echotest.StartServer(b, nil)
	client := newClient(b, srv.ListenAddress().String(), nil)
	req := &testpb.EchoRequest{Message: proto.String("0123456789abcdef")}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := client.Echo(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEchoCtxParallel(b *testing.B) {
	srv, _ := echotest.StartServer(b, nil)
	client := newClient(b, srv.ListenAddress().String(), nil)
	b.ReportAllocs()
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req := &testpb.EchoRequest{Message: proto.String("0123456789abcdef")}
		ctx := context.Background()
		for pb.Next() {
			if _, err := client.Echo(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	})
}
