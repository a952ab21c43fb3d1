package grpc

import (
	"bytes"
	"errors"
	"io"
	"math"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gobrpc/gobrpc/controller"
)

func TestTimeoutRoundTrip(t *testing.T) {
	for _, d := range []time.Duration{1, 999, time.Microsecond, 1500 * time.Microsecond, time.Second, 100 * time.Millisecond, 99999999 * time.Nanosecond, 100000000 * time.Nanosecond, time.Hour, 1000 * time.Hour} {
		enc := EncodeTimeout(d)
		assert.LessOrEqual(t, len(enc), 9, enc)
		got, err := DecodeTimeout(enc)
		require.NoError(t, err, enc)
		assert.GreaterOrEqual(t, got, d, "never less time than is left: %s", enc)
	}
	assert.Equal(t, "1n", EncodeTimeout(0))
	assert.Equal(t, "1n", EncodeTimeout(-time.Second))
	d, err := DecodeTimeout("99999999H")
	require.NoError(t, err)
	assert.Equal(t, time.Duration(math.MaxInt64), d) // beyond Duration: no deadline to speak of
	for _, bad := range []string{"", "1", "m", "-1m", "+1m", "1x", "123456789m", "1.5S", " 1S", "1 S", "0x1S"} {
		_, err := DecodeTimeout(bad)
		assert.Error(t, err, "%q", bad)
	}
}

func TestMessagePercentEncoding(t *testing.T) {
	for _, s := range []string{"", "plain", "100%", "ünïcode", "tab\tnew\nline", "%zz", "\x00\xff"} {
		assert.Equal(t, s, DecodeMessage(EncodeMessage(s)), "%q", s)
	}
	assert.Equal(t, "a%25b%C3%BC", EncodeMessage("a%bü"))
	assert.Equal(t, "%zz%", DecodeMessage("%zz%")) // malformed escapes are kept
}

func TestReadMessage(t *testing.T) {
	var b []byte
	b = AppendPrefix(b, false, 3)
	b = append(b, "abc"...)
	msg, compressed, err := ReadMessage(bytes.NewReader(b), nil, 10)
	require.NoError(t, err)
	assert.False(t, compressed)
	assert.Equal(t, "abc", string(msg))

	_, _, err = ReadMessage(bytes.NewReader(b), nil, 2)
	assert.ErrorIs(t, err, ErrTooLarge)
	huge := AppendPrefix(nil, false, math.MaxUint32) // a 4 GiB claim, nothing behind it
	_, _, err = ReadMessage(bytes.NewReader(huge), nil, 64<<20)
	assert.ErrorIs(t, err, ErrTooLarge)
	_, _, err = ReadMessage(bytes.NewReader(b[:6]), nil, 10)
	assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
	_, _, err = ReadMessage(bytes.NewReader(b[:2]), nil, 10)
	assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
	_, _, err = ReadMessage(bytes.NewReader(nil), nil, 10)
	assert.ErrorIs(t, err, io.EOF)
	bad := append([]byte{2}, b[1:]...)
	_, _, err = ReadMessage(bytes.NewReader(bad), nil, 10)
	assert.Error(t, err)
	assert.False(t, errors.Is(err, ErrTooLarge))
}

func TestMetadata(t *testing.T) {
	h := http.Header{}
	bad := MetadataTo(h, map[string]string{"x-a": "1", "X-Upper": "2", "x-raw-bin": "\x00\x01", "bad key": "v", "x-bad-value": "\n", "grpc-status": "0", "content-type": "x"})
	assert.ElementsMatch(t, []string{"bad key", "x-bad-value", "grpc-status", "content-type"}, bad)
	h.Add("Grpc-Timeout", "1S")
	h.Add("X-Multi", "a")
	h.Add("X-Multi", "b")
	h.Add("X-Junk-Bin", "!!!")
	got := MetadataFrom(nil, h)
	assert.Equal(t, map[string]string{"x-a": "1", "x-upper": "2", "x-raw-bin": "\x00\x01", "x-multi": "a, b"}, got)
	assert.Nil(t, MetadataFrom(nil, http.Header{"Content-Type": {"application/grpc"}}))
}

func TestIsGRPC(t *testing.T) {
	for ct, want := range map[string]bool{"application/grpc": true, "application/grpc+proto": true, "application/grpc;charset=x": true,
		"application/grpcx": false, "application/json": false, "": false} {
		assert.Equal(t, want, IsGRPC(ct), ct)
	}
}

func TestStatusMapping(t *testing.T) {
	// brpc's ErrorCodeToGrpcStatus, and back where brpc's tables agree.
	for e, c := range map[controller.Errno]Code{0: OK, controller.ENOMETHOD: Unimplemented, controller.ENOSERVICE: Unimplemented,
		controller.ERPCAUTH: Unauthenticated, controller.EREQUEST: InvalidArgument, controller.EINVAL: InvalidArgument,
		controller.ELIMIT: ResourceExhausted, controller.ELOGOFF: Unavailable, controller.EPERM: PermissionDenied,
		controller.ERPCTIMEDOUT: DeadlineExceeded, controller.ETIMEDOUT: Internal, controller.ECANCELED: Canceled,
		controller.EINTERNAL: Internal, controller.ERESPONSE: Internal} {
		assert.Equal(t, c, FromErrno(e), e.Name())
	}
	for c := OK; c <= Unauthenticated; c++ {
		e := ToErrno(c)
		if c != OK {
			assert.NotZero(t, e, c.String())
		}
	}
	assert.Equal(t, controller.ELOGOFF, ToErrno(Unavailable))
	assert.Equal(t, controller.EINTERNAL, ToErrno(Code(99)))
	assert.Equal(t, "CODE(99)", Code(99).String())

	cntl := controller.New()
	SetStatus(cntl, NotFound, "no")
	assert.Equal(t, controller.EINTERNAL, cntl.ErrorCode())
	assert.Equal(t, NotFound, StatusOf(cntl))
	cntl.Reset()
	assert.Equal(t, OK, StatusOf(cntl))
	cntl.SetFailed(controller.ELIMIT, "x")
	assert.Equal(t, ResourceExhausted, StatusOf(cntl))
}

func TestReadMessageLarge(t *testing.T) {
	payload := bytes.Repeat([]byte("0123456789"), 100000) // 1 MB, over trustedSize
	b := append(AppendPrefix(nil, true, len(payload)), payload...)
	msg, compressed, err := ReadMessage(io.MultiReader(bytes.NewReader(b[:100]), bytes.NewReader(b[100:])), nil, 2<<20)
	require.NoError(t, err)
	assert.True(t, compressed)
	assert.Equal(t, payload, msg)
	_, _, err = ReadMessage(bytes.NewReader(b[:len(b)-1]), nil, 2<<20)
	assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
	// An announced 60 MiB with 10 bytes behind it allocates about trustedSize.
	claim := append(AppendPrefix(nil, false, 60<<20), "0123456789"...)
	allocs := testing.AllocsPerRun(5, func() { ReadMessage(bytes.NewReader(claim), nil, 64<<20) })
	assert.Less(t, allocs, 10.0)
	var ms runtimeMem
	before := ms.alloc()
	ReadMessage(bytes.NewReader(claim), nil, 64<<20)
	assert.Less(t, ms.alloc()-before, uint64(1<<20), "allocated for a claim with nothing behind it")
}

type runtimeMem struct{}

func (runtimeMem) alloc() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.TotalAlloc
}
