package backuppb_test

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/gobrpc/gobrpc/example/backup_request/backuppb"
)

// index is proto2 required field 1, varint, as in brpc's echo.proto of
// example/backup_request_c++.
func TestWireFormat(t *testing.T) {
	if _, err := proto.Marshal(&backuppb.EchoRequest{}); err == nil {
		t.Error("an EchoRequest without index serialized")
	}
	b, err := proto.Marshal(&backuppb.EchoRequest{Index: proto.Int32(3)})
	if err != nil {
		t.Fatal(err)
	}
	if want := []byte{0x08, 0x03}; !bytes.Equal(b, want) {
		t.Errorf("EchoRequest{index: 3} = %x, want %x", b, want)
	}
	var resp backuppb.EchoResponse
	if err := proto.Unmarshal([]byte{0x08, 0x07}, &resp); err != nil || resp.GetIndex() != 7 {
		t.Errorf("EchoResponse from 0807 = %v, %v; want index 7", &resp, err)
	}
}

// The names are brpc's, so brpc's backup_request client and server
// interoperate with ours.
func TestNames(t *testing.T) {
	if got := backuppb.EchoService_ServiceName; got != "example.EchoService" {
		t.Errorf("service name %q, want example.EchoService", got)
	}
	if got := (&backuppb.EchoRequest{}).ProtoReflect().Descriptor().FullName(); got != "example.EchoRequest" {
		t.Errorf("request name %q, want example.EchoRequest", got)
	}
}
