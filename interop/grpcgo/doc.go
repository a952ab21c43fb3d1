// Package grpcgo checks gobrpc's gRPC (h2:grpc) against grpc-go, in both
// directions: grpc-go clients calling a gobrpc server, and gobrpc
// channels calling grpc-go servers left as they are. It is a module of its
// own so that gobrpc itself never depends on grpc-go.
//
// The grpc-go side uses a hand-written grpc.ServiceDesc for
// gobrpc.test.EchoService (the messages are testpb's): what
// protoc-gen-go-grpc would generate, without a second plugin to install.
package grpcgo
