package baidustd

import (
	"bytes"
	"errors"
	"testing"
)

// stream concatenates every golden frame.
func stream(t testing.TB) (all []byte, frames [][]byte) {
	for _, c := range goldenCases() {
		f := readGolden(t, c.file)
		frames = append(frames, f)
		all = append(all, f...)
	}
	return all, frames
}

// TestOneByteAtATime feeds the whole stream a byte at a time, as a slow
// connection would, and cuts frames as soon as they are complete.
func TestOneByteAtATime(t *testing.T) {
	all, frames := stream(t)
	var buf []byte
	var got [][]byte
	for _, c := range all {
		buf = append(buf, c)
		for {
			n, err := Cut(buf, DefaultMaxBodySize)
			if errors.Is(err, ErrNotEnoughData) {
				break
			}
			if err != nil {
				t.Fatalf("after %d frames: %v", len(got), err)
			}
			var m Meta
			if _, _, err := DecodeFrame(buf[:n], &m); err != nil {
				t.Fatal(err)
			}
			got = append(got, bytes.Clone(buf[:n]))
			buf = buf[n:]
		}
	}
	if len(buf) != 0 || len(got) != len(frames) {
		t.Fatalf("cut %d frames, %d bytes left; want %d frames", len(got), len(buf), len(frames))
	}
	for i := range frames {
		if !bytes.Equal(got[i], frames[i]) {
			t.Fatalf("frame %d differs", i)
		}
	}
}

// TestManyFramesOneBuffer cuts frames from one buffer holding all of them,
// reusing one Meta (the steady state of a connection).
func TestManyFramesOneBuffer(t *testing.T) {
	all, _ := stream(t)
	all = append(all, all...)
	cases := goldenCases()
	var m Meta
	for i := 0; len(all) > 0; i++ {
		n, err := Cut(all, DefaultMaxBodySize)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		_, att, err := DecodeFrame(all[:n], &m)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		c := cases[i%len(cases)]
		want := c.meta
		want.AttachmentSize = int32(len(c.attachment))
		if !metaEqual(&m, &want) || string(att) != c.attachment {
			t.Fatalf("frame %d (%s): %s", i, c.file, metaDiff(&m, &want))
		}
		all = all[n:]
	}
}

// TestCutAnnouncesLength: once the header is in, Cut tells how many bytes to wait for.
func TestCutAnnouncesLength(t *testing.T) {
	frame := readGolden(t, "attachment.request.bin")
	for i := HeaderSize; i < len(frame); i++ {
		if n, err := Cut(frame[:i], 0); n != len(frame) || !errors.Is(err, ErrNotEnoughData) {
			t.Fatalf("Cut(%d bytes) = %d, %v", i, n, err)
		}
	}
}
