package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"

	"github.com/bufbuild/protocompile"
	"github.com/bufbuild/protocompile/linker"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// findMethod compiles protoFile and returns the method named
// "package.Service.Method". As in brpc, the file's directory is the first
// import root, then each of includes; google/protobuf/*.proto are built
// in. Nothing is registered in protoregistry.GlobalFiles: the descriptors
// live only in what this returns, so a .proto that a linked-in generated
// package also registers (example/echo/echopb) does not conflict.
func findMethod(protoFile string, includes []string, fullMethod string) (protoreflect.MethodDescriptor, error) {
	if protoFile == "" {
		return nil, errors.New("-proto is required")
	}
	dot := strings.LastIndexByte(fullMethod, '.')
	if dot <= 0 || dot == len(fullMethod)-1 {
		return nil, fmt.Errorf("-method must be in form of: package.service.method, got %q", fullMethod)
	}
	service, method := fullMethod[:dot], fullMethod[dot+1:]

	dir, name := filepath.Split(protoFile)
	if dir == "" {
		dir = "."
	}
	roots := []string{dir}
	for _, inc := range includes {
		if inc = strings.TrimSpace(inc); inc != "" {
			roots = append(roots, inc)
		}
	}
	c := protocompile.Compiler{
		Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{ImportPaths: roots}),
	}
	files, err := c.Compile(context.Background(), name)
	if err != nil {
		return nil, fmt.Errorf("fail to import %s: %w", protoFile, err)
	}
	d, err := linker.ResolverFromFile(files[0]).FindDescriptorByName(protoreflect.FullName(service))
	if err != nil {
		return nil, fmt.Errorf("fail to find service %s in %s or its imports", service, protoFile)
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return nil, fmt.Errorf("%s in %s is not a service", service, protoFile)
	}
	md := sd.Methods().ByName(protoreflect.Name(method))
	if md == nil {
		return nil, fmt.Errorf("fail to find method=%s.%s", service, method)
	}
	if md.IsStreamingClient() || md.IsStreamingServer() {
		return nil, fmt.Errorf("method %s is streaming; rpc_press sends unary calls", fullMethod)
	}
	return md, nil
}

// loadRequests reads the requests: input is a file of concatenated JSON
// objects when a file of that name exists, otherwise the JSON text itself.
// An object protojson rejects is logged and skipped, as brpc does; no
// request at all is an error.
func loadRequests(input string, desc protoreflect.MessageDescriptor) ([]proto.Message, error) {
	if input == "" {
		return nil, errors.New("-input is required")
	}
	data := []byte(input)
	if st, err := os.Stat(input); err == nil && !st.IsDir() {
		if data, err = os.ReadFile(input); err != nil {
			return nil, err
		}
	}
	objects, tail := splitJSON(data)
	if tail != nil {
		log.Printf("WARNING: ignored an unterminated JSON object at the end of -input: %.80q", tail)
	}
	var msgs []proto.Message
	for i, obj := range objects {
		m := dynamicpb.NewMessage(desc)
		if err := protojson.Unmarshal(obj, m); err != nil {
			log.Printf("WARNING: fail to convert JSON object #%d to %s: %v, json=`%.200s'", i+1, desc.FullName(), err, obj)
			continue
		}
		msgs = append(msgs, m)
	}
	if len(msgs) == 0 {
		return nil, errors.New("fail to load requests: -input holds no valid " + string(desc.FullName()))
	}
	return msgs, nil
}
