package baidustd

import (
	"bytes"
	"encoding/binary"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// frameWith builds a frame around raw meta and payload bytes, header sizes
// computed unless overridden (-1 keeps the computed value).
func frameWith(meta, payload []byte, bodySize, metaSize int64) []byte {
	if bodySize < 0 {
		bodySize = int64(len(meta) + len(payload))
	}
	if metaSize < 0 {
		metaSize = int64(len(meta))
	}
	b := []byte(magic)
	b = binary.BigEndian.AppendUint32(b, uint32(bodySize))
	b = binary.BigEndian.AppendUint32(b, uint32(metaSize))
	b = append(b, meta...)
	return append(b, payload...)
}

func TestCutErrors(t *testing.T) {
	huge := frameWith(nil, nil, DefaultMaxBodySize+1, 0)
	tests := []struct {
		name    string
		buf     []byte
		max     int
		wantLen int
		want    error
	}{
		{"empty", nil, 0, 0, ErrNotEnoughData},
		{"P", []byte("P"), 0, 0, ErrNotEnoughData},
		{"PRP", []byte("PRP"), 0, 0, ErrNotEnoughData},
		{"X: not a prefix", []byte("X"), 0, 0, ErrBadMagic},
		{"PX: not a prefix", []byte("PX"), 0, 0, ErrBadMagic},
		{"HTTP", []byte("GET / HTTP/1.1\r\n\r\n"), 0, 0, ErrBadMagic},
		{"HULU", []byte("HULU\x00\x00\x00\x00\x00\x00\x00\x00"), 0, 0, ErrBadMagic},
		{"STRM", []byte("STRM\x00\x00\x00\x00\x00\x00\x00\x00"), 0, 0, ErrBadMagic},
		{"lower case", []byte("prpc\x00\x00\x00\x00\x00\x00\x00\x00"), 0, 0, ErrBadMagic},
		{"PRPC only", []byte("PRPC"), 0, 0, ErrNotEnoughData},
		{"header short", []byte("PRPC\x00\x00\x00"), 0, 0, ErrNotEnoughData},
		{"body pending", frameWith([]byte{0x20, 0x01}, []byte("abc"), 10, -1), 0, 22, ErrNotEnoughData},
		{"too big default", huge, 0, 0, ErrTooBig},
		{"too big custom", frameWith(nil, make([]byte, 11), -1, 0), 10, 0, ErrTooBig},
		{"max body is inclusive", frameWith(nil, make([]byte, 10), -1, 0), 10, 22, nil},
		{"body 4GiB-1", frameWith(nil, nil, 1<<32-1, 0), 1 << 40, 1<<32 - 1 + 12, ErrNotEnoughData},
		{"meta > body", frameWith([]byte{0x20, 0x01}, nil, 1, 2), 0, 0, ErrMetaTooBig},
		{"meta > body before body arrives", frameWith(nil, nil, 100, 101), 0, 0, ErrMetaTooBig},
		{"empty body", frameWith(nil, nil, -1, -1), 0, 12, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, err := Cut(tc.buf, tc.max)
			if !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
				t.Fatalf("Cut err = %v, want %v", err, tc.want)
			}
			if n != tc.wantLen {
				t.Fatalf("Cut len = %d, want %d", n, tc.wantLen)
			}
		})
	}
}

func TestTruncatedEverywhere(t *testing.T) {
	for _, name := range goldenNames(t) {
		frame := readGolden(t, name)
		for i := range len(frame) {
			n, err := Cut(frame[:i], DefaultMaxBodySize)
			if !errors.Is(err, ErrNotEnoughData) {
				t.Fatalf("%s[:%d]: Cut = %d, %v", name, i, n, err)
			}
			if i >= HeaderSize && n != len(frame) || i < HeaderSize && n != 0 {
				t.Fatalf("%s[:%d]: Cut announced %d", name, i, n)
			}
			var m Meta
			if _, _, err := DecodeFrame(frame[:i], &m); !errors.Is(err, ErrNotEnoughData) {
				t.Fatalf("%s[:%d]: DecodeFrame = %v", name, i, err)
			}
		}
		// A meta cut short inside a consistent frame is a bad meta.
		metaSize := int(binary.BigEndian.Uint32(frame[8:]))
		for i := range metaSize {
			meta := frame[HeaderSize : HeaderSize+i]
			var m Meta
			_, _, err := DecodeFrame(frameWith(meta, nil, -1, -1), &m)
			// Cut at a field boundary it may parse, and then miss the attachment.
			if err != nil && !oneOf(err, ErrBadMeta, ErrBadAttachmentSize) {
				t.Fatalf("%s meta[:%d]: %v", name, i, err)
			}
		}
	}
}

func TestDecodeFrameErrors(t *testing.T) {
	reqMeta := func(extra ...byte) []byte {
		m := Meta{HasRequest: true, ServiceName: "s.S", MethodName: "M", CorrelationID: 1}
		return append(AppendMeta(nil, &m), extra...)
	}
	attSize := func(v int32) []byte { // field 5
		return protowire.AppendVarint([]byte{5 << 3}, uint64(int64(v)))
	}
	tests := []struct {
		name  string
		frame []byte
		want  error
		text  string
	}{
		{"bad magic", []byte("HTTP/1.1 200 OK\r\n"), ErrBadMagic, ""},
		{"meta > body", frameWith(reqMeta(), nil, 2, 3), ErrMetaTooBig, ""},
		{"trailing bytes", append(frameWith(reqMeta(), []byte("msg"), -1, -1), 'x'), ErrFrameLength, ""},
		{"attachment > payload", frameWith(reqMeta(attSize(4)...), []byte("abc"), -1, -1), ErrBadAttachmentSize,
			"attachment_size=4, payload has 3 bytes"},
		{"negative attachment", frameWith(reqMeta(attSize(-1)...), []byte("abc"), -1, -1), ErrBadAttachmentSize, ""},
		{"garbage meta", frameWith([]byte{0xff, 0xff, 0xff}, nil, -1, -1), ErrBadMeta, ""},
		{"truncated varint", frameWith([]byte{0x20, 0x80}, nil, -1, -1), ErrBadMeta, ""},
		{"length past meta", frameWith([]byte{0x0a, 0x05, 0x0a}, []byte("payload"), -1, -1), ErrBadMeta, ""},
		{"field 0", frameWith([]byte{0x00, 0x01}, nil, -1, -1), ErrBadMeta, ""},
		{"field number too big", frameWith(protowire.AppendTag(nil, protowire.MaxValidNumber+1, protowire.VarintType), nil, -1, -1),
			ErrBadMeta, "invalid field number"},
		{"stray end group", frameWith([]byte{0x0c}, nil, -1, -1), ErrBadMeta, ""},
		{"wire type 7", frameWith([]byte{0x0f}, nil, -1, -1), ErrBadMeta, ""},
		{"request without method", frameWith([]byte{0x0a, 0x05, 0x0a, 0x03, 's', '.', 'S'}, nil, -1, -1), ErrBadMeta,
			"missing required field request.method_name"},
		{"request without service", frameWith([]byte{0x0a, 0x03, 0x12, 0x01, 'M'}, nil, -1, -1), ErrBadMeta,
			"missing required field request.service_name"},
		{"empty request meta", frameWith([]byte{0x0a, 0x00}, nil, -1, -1), ErrBadMeta, "service_name"},
		{"chunk_info without chunk_id", frameWith(reqMeta(0x32, 0x02, 0x08, 0x01), nil, -1, -1), ErrBadMeta, "chunk_info"},
		{"stream_settings without stream_id", frameWith(reqMeta(0x42, 0x02, 0x10, 0x01), nil, -1, -1), ErrBadMeta, "stream_settings"},
		{"bad user field entry", frameWith(reqMeta(0x4a, 0x02, 0x0a, 0x05), nil, -1, -1), ErrBadMeta, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var m Meta
			_, _, err := DecodeFrame(tc.frame, &m)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("err %q does not say %q", err, tc.text)
			}
		})
	}
}

func TestDecodeMetaLenient(t *testing.T) {
	// What protobuf accepts, we accept: unknown fields of every wire type,
	// known fields with an unexpected wire type (skipped), repeated
	// sub-messages (merged), repeated scalars (last wins).
	b := []byte{
		0x0a, 0x05, 0x0a, 0x03, 's', '.', 'S', // request{service_name}
		0x0a, 0x03, 0x12, 0x01, 'M', // request{method_name}: merged
		0x20, 0x05, 0x20, 0x07, // correlation_id 5 then 7
		0x1d, 1, 2, 3, 4, // field 3 as fixed32: unknown
		0xa1, 0x06, 1, 2, 3, 4, 5, 6, 7, 8, // field 100 fixed64
		0xa3, 0x06, 0x08, 0x01, 0xa4, 0x06, // field 100 group
		0x50, 0x09, // content_type 9: not a ContentType, dropped like proto2
		0x4a, 0x04, 0x12, 0x02, 'v', 'v', // user field without key: ""
		0x4a, 0x07, 0x0a, 0x01, 'k', 0x12, 0x02, 'v', 'w', // k=vw
	}
	var m Meta
	if err := DecodeMeta(b, &m); err != nil {
		t.Fatal(err)
	}
	want := Meta{HasRequest: true, ServiceName: "s.S", MethodName: "M", CorrelationID: 7, Sparse: true,
		UserFields: map[string]string{"": "vv", "k": "vw"}}
	if !metaEqual(&m, &want) {
		t.Fatalf("%s", metaDiff(&m, &want))
	}
}

func TestAppendFrameErrors(t *testing.T) {
	var m Meta
	if _, err := AppendFrameHead(nil, &m, 1<<32, 0); !errors.Is(err, ErrTooBig) {
		t.Fatalf("4 GiB message: %v", err)
	}
	if _, err := AppendFrameHead(nil, &m, 0, 1<<31); !errors.Is(err, ErrTooBig) {
		t.Fatalf("2 GiB attachment: %v", err)
	}
	if _, err := AppendFrameHead(nil, &m, -1, 0); !errors.Is(err, ErrTooBig) {
		t.Fatalf("negative length: %v", err)
	}
}

func TestChecksumErrors(t *testing.T) {
	msg, att := []byte("message"), []byte("attachment")
	var m Meta
	m.ChecksumWithAttachment = true
	m.SetChecksum(msg, att)
	if err := VerifyChecksum(&m, msg, att); err != nil {
		t.Fatal(err)
	}
	if err := VerifyChecksum(&m, msg, []byte("attachmenT")); !errors.Is(err, ErrChecksumMismatch) {
		t.Fatalf("attachment covered: %v", err)
	}
	for _, v := range [][]byte{nil, {}, {1, 2, 3}, {1, 2, 3, 4, 5}} {
		m.ChecksumValue = v
		if err := VerifyChecksum(&m, msg, att); !errors.Is(err, ErrChecksumMismatch) {
			t.Fatalf("value %x: %v", v, err)
		}
	}
	m.ChecksumType = 0 // none: the value is ignored (brpc echoes the request's)
	if err := VerifyChecksum(&m, msg, att); err != nil {
		t.Fatal(err)
	}
	m.ChecksumType = 77 // unknown: not verified, as brpc
	if err := VerifyChecksum(&m, msg, att); err != nil {
		t.Fatal(err)
	}
}

func TestCompressErrors(t *testing.T) {
	plain := echoMessage(compressedText)
	for _, typ := range []int32{CompressLZ4, 5, -1, 1 << 20} {
		_, err := Compress(nil, typ, plain)
		if !errors.Is(err, ErrUnsupportedCompressType) || !strings.Contains(err.Error(), "unsupported compress type "+itoa(typ)) {
			t.Fatalf("Compress(%d) = %v", typ, err)
		}
		_, err = Decompress(nil, typ, plain)
		if !errors.Is(err, ErrUnsupportedCompressType) || !strings.Contains(err.Error(), "unsupported compress type "+itoa(typ)) {
			t.Fatalf("Decompress(%d) = %v", typ, err)
		}
	}
	for _, typ := range []int32{CompressSnappy, CompressGzip, CompressZlib} {
		good, _ := Compress(nil, typ, plain)
		corrupt := map[string][]byte{
			"empty":     {},
			"truncated": good[:len(good)-1],
			"half":      good[:len(good)/2],
			"header":    flip(good, 1),
			"middle":    flip(good, len(good)/2),
			"last byte": flip(good, len(good)-1), // gzip/zlib: the checksum
			"trailing":  append(bytes.Clone(good), 0x01),
		}
		if typ == CompressSnappy { // no checksum: a changed literal byte goes unnoticed
			delete(corrupt, "last byte")
			delete(corrupt, "middle")
		}
		for name, c := range corrupt {
			out, err := Decompress([]byte("keep"), typ, c)
			if !errors.Is(err, ErrBadCompressedData) {
				t.Errorf("type %d %s: err = %v", typ, name, err)
			}
			if string(out) != "keep" {
				t.Errorf("type %d %s: dst = %q", typ, name, out)
			}
		}
		// The limit is inclusive.
		if _, err := DecompressLimit(nil, typ, good, len(plain)); err != nil {
			t.Errorf("type %d at limit: %v", typ, err)
		}
		if _, err := DecompressLimit(nil, typ, good, len(plain)-1); !errors.Is(err, ErrTooBig) {
			t.Errorf("type %d over limit: %v", typ, err)
		}
	}
	if _, err := DecompressLimit(nil, CompressNone, plain, len(plain)-1); !errors.Is(err, ErrTooBig) {
		t.Errorf("none over limit: %v", err)
	}
}

func flip(b []byte, i int) []byte {
	c := bytes.Clone(b)
	c[i] ^= 0x55
	return c
}

func itoa(v int32) string { return strconv.Itoa(int(v)) }

// TestDecompressionBomb: 16 MiB of zeros compress to a few KiB; with a
// 1 MiB limit, decompressing must fail fast and allocate about the limit.
func TestDecompressionBomb(t *testing.T) {
	if testing.Short() {
		t.Skip("compresses 16 MiB")
	}
	zeros := make([]byte, 16<<20)
	for _, typ := range []int32{CompressSnappy, CompressGzip, CompressZlib} {
		bomb, err := Compress(nil, typ, zeros)
		if err != nil {
			t.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err = DecompressLimit(nil, typ, bomb, 1<<20)
		runtime.ReadMemStats(&after)
		if !errors.Is(err, ErrTooBig) {
			t.Fatalf("type %d: %d-byte bomb: err = %v", typ, len(bomb), err)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4<<20 { // doubling up to the limit: 2 MiB in all, 1.5 MiB at most live
			t.Fatalf("type %d: allocated %d bytes for a 1 MiB limit", typ, alloc)
		}
	}
	// A snappy header claiming 4 GiB in a few bytes is rejected before allocating.
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := DecompressLimit(nil, CompressSnappy, []byte{0xff, 0xff, 0xff, 0xff, 0x0f, 0x00}, DefaultMaxBodySize)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrTooBig) || after.TotalAlloc-before.TotalAlloc > 1<<20 {
		t.Fatalf("snappy 4 GiB header: %v, allocated %d", err, after.TotalAlloc-before.TotalAlloc)
	}
}
