package meta

import (
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// TestWireSchema pins every field to brpc's number, type and cardinality:
// those, not the names, are what must stay compatible with C++ brpc.
func TestWireSchema(t *testing.T) {
	type field struct {
		name string
		num  protoreflect.FieldNumber
		kind protoreflect.Kind
		card protoreflect.Cardinality
	}
	const (
		opt = protoreflect.Optional
		req = protoreflect.Required
		rep = protoreflect.Repeated
	)
	schema := map[protoreflect.Message][]field{
		(&RpcMeta{}).ProtoReflect(): {
			{"request", 1, protoreflect.MessageKind, opt},
			{"response", 2, protoreflect.MessageKind, opt},
			{"compress_type", 3, protoreflect.Int32Kind, opt},
			{"correlation_id", 4, protoreflect.Int64Kind, opt},
			{"attachment_size", 5, protoreflect.Int32Kind, opt},
			{"chunk_info", 6, protoreflect.MessageKind, opt},
			{"authentication_data", 7, protoreflect.BytesKind, opt},
			{"stream_settings", 8, protoreflect.MessageKind, opt},
			{"user_fields", 9, protoreflect.MessageKind, rep}, // map<string,string>
			{"content_type", 10, protoreflect.EnumKind, opt},
			{"checksum_type", 11, protoreflect.Int32Kind, opt},
			{"checksum_value", 12, protoreflect.BytesKind, opt},
			{"checksum_with_attachment", 13, protoreflect.BoolKind, opt},
		},
		(&RpcRequestMeta{}).ProtoReflect(): {
			{"service_name", 1, protoreflect.StringKind, req},
			{"method_name", 2, protoreflect.StringKind, req},
			{"log_id", 3, protoreflect.Int64Kind, opt},
			{"trace_id", 4, protoreflect.Int64Kind, opt},
			{"span_id", 5, protoreflect.Int64Kind, opt},
			{"parent_span_id", 6, protoreflect.Int64Kind, opt},
			{"request_id", 7, protoreflect.StringKind, opt},
			{"timeout_ms", 8, protoreflect.Int32Kind, opt},
		},
		(&RpcResponseMeta{}).ProtoReflect(): {
			{"error_code", 1, protoreflect.Int32Kind, opt},
			{"error_text", 2, protoreflect.StringKind, opt},
		},
		(&ChunkInfo{}).ProtoReflect(): {
			{"stream_id", 1, protoreflect.Int64Kind, req},
			{"chunk_id", 2, protoreflect.Int64Kind, req},
		},
		(&StreamSettings{}).ProtoReflect(): {
			{"stream_id", 1, protoreflect.Int64Kind, req},
			{"need_feedback", 2, protoreflect.BoolKind, opt},
			{"writable", 3, protoreflect.BoolKind, opt},
			{"extra_stream_ids", 4, protoreflect.Int64Kind, rep},
		},
	}
	for msg, fields := range schema {
		d := msg.Descriptor()
		if d.Syntax() != protoreflect.Proto2 {
			t.Errorf("%s: syntax %v, want proto2", d.FullName(), d.Syntax())
		}
		if d.Fields().Len() != len(fields) {
			t.Errorf("%s: %d fields, want %d", d.FullName(), d.Fields().Len(), len(fields))
		}
		for _, f := range fields {
			fd := d.Fields().ByName(protoreflect.Name(f.name))
			if fd == nil {
				t.Errorf("%s.%s missing", d.FullName(), f.name)
				continue
			}
			if fd.Number() != f.num || fd.Kind() != f.kind || fd.Cardinality() != f.card {
				t.Errorf("%s.%s = #%d %v %v, want #%d %v %v", d.FullName(), f.name,
					fd.Number(), fd.Kind(), fd.Cardinality(), f.num, f.kind, f.card)
			}
		}
	}
	uf := (&RpcMeta{}).ProtoReflect().Descriptor().Fields().ByNumber(9)
	if !uf.IsMap() || uf.MapKey().Kind() != protoreflect.StringKind || uf.MapValue().Kind() != protoreflect.StringKind {
		t.Error("user_fields must be map<string,string>")
	}
	ct := ContentType(0).Descriptor().Values()
	for i, name := range []string{"CONTENT_TYPE_PB", "CONTENT_TYPE_JSON", "CONTENT_TYPE_PROTO_JSON", "CONTENT_TYPE_PROTO_TEXT"} {
		if v := ct.ByName(protoreflect.Name(name)); v == nil || v.Number() != protoreflect.EnumNumber(i) {
			t.Errorf("ContentType %s must be %d", name, i)
		}
	}
}
