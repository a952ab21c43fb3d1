package grpc

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ContentType is what gobrpc sends; a server accepts any
// "application/grpc" and "application/grpc+..." (the codec after the
// plus, "proto" when absent, is protobuf's in every case gobrpc serves).
const ContentType = "application/grpc"

// IsGRPC tells a gRPC request from other HTTP/2 requests by its
// content-type.
func IsGRPC(contentType string) bool {
	rest, ok := strings.CutPrefix(contentType, ContentType)
	return ok && (rest == "" || rest[0] == '+' || rest[0] == ';')
}

// Header names of the protocol (lower case, as HTTP/2 sends them; Go's
// http.Header canonicalizes them when read).
const (
	HeaderTimeout        = "grpc-timeout"
	HeaderEncoding       = "grpc-encoding"
	HeaderAcceptEncoding = "grpc-accept-encoding"
	HeaderStatus         = "grpc-status"
	HeaderMessage        = "grpc-message"
)

// PrefixSize is the length prefix of every message: a compressed flag
// and a big-endian uint32 length.
const PrefixSize = 5

// AppendPrefix appends the prefix of a message of n bytes.
func AppendPrefix(b []byte, compressed bool, n int) []byte {
	flag := byte(0)
	if compressed {
		flag = 1
	}
	return binary.BigEndian.AppendUint32(append(b, flag), uint32(n))
}

// ErrTooLarge is returned by ReadMessage for a message longer than its
// limit (answered RESOURCE_EXHAUSTED, as grpc-go does).
var ErrTooLarge = errors.New("grpc: message larger than max")

// ReadMessage reads one length-prefixed message of at most limit bytes
// into buf (grown as needed) and reports whether it is compressed. A
// stream that ends before any byte is io.EOF; one that ends inside a
// message is io.ErrUnexpectedEOF. The length is checked before anything
// is allocated for it.
func ReadMessage(r io.Reader, buf []byte, limit int) (msg []byte, compressed bool, err error) {
	var prefix [PrefixSize]byte
	if _, err := io.ReadFull(r, prefix[:]); err != nil {
		return nil, false, err
	}
	switch prefix[0] {
	case 0:
	case 1:
		compressed = true
	default:
		return nil, false, fmt.Errorf("grpc: invalid compressed flag %d", prefix[0])
	}
	n := binary.BigEndian.Uint32(prefix[1:])
	if uint64(n) > uint64(limit) {
		return nil, compressed, fmt.Errorf("%w (%d vs. %d)", ErrTooLarge, n, limit)
	}
	if int(n) <= max(cap(buf), trustedSize) {
		if cap(buf) < int(n) {
			buf = make([]byte, n)
		}
		msg = buf[:n]
		if _, err := io.ReadFull(r, msg); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, compressed, err
		}
		return msg, compressed, nil
	}
	// A large announced size is not allocated before the bytes come: a
	// peer that announces 64 MiB and sends nothing must not cost 64 MiB.
	msg = buf[:0]
	for len(msg) < int(n) {
		if len(msg) == cap(msg) {
			msg = append(msg, make([]byte, min(max(cap(msg), trustedSize), int(n)-len(msg)))...)[:len(msg)]
		}
		got, err := r.Read(msg[len(msg):min(cap(msg), int(n))])
		msg = msg[:len(msg)+got]
		if err != nil && len(msg) < int(n) {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, compressed, err
		}
	}
	return msg, compressed, nil
}

// trustedSize is how much of an announced message length is allocated
// before its bytes arrive.
const trustedSize = 64 << 10

// EncodeTimeout writes d as grpc-timeout: at most eight digits and a
// unit, rounded up so that a server never sees less time than is left.
func EncodeTimeout(d time.Duration) string {
	if d <= 0 {
		return "1n"
	}
	const maxDigits = 99999999
	units := []struct {
		d    time.Duration
		unit string
	}{{time.Nanosecond, "n"}, {time.Microsecond, "u"}, {time.Millisecond, "m"}, {time.Second, "S"}, {time.Minute, "M"}, {time.Hour, "H"}}
	for _, u := range units {
		v := (d + u.d - 1) / u.d
		if v <= maxDigits {
			return strconv.FormatInt(int64(v), 10) + u.unit
		}
	}
	return strconv.Itoa(maxDigits) + "H"
}

// DecodeTimeout parses grpc-timeout ("100m", "5S"; 1 to 8 digits and a
// unit H, M, S, m, u or n).
func DecodeTimeout(s string) (time.Duration, error) {
	if len(s) < 2 || len(s) > 9 {
		return 0, fmt.Errorf("grpc: malformed grpc-timeout %q", s)
	}
	var unit time.Duration
	switch s[len(s)-1] {
	case 'H':
		unit = time.Hour
	case 'M':
		unit = time.Minute
	case 'S':
		unit = time.Second
	case 'm':
		unit = time.Millisecond
	case 'u':
		unit = time.Microsecond
	case 'n':
		unit = time.Nanosecond
	default:
		return 0, fmt.Errorf("grpc: malformed grpc-timeout %q", s)
	}
	v, err := strconv.ParseUint(s[:len(s)-1], 10, 64)
	if err != nil || s[0] == '+' {
		return 0, fmt.Errorf("grpc: malformed grpc-timeout %q", s)
	}
	if v > uint64(math.MaxInt64/unit) {
		return math.MaxInt64, nil
	}
	return time.Duration(v) * unit, nil
}

// EncodeMessage percent-encodes grpc-message: bytes outside printable
// ASCII and '%' itself, as the gRPC spec asks.
func EncodeMessage(msg string) string {
	clean := true
	for i := 0; i < len(msg); i++ {
		if c := msg[i]; c < ' ' || c > '~' || c == '%' {
			clean = false
			break
		}
	}
	if clean {
		return msg
	}
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(msg); i++ {
		if c := msg[i]; c < ' ' || c > '~' || c == '%' {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

// DecodeMessage undoes EncodeMessage; a malformed escape is kept as it
// is, as grpc-go does.
func DecodeMessage(msg string) string {
	if !strings.Contains(msg, "%") {
		return msg
	}
	var b strings.Builder
	for i := 0; i < len(msg); i++ {
		if msg[i] == '%' && i+2 < len(msg) {
			if v, err := strconv.ParseUint(msg[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(v))
				i += 2
				continue
			}
		}
		b.WriteByte(msg[i])
	}
	return b.String()
}

// reserved are the headers that are the protocol's own, not metadata
// (grpc-go's isReservedHeader, user-agent kept as metadata as its server
// does).
func reserved(lower string) bool {
	switch lower {
	case "content-type", "te", "grpc-message-type", "grpc-encoding", "grpc-accept-encoding",
		"grpc-message", "grpc-status", "grpc-timeout", "grpc-status-details-bin", "trailer",
		"content-length", "connection":
		return true
	}
	return strings.HasPrefix(lower, ":")
}

// MetadataFrom adds the metadata among h (request headers, or response
// headers and trailers) to fields: keys in lower case, values of "-bin"
// keys base64-decoded, repeated values joined with ", " (what HTTP does
// with repeated headers). It returns fields, made when nil and needed.
func MetadataFrom(fields map[string]string, h http.Header) map[string]string {
	for k, vs := range h {
		lower := strings.ToLower(k)
		if reserved(lower) || len(vs) == 0 {
			continue
		}
		if strings.HasSuffix(lower, "-bin") {
			dec := make([]string, 0, len(vs))
			for _, v := range vs {
				for _, part := range strings.Split(v, ",") {
					raw, err := decodeBinary(strings.TrimSpace(part))
					if err != nil {
						continue // as grpc-go: a malformed value is dropped
					}
					dec = append(dec, raw)
				}
			}
			if len(dec) == 0 {
				continue
			}
			vs = dec
		}
		if fields == nil {
			fields = make(map[string]string, len(h))
		}
		fields[lower] = strings.Join(vs, ", ")
	}
	return fields
}

func decodeBinary(v string) (string, error) {
	if len(v)%4 == 0 {
		b, err := base64.StdEncoding.DecodeString(v)
		return string(b), err
	}
	b, err := base64.RawStdEncoding.DecodeString(v)
	return string(b), err
}

// ValidKey tells whether k can be sent as metadata: lower-case letters,
// digits, '-', '_' and '.', and not one of the protocol's own headers.
func ValidKey(k string) bool {
	if k == "" || reserved(k) {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// ValidValue tells whether v can be sent as the value of a key that does
// not end in "-bin": printable ASCII only.
func ValidValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' || c > '~' {
			return false
		}
	}
	return true
}

// MetadataTo writes fields into h as metadata headers; a "-bin" key's
// value is base64-encoded. A key that is not valid metadata, or a text
// value with bytes outside printable ASCII, is skipped and returned in
// bad (HTTP/2 would refuse the whole message).
func MetadataTo(h http.Header, fields map[string]string) (bad []string) {
	for k, v := range fields {
		lower := strings.ToLower(k)
		if !ValidKey(lower) {
			bad = append(bad, k)
			continue
		}
		if strings.HasSuffix(lower, "-bin") {
			v = base64.RawStdEncoding.EncodeToString([]byte(v))
		} else if !ValidValue(v) {
			bad = append(bad, k)
			continue
		}
		h[http.CanonicalHeaderKey(lower)] = []string{v}
	}
	return bad
}
