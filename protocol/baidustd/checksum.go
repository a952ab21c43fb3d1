package baidustd

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// maskDelta and the rotation are butil::crc32c::Mask: stored CRCs are masked
// so that a CRC of data that embeds CRCs stays meaningful.
const maskDelta = 0xa282ead8

func mask(crc uint32) uint32 { return (crc>>15 | crc<<17) + maskDelta }

// AppendChecksum appends brpc's CRC32C checksum_value: crc32c (Castagnoli)
// over message (the bytes as sent, after compression) and, if
// withAttachment, over attachment too; masked; 4 bytes big-endian.
func AppendChecksum(dst []byte, message, attachment []byte, withAttachment bool) []byte {
	crc := crc32.Update(0, castagnoli, message)
	if withAttachment {
		crc = crc32.Update(crc, castagnoli, attachment)
	}
	return binary.BigEndian.AppendUint32(dst, mask(crc))
}

// VerifyChecksum checks m's checksum against message (as received, before
// decompression) and attachment (used only if m.ChecksumWithAttachment), as
// brpc's Crc32cVerify. ChecksumNone passes whatever ChecksumValue holds (brpc
// servers echo the request's value in unchecksummed responses), and so do
// unknown types, as in brpc (VerifyDataChecksum passes types without a
// handler). A CRC32C value that is not 4 bytes is a mismatch (brpc would
// CHECK-fail). Errors wrap ErrChecksumMismatch.
func VerifyChecksum(m *Meta, message, attachment []byte) error {
	if m.ChecksumType != ChecksumCRC32C {
		return nil
	}
	if len(m.ChecksumValue) != 4 {
		return fmt.Errorf("%w: checksum_value has %d bytes, want 4", ErrChecksumMismatch, len(m.ChecksumValue))
	}
	var buf [4]byte
	if string(AppendChecksum(buf[:0], message, attachment, m.ChecksumWithAttachment)) != string(m.ChecksumValue) {
		return ErrChecksumMismatch
	}
	return nil
}
