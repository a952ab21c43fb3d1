// Package snappy implements the raw snappy block format (not the framing
// format): a varint of the uncompressed length followed by literal and copy
// elements. brpc's COMPRESS_TYPE_SNAPPY is this format.
//
// The encoder is a port of the snappy 1.1 CompressFragment bundled with brpc
// (src/butil/third_party/snappy/snappy.cc), so it produces the same bytes as
// a C++ brpc peer. The decoder accepts any valid block, validates every
// element and never writes more than the declared length, which the caller
// bounds with maxLen so that a hostile length prefix cannot make it allocate
// gigabytes.
package snappy

import (
	"encoding/binary"
	"errors"
	"math"
	"math/bits"
	"sync"
)

var (
	// ErrCorrupt reports malformed compressed data.
	ErrCorrupt = errors.New("snappy: corrupt input")
	// ErrTooLarge reports a decoded length above the caller's limit, or an
	// input too large for the format (more than 2^32-1 bytes).
	ErrTooLarge = errors.New("snappy: decoded block is too large")
)

const (
	tagLiteral = 0x00
	tagCopy1   = 0x01
	tagCopy2   = 0x02
	tagCopy4   = 0x03

	blockSize        = 1 << 16 // snappy compresses 64 KiB fragments independently
	maxHashTableSize = 1 << 14
	inputMargin      = 15 // kInputMarginBytes: the main loop stops this close to the end
)

// MaxEncodedLen is the largest encoded size of n input bytes (snappy's
// MaxCompressedLength), or -1 when n is too large for the format.
func MaxEncodedLen(n int) int {
	if n < 0 || uint64(n) > math.MaxUint32 {
		return -1
	}
	return 32 + n + n/6
}

// Encode appends the snappy block encoding of src to dst.
func Encode(dst, src []byte) ([]byte, error) {
	max := MaxEncodedLen(len(src))
	if max < 0 {
		return dst, ErrTooLarge
	}
	dst = grow(dst, binary.MaxVarintLen32+max)
	dst = binary.AppendUvarint(dst, uint64(len(src)))
	// Go zeroes a declared array, so small inputs get a small table on the
	// stack and large ones a pooled full-size table.
	var small [smallTableSize]uint16
	table := small[:]
	if len(src) > smallTableSize {
		big := tablePool.Get().(*[maxHashTableSize]uint16)
		defer tablePool.Put(big)
		table = big[:]
	}
	for len(src) > 0 {
		p := src
		if len(p) > blockSize {
			p = p[:blockSize]
		}
		src = src[len(p):]
		dst = compressFragment(dst, p, table)
	}
	return dst, nil
}

const smallTableSize = 1 << 10

var tablePool = sync.Pool{New: func() any { return new([maxHashTableSize]uint16) }}

func grow(b []byte, n int) []byte {
	if cap(b)-len(b) < n {
		nb := make([]byte, len(b), len(b)+n)
		copy(nb, b)
		return nb
	}
	return b
}

func load32(b []byte, i int) uint32 { return binary.LittleEndian.Uint32(b[i:]) }
func load64(b []byte, i int) uint64 { return binary.LittleEndian.Uint64(b[i:]) }

func hash(u uint32, shift uint) uint32 { return (u * 0x1e35a7bd) >> shift }

// compressFragment is CompressFragment from snappy.cc, index for pointer.
func compressFragment(dst, src []byte, table []uint16) []byte {
	tableSize := 256
	for tableSize < maxHashTableSize && tableSize < len(src) {
		tableSize <<= 1
	}
	table = table[:tableSize]
	clear(table)
	shift := uint(32 - bits.Len(uint(tableSize)) + 1)

	nextEmit := 0
	if len(src) < inputMargin {
		return emitLiteral(dst, src)
	}
	ipLimit := len(src) - inputMargin
	ip := 1
	nextHash := hash(load32(src, ip), shift)
	for {
		// Step 1: find a 4-byte match, looking at fewer positions the
		// longer nothing matches (incompressible input stays fast).
		skip := uint32(32)
		nextIP := ip
		var candidate int
		for {
			ip = nextIP
			h := nextHash
			step := int(skip >> 5)
			skip++
			nextIP = ip + step
			if nextIP > ipLimit {
				goto emitRemainder
			}
			nextHash = hash(load32(src, nextIP), shift)
			candidate = int(table[h])
			table[h] = uint16(ip)
			if load32(src, ip) == load32(src, candidate) {
				break
			}
		}
		// Step 2: the bytes before the match are a literal.
		dst = emitLiteral(dst, src[nextEmit:ip])
		// Step 3: emit copies while the input right after a copy matches again.
		var x uint64
		for {
			base := ip
			matched := 4
			for i, j := candidate+4, ip+4; j < len(src) && src[i] == src[j]; i, j = i+1, j+1 {
				matched++
			}
			ip += matched
			dst = emitCopy(dst, base-candidate, matched)
			nextEmit = ip
			if ip >= ipLimit {
				goto emitRemainder
			}
			x = load64(src, ip-1)
			table[hash(uint32(x), shift)] = uint16(ip - 1)
			cur := hash(uint32(x>>8), shift)
			candidate = int(table[cur])
			table[cur] = uint16(ip)
			if uint32(x>>8) != load32(src, candidate) {
				break
			}
		}
		nextHash = hash(uint32(x>>16), shift)
		ip++
	}
emitRemainder:
	if nextEmit < len(src) {
		dst = emitLiteral(dst, src[nextEmit:])
	}
	return dst
}

func emitLiteral(dst, lit []byte) []byte {
	n := len(lit) - 1
	switch {
	case n < 60:
		dst = append(dst, byte(n)<<2|tagLiteral)
	case n < 1<<8:
		dst = append(dst, 60<<2|tagLiteral, byte(n))
	case n < 1<<16:
		dst = append(dst, 61<<2|tagLiteral, byte(n), byte(n>>8))
	case n < 1<<24:
		dst = append(dst, 62<<2|tagLiteral, byte(n), byte(n>>8), byte(n>>16))
	default:
		dst = append(dst, 63<<2|tagLiteral, byte(n), byte(n>>8), byte(n>>16), byte(n>>24))
	}
	return append(dst, lit...)
}

func emitCopyLessThan64(dst []byte, offset, length int) []byte {
	if length < 12 && offset < 2048 {
		return append(dst, tagCopy1|byte(length-4)<<2|byte(offset>>8)<<5, byte(offset))
	}
	return append(dst, tagCopy2|byte(length-1)<<2, byte(offset), byte(offset>>8))
}

func emitCopy(dst []byte, offset, length int) []byte {
	// Copies of 64, keeping at least 4 bytes for the last one.
	for length >= 68 {
		dst = emitCopyLessThan64(dst, offset, 64)
		length -= 64
	}
	if length > 64 {
		dst = emitCopyLessThan64(dst, offset, 60)
		length -= 60
	}
	return emitCopyLessThan64(dst, offset, length)
}

// DecodedLen returns the uncompressed length declared by the block's header.
func DecodedLen(src []byte) (int, error) {
	n, _, err := decodedLen(src)
	return n, err
}

func decodedLen(src []byte) (n, headerLen int, err error) {
	v, k := binary.Uvarint(src)
	if k <= 0 || k > binary.MaxVarintLen32 {
		return 0, 0, ErrCorrupt
	}
	if v > math.MaxUint32 {
		return 0, 0, ErrCorrupt
	}
	if uint64(int(v)) != v || int(v) < 0 {
		return 0, 0, ErrTooLarge
	}
	return int(v), k, nil
}

// Decode appends the decoding of the block src to dst. A block declaring more
// than maxLen bytes fails with ErrTooLarge before anything is allocated;
// malformed input fails with ErrCorrupt. Copies never reach into dst's
// original contents.
func Decode(dst, src []byte, maxLen int) ([]byte, error) {
	n, k, err := decodedLen(src)
	if err != nil {
		return dst, err
	}
	if n > maxLen {
		return dst, ErrTooLarge
	}
	// Every element yields at most 64 bytes per 2 input bytes (a copy) or
	// as many bytes as it carries (a literal), so a block cannot declare much
	// more than 32x its size; checking this first keeps a short hostile block
	// from allocating its declared length.
	if uint64(n) > 32*uint64(len(src)) {
		return dst, ErrCorrupt
	}
	start := len(dst)
	dst = grow(dst, n)
	out := dst[start : start+n]
	if !decodeBlock(out, src[k:]) {
		return dst, ErrCorrupt
	}
	return dst[:start+n], nil
}

// decodeBlock fills out exactly from the elements in src.
func decodeBlock(out, src []byte) bool {
	d, s := 0, 0
	for s < len(src) {
		var length, offset int
		switch src[s] & 0x03 {
		case tagLiteral:
			x := int(src[s] >> 2)
			switch {
			case x < 60:
				s++
			case x == 60:
				if s+2 > len(src) {
					return false
				}
				x = int(src[s+1])
				s += 2
			case x == 61:
				if s+3 > len(src) {
					return false
				}
				x = int(src[s+1]) | int(src[s+2])<<8
				s += 3
			case x == 62:
				if s+4 > len(src) {
					return false
				}
				x = int(src[s+1]) | int(src[s+2])<<8 | int(src[s+3])<<16
				s += 4
			default: // 63
				if s+5 > len(src) {
					return false
				}
				x = int(binary.LittleEndian.Uint32(src[s+1:]))
				s += 5
			}
			length = x + 1
			if length <= 0 || length > len(out)-d || length > len(src)-s {
				return false
			}
			copy(out[d:], src[s:s+length])
			d += length
			s += length
			continue
		case tagCopy1:
			if s+2 > len(src) {
				return false
			}
			length = 4 + int(src[s]>>2)&0x07
			offset = int(src[s]&0xe0)<<3 | int(src[s+1])
			s += 2
		case tagCopy2:
			if s+3 > len(src) {
				return false
			}
			length = 1 + int(src[s]>>2)
			offset = int(binary.LittleEndian.Uint16(src[s+1:]))
			s += 3
		case tagCopy4:
			if s+5 > len(src) {
				return false
			}
			length = 1 + int(src[s]>>2)
			offset = int(binary.LittleEndian.Uint32(src[s+1:]))
			s += 5
		}
		if offset <= 0 || offset > d || length > len(out)-d {
			return false
		}
		if offset >= length {
			copy(out[d:d+length], out[d-offset:])
			d += length
			continue
		}
		// Overlapping copy: repeats the last offset bytes (run-length style).
		for end := d + length; d < end; d++ {
			out[d] = out[d-offset]
		}
	}
	return d == len(out)
}
