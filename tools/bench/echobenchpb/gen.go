// Package echobenchpb holds the echo service of cmd/echobench: the
// messages (echo.pb.go, by protoc-gen-go) and the gobrpc server interface,
// registration function and client stub (echo_brpc.pb.go, by
// protoc-gen-go-brpc). The grpc-go stubs of the same echo.proto are in
// package grpcpb below: both stub generators name the server interface
// EchoServiceServer, so they cannot share one Go package.
//
// Regenerate with go generate ./echobenchpb/... from tools/bench, with
// protoc, protoc-gen-go at the version in go.mod, protoc-gen-go-brpc (go
// build ./tools/protoc-gen-go-brpc at the repository root) and
// protoc-gen-go-grpc v1.6.2 on PATH. The .proto path is relative to
// tools/bench, so the descriptor registers as echobenchpb/echo.proto
// (proto package benchpb, apart from the examples' package example).
package echobenchpb

//go:generate protoc -I .. --go_out=.. --go_opt=paths=source_relative --go-brpc_out=.. --go-brpc_opt=paths=source_relative echobenchpb/echo.proto
