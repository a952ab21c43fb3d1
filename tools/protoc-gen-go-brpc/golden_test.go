package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strings"
	"testing"

	"google.golang.org/protobuf/compiler/protogen"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/pluginpb"
)

// These tests run the generator in-process on descriptors built here: no
// protoc needed.

var emptyProto = protodesc.ToFileDescriptorProto(emptypb.File_google_protobuf_empty_proto)

// echoFile is brpc's echo.proto plus a second method taking an Empty, with a
// comment on Echo.
func echoFile() *descriptorpb.FileDescriptorProto {
	msg := func(name string) *descriptorpb.DescriptorProto {
		return &descriptorpb.DescriptorProto{
			Name: proto.String(name),
			Field: []*descriptorpb.FieldDescriptorProto{{
				Name:     proto.String("message"),
				JsonName: proto.String("message"),
				Number:   proto.Int32(1),
				Label:    descriptorpb.FieldDescriptorProto_LABEL_REQUIRED.Enum(),
				Type:     descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum(),
			}},
		}
	}
	return &descriptorpb.FileDescriptorProto{
		Name:        proto.String("golden/echo.proto"),
		Package:     proto.String("example"),
		Dependency:  []string{"google/protobuf/empty.proto"},
		Syntax:      proto.String("proto2"),
		Options:     &descriptorpb.FileOptions{GoPackage: proto.String("example.com/golden;goldenpb")},
		MessageType: []*descriptorpb.DescriptorProto{msg("EchoRequest"), msg("EchoResponse")},
		Service: []*descriptorpb.ServiceDescriptorProto{{
			Name: proto.String("EchoService"),
			Method: []*descriptorpb.MethodDescriptorProto{
				{Name: proto.String("Echo"), InputType: proto.String(".example.EchoRequest"), OutputType: proto.String(".example.EchoResponse")},
				{Name: proto.String("Ping"), InputType: proto.String(".google.protobuf.Empty"), OutputType: proto.String(".google.protobuf.Empty")},
			},
		}},
		SourceCodeInfo: &descriptorpb.SourceCodeInfo{Location: []*descriptorpb.SourceCodeInfo_Location{{
			Path:            []int32{6, 0, 2, 0}, // service 0, method 0
			Span:            []int32{10, 2, 50},
			LeadingComments: proto.String(" Echo sends the message back.\n"),
		}}},
	}
}

// generate runs the plugin on files (the last one is the one to generate)
// and returns the generated files by name, or run's error.
func generate(t *testing.T, files ...*descriptorpb.FileDescriptorProto) (map[string]string, error) {
	t.Helper()
	req := &pluginpb.CodeGeneratorRequest{
		FileToGenerate:  []string{files[len(files)-1].GetName()},
		Parameter:       proto.String("paths=source_relative"),
		ProtoFile:       files,
		CompilerVersion: &pluginpb.Version{Major: proto.Int32(3), Minor: proto.Int32(21), Patch: proto.Int32(12)},
	}
	gen, err := protogen.Options{}.New(req)
	if err != nil {
		t.Fatalf("protogen: %v", err)
	}
	if err := run(gen); err != nil {
		return nil, err
	}
	resp := gen.Response()
	if resp.Error != nil {
		t.Fatalf("response error: %s", resp.GetError())
	}
	out := map[string]string{}
	for _, f := range resp.File {
		out[f.GetName()] = f.GetContent()
	}
	return out, nil
}

func TestGenerateEcho(t *testing.T) {
	files, err := generate(t, emptyProto, echoFile())
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 1 {
		t.Fatalf("generated %d files, want golden/echo_brpc.pb.go only", len(files))
	}
	src, ok := files["golden/echo_brpc.pb.go"]
	if !ok {
		t.Fatalf("generated %v, want golden/echo_brpc.pb.go (paths=source_relative)", files)
	}

	f, err := parser.ParseFile(token.NewFileSet(), "echo_brpc.pb.go", src, parser.ParseComments)
	if err != nil {
		t.Fatalf("the generated code does not parse: %v\n%s", err, src)
	}
	if f.Name.Name != "goldenpb" {
		t.Errorf("package %s, want goldenpb", f.Name.Name)
	}
	decls := map[string]bool{}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			name := d.Name.Name
			if d.Recv != nil {
				recv := d.Recv.List[0].Type
				if star, ok := recv.(*ast.StarExpr); ok {
					recv = star.X
				}
				name = "(" + recv.(*ast.Ident).Name + ")." + name
			}
			decls[name] = true
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					decls[s.Name.Name] = true
				case *ast.ValueSpec:
					for _, n := range s.Names {
						decls[n.Name] = true
					}
				}
			}
		}
	}
	for _, want := range []string{
		"EchoService_ServiceName", "EchoService_Echo_FullMethodName", "EchoService_Ping_FullMethodName",
		"EchoServiceServer", "RegisterEchoServiceServer",
		"EchoServiceStub", "NewEchoServiceStub", "(EchoServiceStub).Echo", "(EchoServiceStub).Ping",
		"UnimplementedEchoServiceServer", "(UnimplementedEchoServiceServer).Echo", "(UnimplementedEchoServiceServer).Ping",
		"EchoServiceClient", "NewEchoServiceClient", "(echoServiceClient).Echo", "(echoServiceClient).Ping",
	} {
		if !decls[want] {
			t.Errorf("no declaration of %s", want)
		}
	}

	for _, want := range []string{
		"// Code generated by protoc-gen-go-brpc. DO NOT EDIT.\n",
		"// \tprotoc-gen-go-brpc " + version + "\n",
		"// \tprotoc             v3.21.12\n",
		"// source: golden/echo.proto\n",
		`EchoService_ServiceName         = "example.EchoService"`,
		`EchoService_Echo_FullMethodName = "example.EchoService.Echo"`,
		`emptypb "google.golang.org/protobuf/types/known/emptypb"`,
		"\t// Echo sends the message back.\n\tEcho(cntl *controller.Controller, req *EchoRequest, resp *EchoResponse, done func())\n",
		"\tPing(cntl *controller.Controller, req *emptypb.Empty, resp *emptypb.Empty, done func())\n",
		"func RegisterEchoServiceServer(srv rpc.Registrar, impl EchoServiceServer) error {",
		"if impl == nil {",
		`Descriptor: File_golden_echo_proto.Services().ByName("EchoService"),`,
		"impl.Echo(cntl, req.(*EchoRequest), resp.(*EchoResponse), done)",
		"impl.Ping(cntl, req.(*emptypb.Empty), resp.(*emptypb.Empty), done)",
		"func NewEchoServiceStub(c rpc.Caller) *EchoServiceStub {",
		"func NewEchoServiceClient(c rpc.Caller) EchoServiceClient {",
		"Echo(ctx context.Context, req *EchoRequest, opts ...rpc.CallOption) (*EchoResponse, error)",
		"if err := rpc.Invoke(ctx, c.caller, c.mdEcho, req, resp, opts...); err != nil {",
		`cntl.SetFailed(controller.ENOMETHOD, "Method Echo of example.EchoService is not implemented")`,
		`mdEcho: sd.Methods().ByName("Echo"),`,
		"// Echo sends the message back.\nfunc (s *EchoServiceStub) Echo(cntl *controller.Controller, req *EchoRequest, resp *EchoResponse, done func()) {",
		"s.caller.CallMethod(s.mdEcho, cntl, req, resp, done)",
		"// Ping calls example.EchoService.Ping.\nfunc (s *EchoServiceStub) Ping(",
	} {
		if !strings.Contains(src, want) {
			t.Errorf("the generated code lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("generated:\n%s", src)
	}
}

func TestGenerateNoService(t *testing.T) {
	file := echoFile()
	file.Service, file.SourceCodeInfo = nil, nil
	files, err := generate(t, emptyProto, file)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 0 {
		t.Errorf("a file without services generated %v", files)
	}
}

func TestGenerateStreamingFails(t *testing.T) {
	for _, tc := range []struct {
		name           string
		client, server bool
		want           string
	}{
		{"client", true, false, "client streaming"},
		{"server", false, true, "server streaming"},
		{"bidirectional", true, true, "bidirectional streaming"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := echoFile()
			m := file.Service[0].Method[1]
			m.ClientStreaming, m.ServerStreaming = proto.Bool(tc.client), proto.Bool(tc.server)
			files, err := generate(t, emptyProto, file)
			if err == nil {
				t.Fatalf("no error; generated %v", files)
			}
			for _, want := range []string{"golden/echo.proto", "example.EchoService.Ping", tc.want, "only unary"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
		})
	}
}

func TestNormaliseIgnoresProtocVersion(t *testing.T) {
	header := func(protoc string) []byte {
		return []byte("// versions:\n// \tprotoc-gen-go v1.36.12\n// \tprotoc        " + protoc + "\n// source: x.proto\n")
	}
	if a, b := normalise(header("v3.21.12")), normalise(header("v5.29.3")); string(a) != string(b) {
		t.Errorf("protoc versions still differ after normalise:\n%s\n%s", a, b)
	}
	if a, b := normalise(header("v3.21.12")), normalise([]byte(strings.Replace(string(header("v3.21.12")), "v1.36.12", "v1.36.11", 1))); string(a) == string(b) {
		t.Error("normalise hid a protoc-gen-go version change")
	}
}
