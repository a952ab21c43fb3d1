package baidustd

import (
	"testing"
)

// clientRequest is what a gobrpc client sends for brpc's echo example.
func clientRequest() Meta {
	return Meta{HasRequest: true, ServiceName: "example.EchoService", MethodName: "Echo",
		HasLogID: true, CorrelationID: brpcCorrelationID}
}

func BenchmarkAppendFrame(b *testing.B) {
	m := clientRequest()
	msg := echoMessage("hello world")
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = AppendFrame(buf[:0], &m, msg, nil)
	}
	b.SetBytes(int64(len(buf)))
}

func BenchmarkAppendFrameResponse(b *testing.B) {
	m := Meta{HasResponse: true, CorrelationID: brpcCorrelationID}
	msg := echoMessage("hello world")
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = AppendFrame(buf[:0], &m, msg, nil)
	}
}

// BenchmarkDecodeFrame decodes requests into a reused Meta: the service and
// method names come from Meta's cache, so it allocates nothing.
func BenchmarkDecodeFrame(b *testing.B) {
	frame := readGolden(b, "plain.request.bin")
	var m Meta
	b.ReportAllocs()
	b.SetBytes(int64(len(frame)))
	for b.Loop() {
		if _, _, err := DecodeFrame(frame, &m); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeFrameResponse(b *testing.B) {
	frame := readGolden(b, "attachment.response.bin")
	var m Meta
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := DecodeFrame(frame, &m); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReceive is the full receive path of a checksummed request.
func BenchmarkReceive(b *testing.B) {
	frame := readGolden(b, "checksum.request.bin")
	var m Meta
	b.ReportAllocs()
	for b.Loop() {
		n, err := Cut(frame, DefaultMaxBodySize)
		if err != nil {
			b.Fatal(err)
		}
		msg, att, err := DecodeFrame(frame[:n], &m)
		if err == nil {
			err = VerifyChecksum(&m, msg, att)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecompressGzip(b *testing.B) {
	c, _ := Compress(nil, CompressGzip, echoMessage(compressedText))
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = Decompress(buf[:0], CompressGzip, c)
	}
}

func TestZeroAllocs(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("coverage counters allocate")
	}
	req := clientRequest()
	msg := echoMessage("hello world")
	buf := make([]byte, 0, 256)
	frame := readGolden(t, "checksum.request.bin")
	var m Meta
	_, _, _ = DecodeFrame(frame, &m) // warm the name cache
	cases := map[string]func(){
		"AppendFrame": func() { buf, _ = AppendFrame(buf[:0], &req, msg, nil) },
		"SetChecksum": func() { req.SetChecksum(msg, nil) },
		"DecodeFrame+Verify": func() {
			msg, att, err := DecodeFrame(frame, &m)
			if err != nil || VerifyChecksum(&m, msg, att) != nil {
				t.Fatal(err)
			}
		},
		"UserFields encode": func() {
			r := req
			r.UserFields = map[string]string{"b": "2", "a": "1"}
			buf, _ = AppendFrame(buf[:0], &r, msg, nil)
		},
	}
	for name, f := range cases {
		want := 0.0
		if name == "UserFields encode" {
			want = 1 // the map literal itself
		}
		if got := testing.AllocsPerRun(100, f); got > want {
			t.Errorf("%s: %v allocs per run, want %v", name, got, want)
		}
	}
}
