// Package grpcpb holds the grpc-go client and server of the EchoService in
// ../echo.proto (echo_grpc.pb.go, by protoc-gen-go-grpc v1.6.2). Its
// messages are those of package echobenchpb, the ones gobrpc uses:
// protoc-gen-go-grpc is told (M option) that echo.proto lives in this
// package, and messages.go makes EchoRequest and EchoResponse aliases of
// echobenchpb's types, so the protobuf descriptor is registered once.
//
// Regenerate with go generate ./echobenchpb/... from tools/bench.
package grpcpb

//go:generate protoc -I ../.. --go-grpc_out=../.. --go-grpc_opt=module=github.com/gobrpc/gobrpc/tools/bench,Mechobenchpb/echo.proto=github.com/gobrpc/gobrpc/tools/bench/echobenchpb/grpcpb;grpcpb echobenchpb/echo.proto
