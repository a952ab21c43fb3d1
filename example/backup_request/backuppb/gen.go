// Package backuppb holds the EchoService of brpc's backup_request example
// (example/backup_request_c++/echo.proto): the messages (backup.pb.go, by
// protoc-gen-go) and the gobrpc server interface, registration function and
// client stub (backup_brpc.pb.go, by protoc-gen-go-brpc).
//
// Its protobuf full names (example.EchoService, example.EchoRequest,
// example.EchoResponse) are the same as those of
// github.com/gobrpc/gobrpc/example/echo/echopb, as in brpc, so that each
// interoperates with brpc's example of the same name. The two packages must
// never be linked into one binary: protobuf-go panics on conflicting
// registrations. Do not import both anywhere.
//
// Regenerate with go generate, with protoc, protoc-gen-go at the version in
// go.mod and protoc-gen-go-brpc on PATH. The .proto path is relative to the
// module root, so the descriptor registers as
// example/backup_request/backuppb/backup.proto.
package backuppb

//go:generate protoc -I ../../.. --go_out=../../.. --go_opt=paths=source_relative --go-brpc_out=../../.. --go-brpc_opt=paths=source_relative example/backup_request/backuppb/backup.proto
