// Package testpb holds the EchoService that gobrpc's own tests, harnesses
// and benchmarks serve and call (package gobrpc.test on the wire): the
// messages (echo.pb.go, by protoc-gen-go) and the gobrpc stubs
// (echo_brpc.pb.go, by protoc-gen-go-brpc).
//
// Regenerate with go generate, with protoc, protoc-gen-go at the version in
// go.mod and protoc-gen-go-brpc on PATH. The .proto path is relative to the
// module root, so the descriptor registers as testsupport/testpb/echo.proto.
package testpb

//go:generate protoc -I ../.. --go_out=../.. --go_opt=paths=source_relative --go-brpc_out=../.. --go-brpc_opt=paths=source_relative testsupport/testpb/echo.proto
