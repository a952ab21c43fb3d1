package meta

// rpc_meta.pb.go is generated with protoc (3.21.12 was used) and the
// protoc-gen-go of the protobuf version in go.mod:
//
//	go build -o /tmp/bin/protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go
//	PATH=/tmp/bin:$PATH go generate ./protocol/meta
//
// The .proto is compiled from the module root so that its registered path is
// protocol/meta/rpc_meta.proto, unlikely to clash with a user's own copy of brpc's.

//go:generate protoc --proto_path=../.. --go_out=../.. --go_opt=module=github.com/gobrpc/gobrpc protocol/meta/rpc_meta.proto
