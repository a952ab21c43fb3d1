// Package echopb holds the EchoService of brpc's echo example: the
// messages (echo.pb.go, by protoc-gen-go) and the gobrpc server
// interface, registration function and client stub (echo_brpc.pb.go, by
// protoc-gen-go-brpc).
//
// Regenerate with go generate, with protoc, protoc-gen-go at the version in
// go.mod and protoc-gen-go-brpc on PATH. The .proto path is relative to the
// module root, so the descriptor registers as example/echo/echopb/echo.proto.
package echopb

//go:generate protoc -I ../../.. --go_out=../../.. --go_opt=paths=source_relative --go-brpc_out=../../.. --go-brpc_opt=paths=source_relative example/echo/echopb/echo.proto
