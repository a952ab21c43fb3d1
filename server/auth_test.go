package server_test

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gobrpc/gobrpc/auth"
	"github.com/gobrpc/gobrpc/protocol/baidustd"
	"github.com/gobrpc/gobrpc/server"
	"github.com/gobrpc/gobrpc/testsupport/echotest"
)

func httpCall(t *testing.T, url, authorization string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("POST", url, bytes.NewReader([]byte(`{"message":"hi"}`)))
	require.NoError(t, err)
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// As brpc: HTTP calls and the main port's builtin pages need the
// credential in Authorization (403 without it, as brpc).
func TestHTTPNeedsTheCredential(t *testing.T) {
	srv, svc := echotest.StartServer(t, &server.Options{Auth: auth.Token("s3cret")})
	base := "http://" + srv.ListenAddress().String()
	code, body := httpCall(t, base+"/gobrpc.test.EchoService/Echo", "")
	assert.Equal(t, 403, code)
	assert.Contains(t, body, "[E1004]Fail to authenticate")
	code, _ = httpCall(t, base+"/gobrpc.test.EchoService/Echo", "wrong")
	assert.Equal(t, 403, code)
	assert.Zero(t, svc.Calls.Load())
	code, body = httpCall(t, base+"/gobrpc.test.EchoService/Echo", "s3cret")
	assert.Equal(t, 200, code, body)
	code, _ = httpCall(t, base+"/status", "")
	assert.Equal(t, 403, code)
}

// A raw baidu_std client without a credential gets ERPCAUTH for its first
// request and for the ones it pipelined after it (not an EOF it would
// retry), no handler runs, and the connection closes.
func TestBaiduStdFirstRequestNeedsTheCredential(t *testing.T) {
	srv, svc := echotest.StartServer(t, &server.Options{Auth: auth.Token("s3cret")})
	conn, err := net.Dial("tcp", srv.ListenAddress().String())
	require.NoError(t, err)
	defer conn.Close()
	for id := int64(1); id <= 3; id++ {
		m := baidustd.Meta{HasRequest: true, ServiceName: "gobrpc.test.EchoService", MethodName: "Echo", CorrelationID: id}
		frame, err := baidustd.AppendFrame(nil, &m, []byte{0x0a, 0x02, 'h', 'i'}, nil)
		require.NoError(t, err)
		_, err = conn.Write(frame)
		require.NoError(t, err)
	}
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	all, _ := io.ReadAll(conn) // until the server closes
	n, err := baidustd.Cut(all, 1<<20)
	require.NoError(t, err)
	var m baidustd.Meta
	_, _, err = baidustd.DecodeFrame(all[:n], &m)
	require.NoError(t, err)
	assert.Equal(t, int32(1004), m.ErrorCode)
	assert.Equal(t, int64(1), m.CorrelationID)
	assert.Contains(t, m.ErrorText, "Fail to authenticate")
	// The requests behind the refused one get the same answer.
	assert.Equal(t, 3*n, len(all), "every request is answered ERPCAUTH")
	assert.Zero(t, svc.Calls.Load())
}
