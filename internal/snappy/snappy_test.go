package snappy

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"testing"
)

// goldenMessage is the serialized EchoRequest{message: "hello compressed world" x3}.
var goldenMessage = append([]byte{0x0a, 0x44},
	"hello compressed world hello compressed world hello compressed world"...)

const goldenFrame = "../../protocol/baidustd/testdata/brpc-wire/compress-snappy.request.bin"

// goldenBlock is how C++ brpc snappy-compressed goldenMessage: the frame's
// payload after the 12-byte header and the 0x2f-byte meta, less the "ATT" attachment.
func goldenBlock(t testing.TB) []byte {
	t.Helper()
	frame, err := os.ReadFile(goldenFrame)
	if err != nil {
		t.Fatal(err)
	}
	return frame[12+0x2f : len(frame)-len("ATT")]
}

func TestGoldenFromBrpc(t *testing.T) {
	block := goldenBlock(t)
	got, err := Decode(nil, block, 1<<20)
	if err != nil || !bytes.Equal(got, goldenMessage) {
		t.Fatalf("Decode(golden) = %q, %v; want %q", got, err, goldenMessage)
	}
	enc, err := Encode(nil, goldenMessage)
	if err != nil || !bytes.Equal(enc, block) {
		t.Fatalf("Encode = %x, %v; brpc wrote %x", enc, err, block)
	}
}

func TestKnownEncodings(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		want []byte
	}{
		{"empty", nil, []byte{0x00}},
		{"one byte", []byte{'a'}, []byte{0x01, 0x00, 'a'}},
		// Under 15 bytes snappy does not look for matches.
		{"short repeat", []byte("aaaaaaaa"), append([]byte{0x08, 7 << 2}, "aaaaaaaa"...)},
		// A 20-byte run: literal "a" then one overlapping copy of 19 at offset 1.
		{"run", bytes.Repeat([]byte{'a'}, 20), []byte{20, 0 << 2, 'a', 18<<2 | tagCopy2, 1, 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Encode(nil, tc.in)
			if err != nil || !bytes.Equal(got, tc.want) {
				t.Fatalf("Encode = %x, %v; want %x", got, err, tc.want)
			}
			dec, err := Decode(nil, got, 1<<20)
			if err != nil || !bytes.Equal(dec, tc.in) {
				t.Fatalf("Decode = %q, %v; want %q", dec, err, tc.in)
			}
		})
	}
}

func TestRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	}
	texty := func(n int) []byte { // few symbols: many matches, long and short
		words := []string{"brpc ", "baidu_std ", "hello ", "world ", "x", "\x00\x00\x00\x00"}
		var b []byte
		for len(b) < n {
			b = append(b, words[r.IntN(len(words))]...)
		}
		return b[:n]
	}
	sizes := []int{0, 1, 3, 14, 15, 16, 17, 31, 64, 65, 100, 1000, 4096, 65535, 65536, 65537, 200000}
	for _, n := range sizes {
		for _, c := range []struct {
			name string
			in   []byte
		}{{"random", random(n)}, {"texty", texty(n)}, {"zeros", make([]byte, n)}} {
			enc, err := Encode([]byte("prefix"), c.in)
			if err != nil || string(enc[:6]) != "prefix" {
				t.Fatalf("%s/%d: Encode must append: %v", c.name, n, err)
			}
			if len(enc)-6 > MaxEncodedLen(n)+5 {
				t.Fatalf("%s/%d: %d bytes exceeds MaxEncodedLen", c.name, n, len(enc)-6)
			}
			if dl, err := DecodedLen(enc[6:]); err != nil || dl != n {
				t.Fatalf("%s/%d: DecodedLen = %d, %v", c.name, n, dl, err)
			}
			dec, err := Decode([]byte("pre"), enc[6:], n)
			if err != nil || string(dec[:3]) != "pre" || !bytes.Equal(dec[3:], c.in) {
				t.Fatalf("%s/%d: round trip failed: %v", c.name, n, err)
			}
			if c.name == "zeros" && n > 1000 && len(enc) > n/10 {
				t.Fatalf("zeros/%d: %d bytes, did not compress", n, len(enc))
			}
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	tests := []struct {
		name   string
		in     []byte
		maxLen int
		want   error
	}{
		{"empty input", nil, 100, ErrCorrupt},
		{"unterminated varint", []byte{0x80}, 100, ErrCorrupt},
		{"varint over 32 bits", []byte{0x80, 0x80, 0x80, 0x80, 0x10}, 1 << 40, ErrCorrupt},
		{"varint 6 bytes", []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x01}, 1 << 40, ErrCorrupt},
		{"over limit", []byte{0x80, 0x80, 0x80, 0x80, 0x0f}, 1 << 20, ErrTooLarge},
		{"huge length tiny body", []byte{0x80, 0x80, 0x80, 0x01, 0x00, 'a'}, 1 << 30, ErrCorrupt},
		{"missing data", []byte{0x05}, 100, ErrCorrupt},
		{"literal past input", []byte{0x05, 4 << 2, 'a', 'b'}, 100, ErrCorrupt},
		{"literal past output", []byte{0x01, 1 << 2, 'a', 'b'}, 100, ErrCorrupt},
		{"literal 60 truncated", []byte{0x05, 60 << 2}, 100, ErrCorrupt},
		{"literal 61 truncated", []byte{0x05, 61 << 2, 1}, 100, ErrCorrupt},
		{"literal 62 truncated", []byte{0x05, 62 << 2, 1, 0}, 100, ErrCorrupt},
		{"literal 63 huge", []byte{0x05, 63 << 2, 0xff, 0xff, 0xff, 0xff}, 100, ErrCorrupt},
		{"copy before data", []byte{0x04, tagCopy1, 0x01}, 100, ErrCorrupt},
		{"copy offset 0", []byte{0x05, 0x00, 'a', tagCopy1, 0x00}, 100, ErrCorrupt},
		{"copy offset too far", []byte{0x05, 0x00, 'a', tagCopy1, 0x02}, 100, ErrCorrupt},
		{"copy past output", []byte{0x03, 0x00, 'a', tagCopy1, 0x01}, 100, ErrCorrupt},
		{"copy1 truncated", []byte{0x05, 0x00, 'a', tagCopy1}, 100, ErrCorrupt},
		{"copy2 truncated", []byte{0x05, 0x00, 'a', tagCopy2, 0x01}, 100, ErrCorrupt},
		{"copy4 truncated", []byte{0x05, 0x00, 'a', tagCopy4, 0x01, 0, 0}, 100, ErrCorrupt},
		{"copy4 offset huge", []byte{0x05, 0x00, 'a', 3<<2 | tagCopy4, 0xff, 0xff, 0xff, 0xff}, 100, ErrCorrupt},
		{"short output", []byte{0x05, 0x00, 'a'}, 100, ErrCorrupt},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := Decode([]byte("keep"), tc.in, tc.maxLen)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if string(out) != "keep" {
				t.Fatalf("dst changed on error: %q", out)
			}
		})
	}
}

func TestDecodeAllTags(t *testing.T) {
	// "ab", copy4 offset 2 len 6 (overlapping), copy2 offset 8 len 4.
	in := []byte{12, 1 << 2, 'a', 'b', 5<<2 | tagCopy4, 2, 0, 0, 0, 3<<2 | tagCopy2, 8, 0}
	if got, err := Decode(nil, in, 100); err != nil || string(got) != "abababababab" {
		t.Fatalf("Decode = %q, %v", got, err)
	}
	for _, tag := range []byte{60, 61, 62, 63} { // literal lengths in 1..4 extra bytes
		blk := []byte{3, tag << 2, 2}
		for i := 60; i < int(tag); i++ {
			blk = append(blk, 0)
		}
		blk = append(blk, "xyz"...)
		if got, err := Decode(nil, blk, 100); err != nil || string(got) != "xyz" {
			t.Fatalf("literal tag %d: Decode = %q, %v", tag, got, err)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte{0x00})
	f.Add([]byte{12, 1 << 2, 'a', 'b', 5<<2 | tagCopy4, 2, 0, 0, 0, 3<<2 | tagCopy2, 8, 0})
	if b, err := Encode(nil, goldenMessage); err == nil {
		f.Add(b)
	}
	f.Add(goldenBlock(f))
	f.Fuzz(func(t *testing.T, in []byte) {
		const limit = 1 << 20
		out, err := Decode(nil, in, limit)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if n, err := DecodedLen(in); err != nil || n != len(out) || n > limit {
			t.Fatalf("decoded %d bytes, header says %d (%v)", len(out), n, err)
		}
		enc, err := Encode(nil, out)
		if err != nil {
			t.Fatal(err)
		}
		if again, err := Decode(nil, enc, limit); err != nil || !bytes.Equal(again, out) {
			t.Fatalf("re-encode round trip failed: %v", err)
		}
	})
}

func FuzzRoundTrip(f *testing.F) {
	f.Add(goldenMessage)
	f.Add(bytes.Repeat([]byte("ab"), 100))
	f.Fuzz(func(t *testing.T, in []byte) {
		enc, err := Encode(nil, in)
		if err != nil {
			t.Fatal(err)
		}
		if len(enc) > MaxEncodedLen(len(in))+5 {
			t.Fatalf("encoded %d bytes, max %d", len(enc), MaxEncodedLen(len(in)))
		}
		if dec, err := Decode(nil, enc, len(in)); err != nil || !bytes.Equal(dec, in) {
			t.Fatalf("round trip failed: %v", err)
		}
	})
}

func BenchmarkEncode(b *testing.B) {
	buf := make([]byte, 0, MaxEncodedLen(len(goldenMessage))+5)
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = Encode(buf[:0], goldenMessage)
	}
}

func BenchmarkDecode(b *testing.B) {
	enc, _ := Encode(nil, goldenMessage)
	buf := make([]byte, 0, len(goldenMessage))
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = Decode(buf[:0], enc, 1<<20)
	}
}
