package grpcgo

import (
	"context"

	"google.golang.org/grpc"

	"github.com/gobrpc/gobrpc/testsupport/testpb"
)

// EchoFullMethod is the method every test calls.
const EchoFullMethod = "/gobrpc.test.EchoService/Echo"

// EchoHandler is a grpc-go implementation of the echo method.
type EchoHandler func(ctx context.Context, req *testpb.EchoRequest) (*testpb.EchoResponse, error)

// RegisterEcho registers h on a grpc-go server as gobrpc.test.EchoService.
func RegisterEcho(s *grpc.Server, h EchoHandler) {
	s.RegisterService(&grpc.ServiceDesc{
		ServiceName: "gobrpc.test.EchoService",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Echo",
			Handler: func(_ any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
				req := new(testpb.EchoRequest)
				if err := dec(req); err != nil {
					return nil, err
				}
				if ic == nil {
					return h(ctx, req)
				}
				return ic(ctx, req, &grpc.UnaryServerInfo{FullMethod: EchoFullMethod}, func(ctx context.Context, r any) (any, error) {
					return h(ctx, r.(*testpb.EchoRequest))
				})
			},
		}},
		Metadata: "echo.proto",
	}, nil)
}

// Echo calls the echo method over a grpc-go connection.
func Echo(ctx context.Context, cc grpc.ClientConnInterface, req *testpb.EchoRequest, opts ...grpc.CallOption) (*testpb.EchoResponse, error) {
	resp := new(testpb.EchoResponse)
	if err := cc.Invoke(ctx, EchoFullMethod, req, resp, opts...); err != nil {
		return nil, err
	}
	return resp, nil
}
