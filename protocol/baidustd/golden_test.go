package baidustd

import (
	"bytes"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// Frames recorded from C++ brpc. The tests use the in-repo copy; the shared
// copy beside the repository (CI lays shared/ at ../shared) is only compared
// with it when present.
const (
	goldenDir       = "testdata/brpc-wire"
	sharedGoldenDir = "../../../shared/testdata/brpc-wire"
)

func readGolden(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(goldenDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func goldenNames(t testing.TB) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(goldenDir, "*.bin"))
	if err != nil || len(names) == 0 {
		t.Fatalf("no golden frames in %s: %v", goldenDir, err)
	}
	for i := range names {
		names[i] = filepath.Base(names[i])
	}
	return names
}

// echoMessage serializes example.EchoRequest/EchoResponse{message: s}.
func echoMessage(s string) []byte {
	b := protowire.AppendTag(nil, 1, protowire.BytesType)
	return protowire.AppendString(b, s)
}

// echoText is the minimal hand-decode of field 1 of an Echo message.
func echoText(t testing.TB, b []byte) string {
	t.Helper()
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 || num != 1 || typ != protowire.BytesType {
		t.Fatalf("message %x: want field 1 string", b)
	}
	s, m := protowire.ConsumeString(b[n:])
	if m < 0 || n+m != len(b) {
		t.Fatalf("message %x: bad field 1", b)
	}
	return s
}

func unhex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

const (
	brpcCorrelationID = 4294967298 // brpc's first call id (base 1<<32 + 1) + attempt 1
	compressedText    = "hello compressed world hello compressed world hello compressed world"
	checksumHex       = "d38cab46"
)

// goldenCase is the logical content of one golden frame, from the README.
type goldenCase struct {
	file       string
	meta       Meta   // everything but AttachmentSize (AppendFrame sets it)
	text       string // the Echo message, after decompression
	noPayload  bool   // error replies carry no message at all
	attachment string
}

func clientMeta(service, method string, logID int64, compress int32) Meta {
	return Meta{HasRequest: true, ServiceName: service, MethodName: method, HasLogID: true, LogID: logID,
		CompressType: compress, CorrelationID: brpcCorrelationID}
}

func serverMeta(code int32, text string, correlationID int64) Meta {
	return Meta{HasResponse: true, ErrorCode: code, ErrorText: text, CorrelationID: correlationID}
}

// handMeta is the python-built request: only the required fields, log_id 7, correlation_id 1.
func handMeta(service, method string) Meta {
	return Meta{HasRequest: true, ServiceName: service, MethodName: method, HasLogID: true, LogID: 7,
		CorrelationID: 1, Sparse: true}
}

func goldenCases() []goldenCase {
	ok := serverMeta(0, "", brpcCorrelationID)
	checksumReq := clientMeta("example.EchoService", "Echo", 0, CompressNone)
	checksumReq.ChecksumType, checksumReq.ChecksumValue = ChecksumCRC32C, unhex(checksumHex)
	checksumResp := ok
	checksumResp.ChecksumValue = unhex(checksumHex) // brpc echoes the request's value with checksum_type 0
	const python = "hello from raw python"
	return []goldenCase{
		{file: "plain.request.bin", meta: clientMeta("example.EchoService", "Echo", 0, CompressNone), text: "hello world"},
		{file: "plain.response.bin", meta: ok, text: "hello world"},
		{file: "attachment.request.bin", meta: clientMeta("example.EchoService", "Echo", 0, CompressNone), text: "hello world", attachment: "ATTACHMENT-BYTES"},
		{file: "attachment.response.bin", meta: ok, text: "hello world", attachment: "ATTACHMENT-BYTES"},
		{file: "checksum.request.bin", meta: checksumReq, text: "hello world", attachment: "ATTACHMENT-BYTES"},
		{file: "checksum.response.bin", meta: checksumResp, text: "hello world", attachment: "ATTACHMENT-BYTES"},
		{file: "compress-gzip.request.bin", meta: clientMeta("example.EchoService", "Echo", 42, CompressGzip), text: compressedText, attachment: "ATT"},
		{file: "compress-gzip.response.bin", meta: ok, text: compressedText, attachment: "ATT"},
		{file: "compress-zlib.request.bin", meta: clientMeta("example.EchoService", "Echo", 42, CompressZlib), text: compressedText, attachment: "ATT"},
		{file: "compress-zlib.response.bin", meta: ok, text: compressedText, attachment: "ATT"},
		{file: "compress-snappy.request.bin", meta: clientMeta("example.EchoService", "Echo", 42, CompressSnappy), text: compressedText, attachment: "ATT"},
		{file: "compress-snappy.response.bin", meta: ok, text: compressedText, attachment: "ATT"},
		{file: "nomethod.request.bin", meta: handMeta("example.EchoService", "NoSuchMethod"), text: python},
		{file: "nomethod.response.bin", noPayload: true,
			meta: serverMeta(1002, "[127.0.0.1:8000][E1002]Fail to find method=example.EchoService/NoSuchMethod", 1)},
		{file: "noservice.request.bin", meta: handMeta("foo.Bar", "Echo"), text: python},
		{file: "noservice.response.bin", noPayload: true,
			meta: serverMeta(1002, "[127.0.0.1:8000][E1002]Fail to find method=foo.Bar/Echo", 1)},
		{file: "shortservice.request.bin", meta: handMeta("NoDotService", "Echo"), text: python},
		{file: "shortservice.response.bin", noPayload: true,
			meta: serverMeta(1001, "[127.0.0.1:8000][E1001]Fail to find service=NoDotService", 1)},
	}
}

// metaEqual compares the exported fields, telling nil from empty slices.
func metaEqual(a, b *Meta) bool {
	x, y := *a, *b
	x.checksum, y.checksum = [4]byte{}, [4]byte{}
	x.serviceCache, x.methodCache, y.serviceCache, y.methodCache = "", "", "", ""
	return reflect.DeepEqual(x, y)
}

func TestGoldenCasesCoverEveryFile(t *testing.T) {
	have := map[string]bool{}
	for _, c := range goldenCases() {
		have[c.file] = true
	}
	for _, name := range goldenNames(t) {
		if !have[name] {
			t.Errorf("golden frame %s has no test case", name)
		}
	}
	if _, err := os.Stat(sharedGoldenDir); err != nil {
		t.Logf("no shared copy at %s: in-repo frames only", sharedGoldenDir)
		return
	}
	for _, name := range goldenNames(t) {
		shared, err := os.ReadFile(filepath.Join(sharedGoldenDir, name))
		if err != nil {
			t.Errorf("shared copy of %s: %v", name, err)
			continue
		}
		if !bytes.Equal(shared, readGolden(t, name)) {
			t.Errorf("testdata/brpc-wire/%s differs from %s", name, sharedGoldenDir)
		}
	}
}

func TestDecodeGolden(t *testing.T) {
	for _, c := range goldenCases() {
		t.Run(c.file, func(t *testing.T) {
			frame := readGolden(t, c.file)
			n, err := Cut(frame, DefaultMaxBodySize)
			if err != nil || n != len(frame) {
				t.Fatalf("Cut = %d, %v; want %d", n, err, len(frame))
			}
			var m Meta
			msg, att, err := DecodeFrame(frame, &m)
			if err != nil {
				t.Fatal(err)
			}
			want := c.meta
			want.AttachmentSize = int32(len(c.attachment))
			if !metaEqual(&m, &want) {
				t.Fatalf("meta\n got %+v\nwant %+v", m, want)
			}
			if string(att) != c.attachment {
				t.Fatalf("attachment = %q, want %q", att, c.attachment)
			}
			if err := VerifyChecksum(&m, msg, att); err != nil {
				t.Fatalf("VerifyChecksum: %v", err)
			}
			if c.noPayload {
				if len(msg) != 0 {
					t.Fatalf("error reply carries a message: %x", msg)
				}
				return
			}
			plain, err := Decompress(nil, m.CompressType, msg)
			if err != nil {
				t.Fatalf("Decompress(%d): %v", m.CompressType, err)
			}
			if got := echoText(t, plain); got != c.text {
				t.Fatalf("message = %q, want %q", got, c.text)
			}
		})
	}
}

// TestEncodeGolden rebuilds every frame from its logical content and expects
// brpc's bytes exactly. Compressed messages: snappy is compressed again (our
// encoder is a port of brpc's); gzip and zlib cannot be, since Go's deflate
// ends its stream differently from zlib's (both valid), so the recorded
// compressed bytes are reused and TestCompressGolden checks they round-trip.
func TestEncodeGolden(t *testing.T) {
	for _, c := range goldenCases() {
		t.Run(c.file, func(t *testing.T) {
			frame := readGolden(t, c.file)
			m := c.meta
			var msg []byte
			if !c.noPayload {
				plain := echoMessage(c.text)
				var err error
				switch m.CompressType {
				case CompressGzip, CompressZlib:
					var dm Meta
					msg, _, err = DecodeFrame(frame, &dm)
				default:
					msg, err = Compress(nil, m.CompressType, plain)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			if strings.HasPrefix(c.file, "checksum.request") {
				m.SetChecksum(msg, []byte(c.attachment))
			}
			m.AttachmentSize = 12345 // ignored: AppendFrame sets it
			got, err := AppendFrame([]byte("x"), &m, msg, []byte(c.attachment))
			if err != nil {
				t.Fatal(err)
			}
			if got[0] != 'x' || !bytes.Equal(got[1:], frame) {
				t.Fatalf("AppendFrame\n got %x\nwant %x", got[1:], frame)
			}
			if m.AttachmentSize != int32(len(c.attachment)) {
				t.Fatalf("AttachmentSize = %d", m.AttachmentSize)
			}
			if m.Size() != int(frame[11]) {
				t.Fatalf("Size() = %d, header says %d", m.Size(), frame[11])
			}
			// Decoding then re-encoding gives the same bytes too.
			var dm Meta
			dmsg, datt, err := DecodeFrame(frame, &dm)
			if err != nil {
				t.Fatal(err)
			}
			again, err := AppendFrame(nil, &dm, dmsg, datt)
			if err != nil || !bytes.Equal(again, frame) {
				t.Fatalf("decode+encode\n got %x\nwant %x (%v)", again, frame, err)
			}
		})
	}
}

func TestChecksumGolden(t *testing.T) {
	frame := readGolden(t, "checksum.request.bin")
	var m Meta
	msg, att, err := DecodeFrame(frame, &m)
	if err != nil {
		t.Fatal(err)
	}
	// brpc's checksum covers the message only (checksum_with_attachment unset).
	if got := AppendChecksum(nil, msg, att, false); hex.EncodeToString(got) != checksumHex {
		t.Fatalf("AppendChecksum = %x, want %s", got, checksumHex)
	}
	if got := AppendChecksum(nil, msg, att, true); hex.EncodeToString(got) == checksumHex {
		t.Fatal("withAttachment must change the checksum")
	}
	if err := VerifyChecksum(&m, msg, att); err != nil {
		t.Fatal(err)
	}
	bad := bytes.Clone(frame)
	bad[len(bad)-len(att)-1] ^= 1 // last message byte
	msg, att, err = DecodeFrame(bad, &m)
	if err != nil {
		t.Fatal(err)
	}
	if err := VerifyChecksum(&m, msg, att); !errors.Is(err, ErrChecksumMismatch) {
		t.Fatalf("VerifyChecksum(corrupt) = %v", err)
	}
	bad = bytes.Clone(frame)
	bad[len(bad)-1] ^= 1 // the attachment is not covered
	msg, att, _ = DecodeFrame(bad, &m)
	if err := VerifyChecksum(&m, msg, att); err != nil {
		t.Fatalf("attachment change must not matter: %v", err)
	}
}

func TestCompressGolden(t *testing.T) {
	plain := echoMessage(compressedText)
	for _, typ := range []int32{CompressNone, CompressSnappy, CompressGzip, CompressZlib} {
		out, err := Compress([]byte("pre"), typ, plain)
		if err != nil || string(out[:3]) != "pre" {
			t.Fatalf("Compress(%d) = %v", typ, err)
		}
		back, err := Decompress([]byte("pre"), typ, out[3:])
		if err != nil || string(back[:3]) != "pre" || !bytes.Equal(back[3:], plain) {
			t.Fatalf("Decompress(Compress(%d)) = %q, %v", typ, back, err)
		}
	}
	gz, _ := Compress(nil, CompressGzip, plain)
	if !bytes.HasPrefix(gz, unhex("1f8b0800000000000003")) {
		t.Fatalf("gzip header %x differs from zlib's", gz[:10])
	}
	zl, _ := Compress(nil, CompressZlib, plain)
	if !bytes.HasPrefix(zl, unhex("789c")) {
		t.Fatalf("zlib header %x", zl[:2])
	}
}
