package baidustd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/gobrpc/gobrpc/errno"
)

// HeaderSize is the size of the fixed frame header: "PRPC", body_size, meta_size.
const HeaderSize = 12

// DefaultMaxBodySize is brpc's -max_body_size default (64 MiB).
const DefaultMaxBodySize = 64 << 20

// magic starts every baidu_std frame.
const magic = "PRPC"

// Sentinel errors; test with errors.Is. Returned errors may wrap them with details.
var (
	// ErrNotEnoughData: the buffer holds the start of a frame; read more.
	ErrNotEnoughData = errors.New("baidustd: not enough data")
	// ErrBadMagic: the bytes are not baidu_std; try other protocols.
	ErrBadMagic = errors.New("baidustd: bad magic, not a baidu_std frame")
	// ErrTooBig: body_size exceeds the limit (brpc closes the connection),
	// or a frame or a decompressed message would be too large.
	ErrTooBig = errors.New("baidustd: too big")
	// ErrMetaTooBig: meta_size is larger than body_size.
	ErrMetaTooBig = errors.New("baidustd: meta_size is larger than body_size")
	// ErrFrameLength: DecodeFrame got more bytes than the header announces.
	ErrFrameLength = errors.New("baidustd: frame length does not match its header")
	// ErrBadMeta: the RpcMeta does not parse, or misses a required field.
	ErrBadMeta = errors.New("baidustd: bad RpcMeta")
	// ErrBadAttachmentSize: attachment_size is negative or larger than the payload.
	ErrBadAttachmentSize = errors.New("baidustd: bad attachment_size")
	// ErrUnsupportedCompressType: the compress type has no codec (lz4 or unknown).
	ErrUnsupportedCompressType = errors.New("baidustd: unsupported compress type")
	// ErrBadCompressedData: the message does not decompress.
	ErrBadCompressedData = errors.New("baidustd: corrupt compressed data")
	// ErrChecksumMismatch: the checksum does not match the data, or checksum_value is malformed.
	ErrChecksumMismatch = errors.New("baidustd: checksum mismatch")
)

// Cut reports whether buf starts with a complete baidu_std frame and returns
// its total length (HeaderSize + body_size). It is the incremental parser:
// call it on the bytes read so far; ErrNotEnoughData means read more, and
// after a frame is consumed the next one starts at buf[frameLen:].
//
// With ErrNotEnoughData, frameLen is the length the frame will have once the
// 12-byte header is buffered (so a reader can wait for exactly that many
// bytes), and 0 before. Other errors:
//   - ErrBadMagic when buf does not start with "PRPC", or when fewer than 4
//     bytes are buffered and they are not a prefix of it (brpc's "try other
//     protocols"),
//   - ErrTooBig when body_size > maxBodySize (<= 0 means DefaultMaxBodySize),
//   - ErrMetaTooBig when meta_size > body_size. brpc notices this only once
//     the whole body arrived; we report it as soon as the header is here.
//
// Cut never panics and never reads past the header to decide.
func Cut(buf []byte, maxBodySize int) (frameLen int, err error) {
	if len(buf) < len(magic) {
		if string(buf) != magic[:len(buf)] {
			return 0, ErrBadMagic
		}
		return 0, ErrNotEnoughData
	}
	if string(buf[:4]) != magic {
		return 0, ErrBadMagic
	}
	if len(buf) < HeaderSize {
		return 0, ErrNotEnoughData
	}
	bodySize := binary.BigEndian.Uint32(buf[4:])
	metaSize := binary.BigEndian.Uint32(buf[8:])
	if maxBodySize <= 0 {
		maxBodySize = DefaultMaxBodySize
	}
	if uint64(bodySize) > uint64(maxBodySize) {
		return 0, ErrTooBig
	}
	if metaSize > bodySize {
		return 0, ErrMetaTooBig
	}
	// Computed in uint64 so that 32-bit platforms cannot overflow.
	total := uint64(HeaderSize) + uint64(bodySize)
	if total > math.MaxInt {
		return 0, ErrTooBig
	}
	if uint64(len(buf)) < total {
		return int(total), ErrNotEnoughData
	}
	return int(total), nil
}

// DecodeFrame parses one complete frame (exactly the frameLen bytes Cut
// reported) into m and splits the payload into the message bytes (still
// compressed if m.CompressType says so) and the attachment. Both slices alias
// frame, with capacities clipped so appending to one cannot overwrite the
// other. m is Reset first.
//
// Errors: those of Cut (the body size is not limited here), ErrFrameLength
// for bytes after the frame, ErrBadMeta (wrapping the protowire error) and
// ErrBadAttachmentSize. The checksum is not verified here: see VerifyChecksum.
func DecodeFrame(frame []byte, m *Meta) (message, attachment []byte, err error) {
	n, err := Cut(frame, math.MaxInt)
	if err != nil {
		return nil, nil, err
	}
	if n != len(frame) {
		return nil, nil, ErrFrameLength
	}
	metaSize := int(binary.BigEndian.Uint32(frame[8:]))
	if err := DecodeMeta(frame[HeaderSize:HeaderSize+metaSize], m); err != nil {
		return nil, nil, err
	}
	payload := frame[HeaderSize+metaSize:]
	att := int(m.AttachmentSize)
	if att < 0 || att > len(payload) {
		return nil, nil, fmt.Errorf("%w: attachment_size=%d, payload has %d bytes",
			ErrBadAttachmentSize, m.AttachmentSize, len(payload))
	}
	split := len(payload) - att
	return payload[:split:split], payload[split:], nil
}

// AppendFrame appends a whole frame to dst: header, m encoded, message (already
// compressed if m.CompressType says so; see Compress) and attachment. It sets
// m.AttachmentSize to len(attachment); any value the caller put there is
// ignored. The checksum is not computed here: call m.SetChecksum first.
// The only error is ErrTooBig (a body of 4 GiB or more, or an attachment of
// 2 GiB or more); dst is then returned unchanged.
func AppendFrame(dst []byte, m *Meta, message, attachment []byte) ([]byte, error) {
	dst, err := AppendFrameHead(dst, m, len(message), len(attachment))
	if err != nil {
		return dst, err
	}
	dst = append(dst, message...)
	return append(dst, attachment...), nil
}

// AppendFrameHead appends the header and the encoded meta of a frame whose
// message and attachment the caller appends next, in that order. It lets a
// caller marshal the message straight into the frame buffer
// (proto.MarshalOptions.MarshalAppend) when no checksum is needed. It grows
// dst once to hold the whole frame and sets m.AttachmentSize like AppendFrame.
func AppendFrameHead(dst []byte, m *Meta, messageLen, attachmentLen int) ([]byte, error) {
	if messageLen < 0 || attachmentLen < 0 || attachmentLen > math.MaxInt32 {
		return dst, fmt.Errorf("%w: attachment of %d bytes", ErrTooBig, attachmentLen)
	}
	m.AttachmentSize = int32(attachmentLen)
	metaSize := m.Size()
	body := uint64(metaSize) + uint64(messageLen) + uint64(attachmentLen)
	if body > math.MaxUint32 {
		return dst, fmt.Errorf("%w: body of %d bytes", ErrTooBig, body)
	}
	if need := HeaderSize + int(body); cap(dst)-len(dst) < need {
		nd := make([]byte, len(dst), len(dst)+need)
		copy(nd, dst)
		dst = nd
	}
	dst = append(dst, magic...)
	dst = binary.BigEndian.AppendUint32(dst, uint32(body))
	dst = binary.BigEndian.AppendUint32(dst, uint32(metaSize))
	return m.appendTo(dst, metaSize), nil
}

// ServerErrorText formats a server-side error text as brpc does:
// "[<ip:port>][E<code>]<reason>", e.g. "[127.0.0.1:8000][E1002]Fail to find method=a.B/C".
// addr is the server's own address.
func ServerErrorText(addr string, code int32, reason string) string {
	b := make([]byte, 0, len(addr)+len(reason)+16)
	b = append(b, '[')
	b = append(b, addr...)
	b = append(b, ']')
	return string(errno.AppendText(b, errno.Errno(code), reason))
}
