package baidustd

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

const fuzzMaxBody = 1 << 20

func addGoldenSeeds(f *testing.F) [][]byte {
	var frames [][]byte
	for _, name := range goldenNames(f) {
		frame := readGolden(f, name)
		f.Add(frame)
		frames = append(frames, frame)
	}
	return frames
}

// FuzzParse runs the receive path (Cut, DecodeFrame, VerifyChecksum,
// DecompressLimit) over arbitrary bytes, frame after frame. It must never
// panic, only return the package's errors, and whatever decodes must
// re-encode to a frame that decodes to the same Meta and payload.
func FuzzParse(f *testing.F) {
	frames := addGoldenSeeds(f)
	f.Add(bytes.Join(frames, nil))
	f.Add([]byte("PRP"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var m, m2 Meta
		for len(data) > 0 {
			n, err := Cut(data, fuzzMaxBody)
			if err != nil {
				if !oneOf(err, ErrNotEnoughData, ErrBadMagic, ErrTooBig, ErrMetaTooBig) {
					t.Fatalf("Cut: unexpected error %v", err)
				}
				if errors.Is(err, ErrNotEnoughData) && n != 0 && n <= len(data) {
					t.Fatalf("Cut: ErrNotEnoughData with frameLen %d of %d buffered", n, len(data))
				}
				return
			}
			frame := data[:n]
			data = data[n:]
			msg, att, err := DecodeFrame(frame, &m)
			if err != nil {
				if !oneOf(err, ErrBadMeta, ErrBadAttachmentSize) {
					t.Fatalf("DecodeFrame: unexpected error %v", err)
				}
				continue
			}
			if len(msg)+len(att) != n-HeaderSize-int(binary.BigEndian.Uint32(frame[8:])) {
				t.Fatalf("payload split lost bytes")
			}
			if err := VerifyChecksum(&m, msg, att); err != nil && !errors.Is(err, ErrChecksumMismatch) {
				t.Fatalf("VerifyChecksum: unexpected error %v", err)
			}
			out, err := DecompressLimit(nil, m.CompressType, msg, fuzzMaxBody)
			if err != nil && !oneOf(err, ErrBadCompressedData, ErrTooBig, ErrUnsupportedCompressType) {
				t.Fatalf("Decompress: unexpected error %v", err)
			}
			if len(out) > fuzzMaxBody {
				t.Fatalf("Decompress produced %d bytes", len(out))
			}
			re, err := AppendFrame(nil, &m, msg, att)
			if err != nil {
				t.Fatalf("AppendFrame: %v", err)
			}
			msg2, att2, err := DecodeFrame(re, &m2)
			if err != nil {
				t.Fatalf("re-encoded frame does not decode: %v\n%x", err, re)
			}
			if !metaEqual(&m, &m2) || !bytes.Equal(msg, msg2) || !bytes.Equal(att, att2) {
				t.Fatalf("round trip changed the frame:\n%s", metaDiff(&m, &m2))
			}
			// A re-encoded frame is canonical: encoding it again is a fixed point.
			if again, _ := AppendFrame(nil, &m2, msg2, att2); !bytes.Equal(again, re) {
				t.Fatalf("encoding is not stable:\n%x\n%x", re, again)
			}
		}
	})
}

// FuzzMeta checks DecodeMeta against the generated protobuf code on arbitrary
// meta bytes: same verdict, same content.
func FuzzMeta(f *testing.F) {
	for _, frame := range addGoldenSeedsMeta(f) {
		f.Add(frame)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkAgainstGenerated(t, b)
	})
}

func addGoldenSeedsMeta(f *testing.F) [][]byte {
	var metas [][]byte
	for _, name := range goldenNames(f) {
		frame := readGolden(f, name)
		metas = append(metas, frame[HeaderSize:HeaderSize+binary.BigEndian.Uint32(frame[8:])])
	}
	return metas
}

func oneOf(err error, targets ...error) bool {
	for _, t := range targets {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}
