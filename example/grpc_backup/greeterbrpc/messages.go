// Package greeterbrpc is the gobrpc client (and server) stub of grpc-go's
// helloworld Greeter (google.golang.org/grpc/examples/helloworld), generated
// by protoc-gen-go-brpc from that module's helloworld.proto. The messages
// are grpc-go's own (package helloworld): protoc-gen-go-brpc was told (M
// option) that the .proto lives here, and the aliases below point at the
// generated messages, so the descriptor is registered once.
//
// Regenerate from a directory holding examples/helloworld/helloworld/helloworld.proto
// (copied from the grpc examples module):
//
//	protoc -I . --go-brpc_out=OUT --go-brpc_opt=module=github.com/gobrpc/gobrpc/example/grpc_backup,Mexamples/helloworld/helloworld/helloworld.proto="github.com/gobrpc/gobrpc/example/grpc_backup/greeterbrpc;greeterbrpc" examples/helloworld/helloworld/helloworld.proto
package greeterbrpc

import "google.golang.org/grpc/examples/helloworld/helloworld"

type (
	HelloRequest = helloworld.HelloRequest
	HelloReply   = helloworld.HelloReply
)

// File_examples_helloworld_helloworld_helloworld_proto is helloworld.proto's
// descriptor, as grpc-go's package registers it.
var File_examples_helloworld_helloworld_helloworld_proto = helloworld.File_examples_helloworld_helloworld_helloworld_proto
