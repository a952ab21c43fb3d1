package builtin

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

// Descriptors built in the test: package server imports this one, so the
// generated echopb (which imports server) cannot be used here.

type fdp = descriptorpb.FieldDescriptorProto

func field(name string, num int32, label descriptorpb.FieldDescriptorProto_Label, typ descriptorpb.FieldDescriptorProto_Type, typeName string) *fdp {
	f := &fdp{Name: proto.String(name), Number: proto.Int32(num), Label: label.Enum(), Type: typ.Enum()}
	if typeName != "" {
		f.TypeName = proto.String(typeName)
	}
	return f
}

const (
	optional = descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL
	required = descriptorpb.FieldDescriptorProto_LABEL_REQUIRED
	repeated = descriptorpb.FieldDescriptorProto_LABEL_REPEATED

	tString  = descriptorpb.FieldDescriptorProto_TYPE_STRING
	tInt32   = descriptorpb.FieldDescriptorProto_TYPE_INT32
	tUint64  = descriptorpb.FieldDescriptorProto_TYPE_UINT64
	tDouble  = descriptorpb.FieldDescriptorProto_TYPE_DOUBLE
	tBytes   = descriptorpb.FieldDescriptorProto_TYPE_BYTES
	tBool    = descriptorpb.FieldDescriptorProto_TYPE_BOOL
	tMessage = descriptorpb.FieldDescriptorProto_TYPE_MESSAGE
	tEnum    = descriptorpb.FieldDescriptorProto_TYPE_ENUM
	tGroup   = descriptorpb.FieldDescriptorProto_TYPE_GROUP
)

// echoFile is brpc's example/echo.proto.
func echoFile(t *testing.T) protoreflect.FileDescriptor {
	return newFile(t, &descriptorpb.FileDescriptorProto{
		Name: proto.String("example/echo.proto"), Package: proto.String("example"), Syntax: proto.String("proto2"),
		MessageType: []*descriptorpb.DescriptorProto{
			{Name: proto.String("EchoRequest"), Field: []*fdp{field("message", 1, required, tString, "")}},
			{Name: proto.String("EchoResponse"), Field: []*fdp{field("message", 1, required, tString, "")}},
		},
		Service: []*descriptorpb.ServiceDescriptorProto{{
			Name: proto.String("EchoService"),
			Method: []*descriptorpb.MethodDescriptorProto{{
				Name: proto.String("Echo"), InputType: proto.String(".example.EchoRequest"), OutputType: proto.String(".example.EchoResponse"),
			}},
		}},
	})
}

func newFile(t *testing.T, p *descriptorpb.FileDescriptorProto) protoreflect.FileDescriptor {
	t.Helper()
	fd, err := protodesc.NewFile(p, new(protoregistry.Files))
	require.NoError(t, err)
	return fd
}

// richProto2 has most of what a proto2 message can hold.
func richProto2(t *testing.T) protoreflect.FileDescriptor {
	withDefault := func(f *fdp, def string) *fdp { f.DefaultValue = proto.String(def); return f }
	inOneof := func(f *fdp, i int32) *fdp { f.OneofIndex = proto.Int32(i); return f }
	packed := field("ids", 9, repeated, tInt32, "")
	packed.Options = &descriptorpb.FieldOptions{Packed: proto.Bool(true), Deprecated: proto.Bool(true)}
	jsonNamed := field("user_name", 12, optional, tString, "")
	jsonNamed.JsonName = proto.String("login")
	return newFile(t, &descriptorpb.FileDescriptorProto{
		Name: proto.String("rich/rich2.proto"), Package: proto.String("rich"), Syntax: proto.String("proto2"),
		EnumType: []*descriptorpb.EnumDescriptorProto{{
			Name: proto.String("Color"),
			Value: []*descriptorpb.EnumValueDescriptorProto{
				{Name: proto.String("RED"), Number: proto.Int32(1)}, {Name: proto.String("BLUE"), Number: proto.Int32(2)},
			},
		}},
		MessageType: []*descriptorpb.DescriptorProto{
			{
				Name: proto.String("Request"),
				Field: []*fdp{
					field("name", 1, required, tString, ""),
					withDefault(field("count", 2, optional, tInt32, ""), "10"),
					withDefault(field("color", 3, optional, tEnum, ".rich.Color"), "BLUE"),
					withDefault(field("ratio", 4, optional, tDouble, ""), "inf"),
					withDefault(field("blob", 5, optional, tBytes, ""), `a\001\"b`),
					field("inner", 6, optional, tMessage, ".rich.Request.Inner"),
					field("tags", 7, repeated, tString, ""),
					field("attrs", 8, repeated, tMessage, ".rich.Request.AttrsEntry"),
					packed,
					inOneof(field("text", 10, optional, tString, ""), 0),
					inOneof(field("number", 11, optional, tUint64, ""), 0),
					jsonNamed,
					field("result", 13, optional, tGroup, ".rich.Request.Result"),
				},
				NestedType: []*descriptorpb.DescriptorProto{
					{Name: proto.String("Inner"), Field: []*fdp{field("ok", 1, optional, tBool, "")},
						EnumType: []*descriptorpb.EnumDescriptorProto{{Name: proto.String("Kind"),
							Value: []*descriptorpb.EnumValueDescriptorProto{{Name: proto.String("A"), Number: proto.Int32(0)}}}}},
					{Name: proto.String("AttrsEntry"), Options: &descriptorpb.MessageOptions{MapEntry: proto.Bool(true)},
						Field: []*fdp{field("key", 1, optional, tString, ""), field("value", 2, optional, tMessage, ".rich.Request.Inner")}},
					{Name: proto.String("Result"), Field: []*fdp{field("url", 1, optional, tString, "")}},
				},
				OneofDecl:      []*descriptorpb.OneofDescriptorProto{{Name: proto.String("value")}},
				ExtensionRange: []*descriptorpb.DescriptorProto_ExtensionRange{{Start: proto.Int32(100), End: proto.Int32(200)}, {Start: proto.Int32(1000), End: proto.Int32(536870912)}},
				ReservedRange:  []*descriptorpb.DescriptorProto_ReservedRange{{Start: proto.Int32(20), End: proto.Int32(21)}, {Start: proto.Int32(30), End: proto.Int32(40)}},
				ReservedName:   []string{"old", "older"},
			},
			{Name: proto.String("Reply"), Field: []*fdp{field("color", 1, repeated, tEnum, ".rich.Color")}},
		},
		Service: []*descriptorpb.ServiceDescriptorProto{{
			Name: proto.String("RichService"),
			Method: []*descriptorpb.MethodDescriptorProto{
				{Name: proto.String("Get"), InputType: proto.String(".rich.Request"), OutputType: proto.String(".rich.Reply")},
				{Name: proto.String("Watch"), InputType: proto.String(".rich.Request"), OutputType: proto.String(".rich.Reply"),
					ClientStreaming: proto.Bool(true), ServerStreaming: proto.Bool(true)},
			},
		}},
	})
}

// richProto3 has proto3's implicit and explicit ("optional") presence and a
// map of scalars.
func richProto3(t *testing.T) protoreflect.FileDescriptor {
	opt := field("maybe", 2, optional, tInt32, "")
	opt.Proto3Optional = proto.Bool(true)
	opt.OneofIndex = proto.Int32(0)
	return newFile(t, &descriptorpb.FileDescriptorProto{
		Name: proto.String("rich/rich3.proto"), Package: proto.String("rich3"), Syntax: proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{{
			Name: proto.String("Msg"),
			Field: []*fdp{
				field("plain", 1, optional, tString, ""),
				opt,
				field("counts", 3, repeated, tMessage, ".rich3.Msg.CountsEntry"),
				field("many", 4, repeated, tInt32, ""),
			},
			NestedType: []*descriptorpb.DescriptorProto{{Name: proto.String("CountsEntry"), Options: &descriptorpb.MessageOptions{MapEntry: proto.Bool(true)},
				Field: []*fdp{field("key", 1, optional, tString, ""), field("value", 2, optional, tInt32, "")}}},
			OneofDecl: []*descriptorpb.OneofDescriptorProto{{Name: proto.String("_maybe")}},
		}},
		Service: []*descriptorpb.ServiceDescriptorProto{{
			Name:   proto.String("Svc3"),
			Method: []*descriptorpb.MethodDescriptorProto{{Name: proto.String("Do"), InputType: proto.String(".rich3.Msg"), OutputType: proto.String(".rich3.Msg")}},
		}},
	})
}
