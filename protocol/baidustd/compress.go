package baidustd

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/gobrpc/gobrpc/internal/snappy"
)

// Compress appends src compressed with typ to dst. Only the message part of a
// frame is compressed, never the attachment. Types: CompressNone (a copy),
// CompressSnappy (raw block; same bytes as brpc), CompressGzip and
// CompressZlib (valid streams that brpc reads, though not byte-identical to
// zlib's: Go's deflate ends with an empty stored block). CompressLZ4 and
// unknown types fail with ErrUnsupportedCompressType.
func Compress(dst []byte, typ int32, src []byte) ([]byte, error) {
	switch typ {
	case CompressNone:
		return append(dst, src...), nil
	case CompressSnappy:
		out, err := snappy.Encode(dst, src)
		if err != nil {
			return dst, fmt.Errorf("%w: %w", ErrTooBig, err)
		}
		return out, nil
	case CompressGzip, CompressZlib:
		w := appendWriter{b: dst}
		var err error
		if typ == CompressGzip {
			z := gzipWriters.Get().(*gzip.Writer)
			z.Reset(&w)
			z.OS = 3 // unix, as zlib writes it; Go's default is 255 (unknown)
			if _, err = z.Write(src); err == nil {
				err = z.Close()
			}
			z.Reset(nil)
			gzipWriters.Put(z)
		} else {
			z := zlibWriters.Get().(*zlib.Writer)
			z.Reset(&w)
			if _, err = z.Write(src); err == nil {
				err = z.Close()
			}
			z.Reset(nil)
			zlibWriters.Put(z)
		}
		if err != nil { // cannot happen: appendWriter never fails
			return dst, err
		}
		return w.b, nil
	default:
		return dst, unsupported(typ)
	}
}

func unsupported(typ int32) error {
	return fmt.Errorf("%w %d", ErrUnsupportedCompressType, typ)
}

// Decompress appends src decompressed with typ to dst, producing at most
// DefaultMaxBodySize bytes. See DecompressLimit.
func Decompress(dst []byte, typ int32, src []byte) ([]byte, error) {
	return DecompressLimit(dst, typ, src, DefaultMaxBodySize)
}

// DecompressLimit appends src decompressed with typ to dst. Output larger
// than maxSize bytes fails with ErrTooBig, without producing (or allocating)
// more than about maxSize bytes, so a compression bomb cannot exhaust memory;
// a server should pass its max body size. Corrupt input fails with
// ErrBadCompressedData, LZ4 and unknown types with ErrUnsupportedCompressType.
// maxSize <= 0 means DefaultMaxBodySize. On error dst is returned with its
// original length.
func DecompressLimit(dst []byte, typ int32, src []byte, maxSize int) ([]byte, error) {
	if maxSize <= 0 {
		maxSize = DefaultMaxBodySize
	}
	switch typ {
	case CompressNone:
		if len(src) > maxSize {
			return dst, tooBig(maxSize)
		}
		return append(dst, src...), nil
	case CompressSnappy:
		out, err := snappy.Decode(dst, src, maxSize)
		switch {
		case errors.Is(err, snappy.ErrTooLarge):
			return dst, tooBig(maxSize)
		case err != nil:
			return dst, fmt.Errorf("%w: %w", ErrBadCompressedData, err)
		}
		return out, nil
	case CompressGzip:
		st := gzipReaders.Get().(*gzipReader)
		defer st.release()
		st.src.Reset(src)
		var err error
		if st.r == nil {
			st.r, err = gzip.NewReader(&st.src)
		} else {
			err = st.r.Reset(&st.src)
		}
		if err != nil {
			return dst, fmt.Errorf("%w: gzip: %w", ErrBadCompressedData, err)
		}
		// Concatenated members are read as one stream, as zlib's gzip mode does.
		return readLimited(dst, st.r, maxSize)
	case CompressZlib:
		st := zlibReaders.Get().(*zlibReader)
		defer st.release()
		st.src.Reset(src)
		var err error
		if st.r == nil {
			st.r, err = zlib.NewReader(&st.src)
		} else {
			err = st.r.(zlib.Resetter).Reset(&st.src, nil)
		}
		if err != nil {
			return dst, fmt.Errorf("%w: zlib: %w", ErrBadCompressedData, err)
		}
		out, err := readLimited(dst, st.r, maxSize)
		if err == nil && st.src.Len() != 0 {
			return dst, fmt.Errorf("%w: zlib: %d bytes after the stream", ErrBadCompressedData, st.src.Len())
		}
		return out, err
	default:
		return dst, unsupported(typ)
	}
}

func tooBig(max int) error {
	return fmt.Errorf("%w: decompressed message is larger than %d bytes", ErrTooBig, max)
}

// readLimited appends all of r to dst, failing once more than limit bytes
// come. It grows dst as data arrives, never by an (untrusted) announced size.
func readLimited(dst []byte, r io.Reader, limit int) ([]byte, error) {
	start := len(dst)
	for {
		if len(dst) == cap(dst) {
			// Double what was read so far, but never past limit+1 bytes:
			// a bomb costs about limit, not twice that.
			grow := min(max(len(dst)-start, 512), limit+1-(len(dst)-start))
			nd := make([]byte, len(dst), len(dst)+grow)
			copy(nd, dst)
			dst = nd
		}
		room := dst[len(dst):cap(dst)]
		// Read at most one byte past the limit, to tell "exactly limit" from "more".
		if left := limit - (len(dst) - start); left < len(room)-1 {
			room = room[:left+1]
		}
		n, err := r.Read(room)
		dst = dst[:len(dst)+n]
		if len(dst)-start > limit {
			return dst[:start], tooBig(limit)
		}
		if err == io.EOF {
			return dst, nil
		}
		if err != nil {
			return dst[:start], fmt.Errorf("%w: %w", ErrBadCompressedData, err)
		}
	}
}

// appendWriter is an io.Writer appending to a byte slice.
type appendWriter struct{ b []byte }

func (w *appendWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

// The flate state is large (hundreds of KiB for a writer), so it is pooled.
var (
	gzipWriters = sync.Pool{New: func() any { return gzip.NewWriter(nil) }}
	zlibWriters = sync.Pool{New: func() any { return zlib.NewWriter(nil) }}
	gzipReaders = sync.Pool{New: func() any { return new(gzipReader) }}
	zlibReaders = sync.Pool{New: func() any { return new(zlibReader) }}
)

// gzipReader and zlibReader pool a decompressor with the bytes.Reader it
// reads from (an io.ByteReader, so flate reads no further than the stream).
// The reader is created on first use: gzip.NewReader needs a valid header.
type gzipReader struct {
	src bytes.Reader
	r   *gzip.Reader
}

// release forgets the input, so the pool does not keep a frame alive.
func (g *gzipReader) release() {
	g.src.Reset(nil)
	gzipReaders.Put(g)
}

type zlibReader struct {
	src bytes.Reader
	r   io.ReadCloser // implements zlib.Resetter
}

func (z *zlibReader) release() {
	z.src.Reset(nil)
	zlibReaders.Put(z)
}
