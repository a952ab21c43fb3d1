// Command protoc-gen-go-brpc is a protoc plugin that generates gobrpc
// service code: for each service Xxx in a .proto file, a server interface
// XxxServer, RegisterXxxServer, a client stub XxxStub and the full method
// names, in a file <name>_brpc.pb.go next to protoc-gen-go's <name>.pb.go.
//
// Install it and run it with protoc-gen-go:
//
//	go install github.com/gobrpc/gobrpc/tools/protoc-gen-go-brpc@latest
//	protoc --go_out=. --go_opt=paths=source_relative \
//		--go-brpc_out=. --go-brpc_opt=paths=source_relative x.proto
//
// Only unary methods are supported: a streaming method is an error.
package main

import (
	"flag"
	"fmt"
	"os"

	"google.golang.org/protobuf/compiler/protogen"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/pluginpb"
)

// version is the plugin's version, written in the header of every
// generated file. Bump it when the generated code changes.
const version = "v0.1.0"

func main() {
	showVersion := flag.Bool("version", false, "print the version and exit")
	flag.Parse()
	if *showVersion {
		fmt.Printf("protoc-gen-go-brpc %s\n", version)
		return
	}
	if flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "protoc-gen-go-brpc: unexpected arguments; this program is run by protoc (see --help)")
		os.Exit(2)
	}
	protogen.Options{}.Run(run)
}

// run generates the brpc code of every file protoc asked for.
func run(gen *protogen.Plugin) error {
	gen.SupportedFeatures = uint64(pluginpb.CodeGeneratorResponse_FEATURE_PROTO3_OPTIONAL) |
		uint64(pluginpb.CodeGeneratorResponse_FEATURE_SUPPORTS_EDITIONS)
	gen.SupportedEditionsMinimum = descriptorpb.Edition_EDITION_PROTO2
	gen.SupportedEditionsMaximum = descriptorpb.Edition_EDITION_2023
	for _, f := range gen.Files {
		if !f.Generate {
			continue
		}
		if err := generateFile(gen, f); err != nil {
			return err
		}
	}
	return nil
}
