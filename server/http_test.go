package server_test

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/gobrpc/gobrpc/bvar"
	"github.com/gobrpc/gobrpc/server"
	"github.com/gobrpc/gobrpc/testsupport/echotest"
	"github.com/gobrpc/gobrpc/testsupport/testpb"
)

func post(t *testing.T, url, contentType string, body []byte) (int, string, http.Header) {
	t.Helper()
	resp, err := http.Post(url, contentType, bytes.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b), resp.Header
}

func TestHTTPJSONAndProtoCalls(t *testing.T) {
	srv, svc := echotest.StartServer(t, nil)
	base := "http://" + srv.ListenAddress().String()

	code, body, hdr := post(t, base+"/gobrpc.test.EchoService/Echo", "application/json", []byte(`{"message":"hi"}`))
	assert.Equal(t, 200, code, body)
	assert.JSONEq(t, `{"message":"hi"}`, body)
	assert.Contains(t, hdr.Get("Content-Type"), "json")

	code, body, _ = post(t, base+"/EchoService/Echo", "", []byte(`{"message":"short name"}`))
	assert.Equal(t, 200, code, body)
	assert.JSONEq(t, `{"message":"short name"}`, body)

	pb, err := proto.Marshal(&testpb.EchoRequest{Message: proto.String("binary")})
	require.NoError(t, err)
	code, body, hdr = post(t, base+"/gobrpc.test.EchoService/Echo", "application/proto", pb)
	assert.Equal(t, 200, code)
	assert.Equal(t, "application/proto", hdr.Get("Content-Type"))
	var resp testpb.EchoResponse
	require.NoError(t, proto.Unmarshal([]byte(body), &resp))
	assert.Equal(t, "binary", resp.GetMessage())
	assert.Equal(t, int64(3), svc.Calls.Load())

	// The method's bvars, named as brpc names them.
	port := srv.ListenAddress().(*net.TCPAddr).Port
	v, ok := bvar.Describe("rpc_server_" + strconv.Itoa(port) + "_gobrpc_test_echo_service_echo_count")
	require.True(t, ok)
	assert.Equal(t, "3", v)
}

func TestHTTPStatusMapping(t *testing.T) {
	srv, _ := echotest.StartServer(t, nil)
	base := "http://" + srv.ListenAddress().String()
	cases := []struct {
		name, path, body string
		status           int
		text             string
	}{
		{"unknown method", "/gobrpc.test.EchoService/Nope", `{}`, 404, "[E1002]Fail to find method=gobrpc.test.EchoService/Nope"},
		{"unknown service", "/Nope/Echo", `{}`, 404, "[E1001]Fail to find service=Nope"},
		{"bad path", "/a/b/c", `{}`, 404, "[E1002]"},
		{"bad json", "/gobrpc.test.EchoService/Echo", `{"message":`, 400, "[E1003]"},
		{"missing required field", "/gobrpc.test.EchoService/Echo", `{}`, 400, "[E1003]"},
		{"ELIMIT", "/gobrpc.test.EchoService/Echo", `{"message":"fail:ELIMIT"}`, 503, "[E2004]"},
		{"ELOGOFF", "/gobrpc.test.EchoService/Echo", `{"message":"fail:ELOGOFF"}`, 503, "[E2003]"},
		{"EREQUEST", "/gobrpc.test.EchoService/Echo", `{"message":"fail:EREQUEST"}`, 400, "[E1003]"},
		{"EINTERNAL", "/gobrpc.test.EchoService/Echo", `{"message":"fail:EINTERNAL"}`, 500, "[E2001]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, body, _ := post(t, base+tc.path, "application/json", []byte(tc.body))
			assert.Equal(t, tc.status, code, body)
			assert.Contains(t, body, tc.text)
		})
	}
}

func TestHTTPBodyLimit(t *testing.T) {
	srv, svc := echotest.StartServer(t, &server.Options{MaxBodySize: 1024})
	base := "http://" + srv.ListenAddress().String()
	big := `{"message":"` + strings.Repeat("x", 4096) + `"}`
	code, _, _ := post(t, base+"/gobrpc.test.EchoService/Echo", "application/json", []byte(big))
	assert.Equal(t, http.StatusRequestEntityTooLarge, code)
	assert.Zero(t, svc.Calls.Load())
	// Others keep being served.
	code, _, _ = post(t, base+"/gobrpc.test.EchoService/Echo", "application/json", []byte(`{"message":"ok"}`))
	assert.Equal(t, 200, code)
}

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func TestInternalPort(t *testing.T) {
	srv, _ := echotest.StartServer(t, &server.Options{InternalPort: freePort(t)})
	main := "http://" + srv.ListenAddress().String()
	internal := "http://" + srv.InternalAddress().String()

	resp, err := http.Get(main + "/vars")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusForbidden, resp.StatusCode, "builtin pages only on the internal port")

	resp, err = http.Get(internal + "/health")
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, "OK", strings.TrimSpace(string(b)))

	resp, err = http.Get(internal + "/flags/max_body_size?setvalue=1024")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusForbidden, resp.StatusCode, "max_body_size is not reloadable")

	code, body, _ := post(t, main+"/gobrpc.test.EchoService/Echo", "application/json", []byte(`{"message":"hi"}`))
	assert.Equal(t, 200, code, body)
}

// Builtin pages are served on the main port without an internal port,
// and are never limited.
func TestBuiltinPagesOnMainPort(t *testing.T) {
	srv, _ := echotest.StartServer(t, nil)
	for _, page := range []string{"/health", "/vars", "/status", "/flags", "/brpc_metrics", "/version", "/connections", "/protobufs", "/"} {
		resp, err := http.Get("http://" + srv.ListenAddress().String() + page)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, 200, resp.StatusCode, page)
	}
}
