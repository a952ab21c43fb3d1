package builtin

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestProtobufs(t *testing.T) {
	h := newHarness(t, Options{})
	h.srv.services = []ServiceStatus{
		echoService(t),
		{Descriptor: richProto2(t).Services().ByName("RichService")},
		{Descriptor: richProto3(t).Services().ByName("Svc3")},
	}

	// The list: services and every message and enum they reach, sorted.
	list := h.get("/protobufs", curlUA)
	assert.Equal(t, http.StatusOK, list.status)
	assert.Equal(t, "example.EchoRequest\nexample.EchoResponse\nexample.EchoService\n"+
		"rich.Color\nrich.Reply\nrich.Request\nrich.Request.Inner\nrich.Request.Result\nrich.RichService\n"+
		"rich3.Msg\nrich3.Svc3\n", list.body)

	page := h.get("/protobufs", browserUA)
	assert.Contains(t, page.body, `<a href="/protobufs/rich.Request">rich.Request</a>`)
	assert.Contains(t, page.body, "<pre>// example/echo.proto (proto2, package example)\nservice EchoService {")

	for name, want := range map[string]string{
		"example.EchoService": "// example/echo.proto (proto2, package example)\n" +
			"service EchoService {\n" +
			"  rpc Echo(.example.EchoRequest) returns (.example.EchoResponse);\n" +
			"}\n",
		"example.EchoRequest": "// example/echo.proto (proto2, package example)\n" +
			"message EchoRequest {\n" +
			"  required string message = 1;\n" +
			"}\n",
		"rich.RichService": "// rich/rich2.proto (proto2, package rich)\n" +
			"service RichService {\n" +
			"  rpc Get(.rich.Request) returns (.rich.Reply);\n" +
			"  rpc Watch(stream .rich.Request) returns (stream .rich.Reply);\n" +
			"}\n",
		"rich.Request": "// rich/rich2.proto (proto2, package rich)\n" +
			"message Request {\n" +
			"  message Inner {\n" +
			"    enum Kind {\n" +
			"      A = 0;\n" +
			"    }\n" +
			"    optional bool ok = 1;\n" +
			"  }\n" +
			"  required string name = 1;\n" +
			"  optional int32 count = 2 [default = 10];\n" +
			"  optional .rich.Color color = 3 [default = BLUE];\n" +
			"  optional double ratio = 4 [default = inf];\n" +
			"  optional bytes blob = 5 [default = \"a\\001\\\"b\"];\n" +
			"  optional .rich.Request.Inner inner = 6;\n" +
			"  repeated string tags = 7;\n" +
			"  map<string, .rich.Request.Inner> attrs = 8;\n" +
			"  repeated int32 ids = 9 [packed = true, deprecated = true];\n" +
			"  oneof value {\n" +
			"    string text = 10;\n" +
			"    uint64 number = 11;\n" +
			"  }\n" +
			"  optional string user_name = 12 [json_name = \"login\"];\n" +
			"  optional group Result = 13 {\n" +
			"    optional string url = 1;\n" +
			"  }\n" +
			"  extensions 100 to 199;\n" +
			"  extensions 1000 to max;\n" +
			"  reserved 20, 30 to 39;\n" +
			"  reserved \"old\", \"older\";\n" +
			"}\n",
		"rich.Color": "// rich/rich2.proto (proto2, package rich)\n" +
			"enum Color {\n" +
			"  RED = 1;\n" +
			"  BLUE = 2;\n" +
			"}\n",
		"rich3.Msg": "// rich/rich3.proto (proto3, package rich3)\n" +
			"message Msg {\n" +
			"  string plain = 1;\n" +
			"  optional int32 maybe = 2;\n" +
			"  map<string, int32> counts = 3;\n" +
			"  repeated int32 many = 4;\n" +
			"}\n",
	} {
		r := h.get("/protobufs/"+name, browserUA)
		assert.Equal(t, http.StatusOK, r.status, name)
		assert.Equal(t, "text/plain; charset=utf-8", r.header.Get("Content-Type"), name)
		assert.Equal(t, want, r.body, name)
	}

	r := h.get("/protobufs/rich.Nothing", curlUA)
	assert.Equal(t, http.StatusNotFound, r.status)
	assert.Equal(t, "[E1002]Fail to find any protobuf message by `rich.Nothing'", r.body)
}
