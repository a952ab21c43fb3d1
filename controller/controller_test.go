package controller_test

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gobrpc/gobrpc/controller"
)

func TestErrnoValuesAreBrpcs(t *testing.T) {
	cases := map[controller.Errno]int32{
		controller.ENOSERVICE: 1001, controller.ENOMETHOD: 1002, controller.EREQUEST: 1003,
		controller.EBACKUPREQUEST: 1007, controller.ERPCTIMEDOUT: 1008, controller.EFAILEDSOCKET: 1009,
		controller.EEOF: 1014, controller.EINTERNAL: 2001, controller.ERESPONSE: 2002,
		controller.ELOGOFF: 2003, controller.ELIMIT: 2004,
		controller.ECONNREFUSED: 111, controller.EHOSTDOWN: 112, controller.ETIMEDOUT: 110,
		controller.ECANCELED: 125, controller.ENODATA: 61, controller.EPERM: 1, controller.EINVAL: 22,
	}
	for code, want := range cases {
		assert.Equal(t, want, int32(code), code.Name())
	}
	assert.Equal(t, "ERPCTIMEDOUT", controller.ERPCTIMEDOUT.Name())
	assert.Equal(t, "RPC call is timed out", controller.ERPCTIMEDOUT.Error())
	assert.Equal(t, "E4242", controller.Errno(4242).Name())
	// brpc's berror is strerror: glibc's text, on every OS.
	assert.Equal(t, "Connection refused", controller.ECONNREFUSED.Error())
}

// The system codes are Linux's numbers whatever the OS, as brpc's are on
// the wire: each is an integer literal in errno.go, never a value of the
// running system's syscall package (on macOS syscall.ETIMEDOUT is 60).
func TestSystemCodesAreLinuxNumbersOnEveryOS(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "../errno/errno.go", nil, 0)
	require.NoError(t, err)
	want := map[string]string{"EPERM": "1", "ENOENT": "2", "EINVAL": "22", "EPIPE": "32",
		"ENODATA": "61", "ECONNRESET": "104", "ETIMEDOUT": "110", "ECONNREFUSED": "111",
		"EHOSTDOWN": "112", "ECANCELED": "125"}
	got := map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || len(vs.Names) != 1 || len(vs.Values) != 1 {
			return true
		}
		if lit, ok := vs.Values[0].(*ast.BasicLit); ok {
			got[vs.Names[0].Name] = lit.Value
		} else {
			got[vs.Names[0].Name] = "not a literal"
		}
		return true
	})
	for name, v := range want {
		assert.Equal(t, v, got[name], "%s must be Linux's number as a literal", name)
	}
}

func TestErrnoOfSystem(t *testing.T) {
	assert.Equal(t, controller.ECONNREFUSED, controller.ErrnoOfSystem(syscall.ECONNREFUSED))
	assert.Equal(t, controller.ETIMEDOUT, controller.ErrnoOfSystem(syscall.ETIMEDOUT))
	assert.Equal(t, controller.ECONNRESET, controller.ErrnoOfSystem(syscall.ECONNRESET))
	assert.Equal(t, controller.EPIPE, controller.ErrnoOfSystem(syscall.EPIPE))
	for code := range map[controller.Errno]bool{controller.ECONNRESET: true, controller.EHOSTUNREACH: true, controller.ECANCELED: true} {
		assert.NotEqual(t, "E"+strconv.Itoa(int(code)), code.Name(), "every system code has a name")
		assert.NotContains(t, code.Error(), "Unknown", "and a text")
	}
}

func TestSettingsAndReset(t *testing.T) {
	var c controller.Controller // the zero value is usable
	_, set := c.TimeoutMsSetting()
	assert.False(t, set)
	c.SetTimeoutMs(1 << 40)
	ms, set := c.TimeoutMsSetting()
	assert.True(t, set)
	assert.Equal(t, int64(0x7fffffff), ms, "clamped as brpc")
	c.SetMaxRetry(5000)
	n, _ := c.MaxRetrySetting()
	assert.Equal(t, 1000, n)
	c.SetMaxRetry(-3)
	n, _ = c.MaxRetrySetting()
	assert.Equal(t, 0, n)
	c.SetLogID(7)
	c.RequestAttachment().WriteString("abc")
	c.SetFailed(controller.EREQUEST, "bad %s", "thing")
	assert.True(t, c.Failed())
	assert.Equal(t, "[E1003]bad thing", c.ErrorText())
	assert.True(t, errors.Is(c.Err(), controller.EREQUEST))

	c.Reset()
	assert.False(t, c.Failed())
	assert.NoError(t, c.Err())
	assert.Equal(t, 0, c.RequestAttachment().Len())
	_, set = c.TimeoutMsSetting()
	assert.False(t, set)
	assert.False(t, c.HasLogID())
}

func TestSetFailedMapsUnknownToEINTERNAL(t *testing.T) {
	var c controller.Controller
	c.SetFailed(-1, "oops")
	assert.Equal(t, controller.EINTERNAL, c.ErrorCode())
	c.SetFailed(controller.ELIMIT, "again")
	assert.Equal(t, "[E2001]oops [E2004]again", c.ErrorText(), "texts accumulate as brpc's")
}

func TestHTTPStatusIsBrpcs(t *testing.T) {
	cases := map[controller.Errno]int{
		0: 200, controller.ENOSERVICE: 404, controller.ENOMETHOD: 404, controller.ERPCAUTH: 401,
		controller.EREQUEST: 400, controller.EINVAL: 400, controller.ELIMIT: 503, controller.ELOGOFF: 503,
		controller.EPERM: 403, controller.ERPCTIMEDOUT: 504, controller.ETIMEDOUT: 504, controller.EINTERNAL: 500,
		controller.ERESPONSE: 500,
	}
	for code, want := range cases {
		assert.Equal(t, want, code.HTTPStatus(), code.Name())
	}
}
