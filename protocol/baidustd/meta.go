package baidustd

import (
	"fmt"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
)

// Values of Meta.CompressType (brpc's CompressType).
const (
	CompressNone   int32 = 0
	CompressSnappy int32 = 1
	CompressGzip   int32 = 2
	CompressZlib   int32 = 3
	CompressLZ4    int32 = 4 // declared by brpc, but no codec: unsupported
)

// Values of Meta.ContentType (brpc's ContentType): how the message is serialized.
const (
	ContentPB        int32 = 0
	ContentJSON      int32 = 1
	ContentProtoJSON int32 = 2
	ContentProtoText int32 = 3
)

// Values of Meta.ChecksumType (brpc's ChecksumType).
const (
	ChecksumNone   int32 = 0
	ChecksumCRC32C int32 = 1
)

// Meta is brpc.policy.RpcMeta flattened into a plain struct, encoded and
// decoded by hand so that a reused Meta costs no allocation. Field numbers are
// in the comments; proto2 presence is kept where it matters.
//
// To produce the bytes C++ brpc produces, leave Sparse false and set:
//   - client (PackRpcRequest): HasRequest, ServiceName (full name),
//     MethodName, CorrelationID, CompressType, ContentType; ChecksumType and
//     ChecksumValue through SetChecksum when checksumming; HasLogID and LogID
//     only if the user set a log id (brpc's echo_client sets one, even 0);
//     RequestID, TimeoutMs, UserFields, AuthenticationData when it has them.
//   - server (SendRpcResponse): HasResponse, ErrorCode (0 on success; brpc
//     sends -1 as 2001), ErrorText, CorrelationID (echoed), CompressType,
//     ContentType, ChecksumType/ChecksumValue. Quirk: when the response is not
//     checksummed, brpc still copies the request's checksum_value into the
//     response (see testdata checksum.response.bin); receivers ignore it since
//     checksum_type is 0, so a server need not copy it unless it wants
//     identical bytes.
//
// AppendFrame sets AttachmentSize itself. Fields are written in field-number
// order, as protobuf does. Decoding a request into a reused Meta allocates
// nothing (byte fields alias the frame; the service and method names are
// cached while they repeat); ErrorText, RequestID and UserFields allocate when
// present.
type Meta struct {
	// RpcRequestMeta (field 1), written iff HasRequest.
	HasRequest  bool
	ServiceName string // request.1, required: always written
	MethodName  string // request.2, required: always written
	LogID       int64  // request.3, written iff HasLogID
	HasLogID    bool
	// request.4-6, each written only when non-zero (brpc writes them when the RPC is traced).
	TraceID, SpanID, ParentSpanID int64
	RequestID                     string // request.7, written only when non-empty
	// request.8, written only when > 0. Decoding maps a non-positive value to 0 (no timeout).
	TimeoutMs int32

	// RpcResponseMeta (field 2), written iff HasResponse.
	HasResponse bool
	ErrorCode   int32  // response.1, always written
	ErrorText   string // response.2, written only when non-empty

	CompressType   int32 // 3, see Sparse
	CorrelationID  int64 // 4, always written
	AttachmentSize int32 // 5, written only when > 0; set by AppendFrame
	// 6 chunk_info is not supported (neither by brpc); it is validated and skipped when decoding.
	AuthenticationData []byte // 7, written only when non-nil (may be empty)
	// 8: the serialized brpc.StreamSettings, kept opaque (gobrpc has no
	// streaming RPC, but a server can see that one was asked for). Written
	// only when non-nil.
	StreamSettings []byte
	// 9, map<string,string>, written only when non-empty, keys sorted (as
	// protobuf's deterministic mode). Decoding allocates the map only when the
	// field is present.
	UserFields             map[string]string
	ContentType            int32  // 10, see Sparse. Values outside 0..3 are dropped when decoding, like proto2 closed enums.
	ChecksumType           int32  // 11, see Sparse
	ChecksumValue          []byte // 12, see Sparse (written, maybe empty, whenever !Sparse); decodes as nil when empty
	ChecksumWithAttachment bool   // 13, written only when true

	// Sparse leaves compress_type, content_type and checksum_type out when
	// they are 0 and checksum_value when it is empty. brpc's client and server
	// always write these four fields, so keep it false to match brpc; it exists
	// for minimal third-party clients (like the hand-built requests in
	// testdata). DecodeMeta sets it when none of the four was present, so a
	// decoded frame re-encodes to the same bytes.
	Sparse bool

	checksum [4]byte // backs ChecksumValue after SetChecksum
	// The last decoded names, reused while they repeat so that decoding a
	// request does not allocate them again. Reset keeps them.
	serviceCache, methodCache string
}

// Reset clears m for reuse.
func (m *Meta) Reset() {
	svc, mth := m.serviceCache, m.methodCache
	*m = Meta{}
	m.serviceCache, m.methodCache = svc, mth
}

// SetChecksum sets ChecksumType to CRC32C and ChecksumValue to brpc's checksum
// of message (as sent, i.e. after compression) and, if
// m.ChecksumWithAttachment, of attachment too. It does not allocate: the value
// lives in m.
func (m *Meta) SetChecksum(message, attachment []byte) {
	m.ChecksumType = ChecksumCRC32C
	m.ChecksumValue = AppendChecksum(m.checksum[:0], message, attachment, m.ChecksumWithAttachment)
}

func sizeInt32(v int32) int { return protowire.SizeVarint(uint64(int64(v))) } // int32 is sign-extended on the wire

func (m *Meta) requestSize() int {
	n := 2 + protowire.SizeBytes(len(m.ServiceName)) + protowire.SizeBytes(len(m.MethodName))
	if m.HasLogID {
		n += 1 + protowire.SizeVarint(uint64(m.LogID))
	}
	for _, v := range [...]int64{m.TraceID, m.SpanID, m.ParentSpanID} {
		if v != 0 {
			n += 1 + protowire.SizeVarint(uint64(v))
		}
	}
	if m.RequestID != "" {
		n += 1 + protowire.SizeBytes(len(m.RequestID))
	}
	if m.TimeoutMs > 0 {
		n += 1 + sizeInt32(m.TimeoutMs)
	}
	return n
}

func (m *Meta) responseSize() int {
	n := 1 + sizeInt32(m.ErrorCode)
	if m.ErrorText != "" {
		n += 1 + protowire.SizeBytes(len(m.ErrorText))
	}
	return n
}

func entrySize(k, v string) int {
	return 2 + protowire.SizeBytes(len(k)) + protowire.SizeBytes(len(v))
}

// Size is the encoded size of m (the frame's meta_size).
func (m *Meta) Size() int {
	n := 0 // every tag here is one byte: field numbers are below 16
	if m.HasRequest {
		n += 1 + protowire.SizeBytes(m.requestSize())
	}
	if m.HasResponse {
		n += 1 + protowire.SizeBytes(m.responseSize())
	}
	if !m.Sparse || m.CompressType != 0 {
		n += 1 + sizeInt32(m.CompressType)
	}
	n += 1 + protowire.SizeVarint(uint64(m.CorrelationID))
	if m.AttachmentSize > 0 {
		n += 1 + sizeInt32(m.AttachmentSize)
	}
	if m.AuthenticationData != nil {
		n += 1 + protowire.SizeBytes(len(m.AuthenticationData))
	}
	if m.StreamSettings != nil {
		n += 1 + protowire.SizeBytes(len(m.StreamSettings))
	}
	for k, v := range m.UserFields {
		n += 1 + protowire.SizeBytes(entrySize(k, v))
	}
	if !m.Sparse || m.ContentType != 0 {
		n += 1 + sizeInt32(m.ContentType)
	}
	if !m.Sparse || m.ChecksumType != 0 {
		n += 1 + sizeInt32(m.ChecksumType)
	}
	if !m.Sparse || len(m.ChecksumValue) > 0 {
		n += 1 + protowire.SizeBytes(len(m.ChecksumValue))
	}
	if m.ChecksumWithAttachment {
		n += 2
	}
	return n
}

// AppendMeta appends the protobuf encoding of m (a brpc.policy.RpcMeta) to b.
func AppendMeta(b []byte, m *Meta) []byte { return m.appendTo(b, m.Size()) }

// Every field number here is below 16, so a tag is one byte; small varints
// (the common case) are one byte too. These fast paths halve encoding time.
func tag(num protowire.Number, typ protowire.Type) byte { return byte(num)<<3 | byte(typ) }

func appendVarint(b []byte, v uint64) []byte {
	if v < 0x80 {
		return append(b, byte(v))
	}
	return protowire.AppendVarint(b, v)
}

func appendInt32(b []byte, num protowire.Number, v int32) []byte {
	return appendVarint(append(b, tag(num, protowire.VarintType)), uint64(int64(v)))
}

func appendInt64(b []byte, num protowire.Number, v int64) []byte {
	return appendVarint(append(b, tag(num, protowire.VarintType)), uint64(v))
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	b = appendVarint(append(b, tag(num, protowire.BytesType)), uint64(len(s)))
	return append(b, s...)
}

func appendBytes(b []byte, num protowire.Number, v []byte) []byte {
	b = appendVarint(append(b, tag(num, protowire.BytesType)), uint64(len(v)))
	return append(b, v...)
}

func (m *Meta) appendTo(b []byte, size int) []byte {
	b = slices.Grow(b, size)
	if m.HasRequest {
		b = appendVarint(append(b, tag(1, protowire.BytesType)), uint64(m.requestSize()))
		b = appendString(b, 1, m.ServiceName)
		b = appendString(b, 2, m.MethodName)
		if m.HasLogID {
			b = appendInt64(b, 3, m.LogID)
		}
		if m.TraceID != 0 {
			b = appendInt64(b, 4, m.TraceID)
		}
		if m.SpanID != 0 {
			b = appendInt64(b, 5, m.SpanID)
		}
		if m.ParentSpanID != 0 {
			b = appendInt64(b, 6, m.ParentSpanID)
		}
		if m.RequestID != "" {
			b = appendString(b, 7, m.RequestID)
		}
		if m.TimeoutMs > 0 {
			b = appendInt32(b, 8, m.TimeoutMs)
		}
	}
	if m.HasResponse {
		b = appendVarint(append(b, tag(2, protowire.BytesType)), uint64(m.responseSize()))
		b = appendInt32(b, 1, m.ErrorCode)
		if m.ErrorText != "" {
			b = appendString(b, 2, m.ErrorText)
		}
	}
	if !m.Sparse || m.CompressType != 0 {
		b = appendInt32(b, 3, m.CompressType)
	}
	b = appendInt64(b, 4, m.CorrelationID)
	if m.AttachmentSize > 0 {
		b = appendInt32(b, 5, m.AttachmentSize)
	}
	if m.AuthenticationData != nil {
		b = appendBytes(b, 7, m.AuthenticationData)
	}
	if m.StreamSettings != nil {
		b = appendBytes(b, 8, m.StreamSettings)
	}
	if len(m.UserFields) > 0 {
		b = m.appendUserFields(b)
	}
	if !m.Sparse || m.ContentType != 0 {
		b = appendInt32(b, 10, m.ContentType)
	}
	if !m.Sparse || m.ChecksumType != 0 {
		b = appendInt32(b, 11, m.ChecksumType)
	}
	if !m.Sparse || len(m.ChecksumValue) > 0 {
		b = appendBytes(b, 12, m.ChecksumValue)
	}
	if m.ChecksumWithAttachment {
		b = append(b, tag(13, protowire.VarintType), 1)
	}
	return b
}

func (m *Meta) appendUserFields(b []byte) []byte {
	var stack [8]string // sorting a few keys allocates nothing
	keys := stack[:0]
	for k := range m.UserFields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := m.UserFields[k]
		b = appendVarint(append(b, tag(9, protowire.BytesType)), uint64(entrySize(k, v)))
		b = appendString(b, 1, k) // protobuf writes both key and value of a map entry, even when empty
		b = appendString(b, 2, v)
	}
	return b
}

// consumeTag is protowire.ConsumeTag that also rejects field numbers above
// 2^29-1 (which protowire lets through but protobuf parsers reject).
func consumeTag(b []byte) (protowire.Number, protowire.Type, int) {
	if len(b) > 0 && b[0] < 0x80 && b[0] >= 8 { // one-byte tag of fields 1..15
		return protowire.Number(b[0] >> 3), protowire.Type(b[0] & 7), 1
	}
	num, typ, n := protowire.ConsumeTag(b)
	if n >= 0 && num > protowire.MaxValidNumber {
		return 0, 0, errFieldNumber
	}
	return num, typ, n
}

func consumeVarint(b []byte) (uint64, int) {
	if len(b) > 0 && b[0] < 0x80 {
		return uint64(b[0]), 1
	}
	return protowire.ConsumeVarint(b)
}

// consumeBytes clips the capacity of what it returns: decoded byte fields
// alias the frame, and appending to one must not overwrite the next field.
func consumeBytes(b []byte) ([]byte, int) {
	if len(b) > 0 && b[0] < 0x80 {
		if n := int(b[0]); n < len(b) {
			return b[1 : 1+n : 1+n], 1 + n
		}
	}
	v, n := protowire.ConsumeBytes(b)
	return v[:len(v):len(v)], n
}

// errFieldNumber is a length code beside protowire's (which are -1..-7 today).
const errFieldNumber = -1000

func parseErr(n int) error {
	if n == errFieldNumber {
		return fmt.Errorf("%w: invalid field number", ErrBadMeta)
	}
	return fmt.Errorf("%w: %w", ErrBadMeta, protowire.ParseError(n))
}

func missing(field string) error {
	return fmt.Errorf("%w: missing required field %s", ErrBadMeta, field)
}

// maxInterned bounds the names a reused Meta keeps between frames: real
// service and method names are short, and a connection must not hold on to
// a 10 MB name someone sent once while it sits idle.
const maxInterned = 256

// intern returns b as a string, reusing *cache when equal (no allocation:
// the compiler does not copy for the comparison). Names longer than
// maxInterned are not cached.
func intern(cache *string, b []byte) string {
	if string(b) == *cache {
		return *cache
	}
	if len(b) > maxInterned {
		*cache = ""
		return string(b)
	}
	*cache = string(b)
	return *cache
}

// DecodeMeta parses an encoded brpc.policy.RpcMeta into m, after Reset.
// Like protobuf: later scalars win, repeated sub-messages merge, unknown
// fields and fields with an unexpected wire type are skipped. Like brpc
// (which fails the parse and closes the connection), a request meta without
// service_name or method_name, or a chunk_info or stream_settings without its
// required fields, is ErrBadMeta. Bytes fields alias b; strings are copies.
func DecodeMeta(b []byte, m *Meta) error {
	m.Reset()
	var (
		present              uint8 // fields 3, 10, 11, 12, for Sparse
		reqFields            uint8 // service_name, method_name seen
		chunkSeen            bool
		chunkFields          uint8
		streamSeen, streamID bool
	)
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return parseErr(n)
		}
		b = b[n:]
		switch typ {
		case protowire.VarintType:
			v, n := consumeVarint(b)
			if n < 0 {
				return parseErr(n)
			}
			b = b[n:]
			switch num {
			case 3:
				m.CompressType = int32(v)
				present |= 1
			case 4:
				m.CorrelationID = int64(v)
			case 5:
				m.AttachmentSize = int32(v)
			case 10:
				if e := int32(v); e >= ContentPB && e <= ContentProtoText {
					m.ContentType = e
					present |= 2
				}
			case 11:
				m.ChecksumType = int32(v)
				present |= 4
			case 13:
				m.ChecksumWithAttachment = v != 0
			}
		case protowire.BytesType:
			v, n := consumeBytes(b)
			if n < 0 {
				return parseErr(n)
			}
			b = b[n:]
			switch num {
			case 1:
				m.HasRequest = true
				if err := m.decodeRequest(v, &reqFields); err != nil {
					return err
				}
			case 2:
				m.HasResponse = true
				if err := m.decodeResponse(v); err != nil {
					return err
				}
			case 6:
				chunkSeen = true
				f, err := requiredVarints(v)
				if err != nil {
					return err
				}
				chunkFields |= f
			case 7:
				m.AuthenticationData = v
			case 8:
				streamSeen = true
				f, err := requiredVarints(v)
				if err != nil {
					return err
				}
				streamID = streamID || f&1 != 0
				if m.StreamSettings == nil {
					m.StreamSettings = v
				} else { // a repeated message field merges: concatenation is the merge
					m.StreamSettings = append(m.StreamSettings[:len(m.StreamSettings):len(m.StreamSettings)], v...)
				}
			case 9:
				if err := m.decodeUserField(v); err != nil {
					return err
				}
			case 12:
				m.ChecksumValue = nil // an empty value reads as nil: it is written whenever !Sparse
				if len(v) > 0 {
					m.ChecksumValue = v
				}
				present |= 8
			}
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return parseErr(n)
			}
			b = b[n:]
		}
	}
	if m.HasRequest && reqFields != 3 {
		if reqFields&1 == 0 {
			return missing("request.service_name")
		}
		return missing("request.method_name")
	}
	if chunkSeen && chunkFields != 3 {
		return missing("chunk_info.stream_id/chunk_id")
	}
	if streamSeen && !streamID {
		return missing("stream_settings.stream_id")
	}
	if m.TimeoutMs < 0 {
		m.TimeoutMs = 0
	}
	m.Sparse = present == 0
	return nil
}

func (m *Meta) decodeRequest(b []byte, fields *uint8) error {
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return parseErr(n)
		}
		b = b[n:]
		switch {
		case typ == protowire.VarintType:
			v, n := consumeVarint(b)
			if n < 0 {
				return parseErr(n)
			}
			b = b[n:]
			switch num {
			case 3:
				m.LogID, m.HasLogID = int64(v), true
			case 4:
				m.TraceID = int64(v)
			case 5:
				m.SpanID = int64(v)
			case 6:
				m.ParentSpanID = int64(v)
			case 8:
				m.TimeoutMs = int32(v)
			}
		case typ == protowire.BytesType:
			v, n := consumeBytes(b)
			if n < 0 {
				return parseErr(n)
			}
			b = b[n:]
			switch num {
			case 1:
				m.ServiceName = intern(&m.serviceCache, v)
				*fields |= 1
			case 2:
				m.MethodName = intern(&m.methodCache, v)
				*fields |= 2
			case 7:
				m.RequestID = string(v)
			}
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return parseErr(n)
			}
			b = b[n:]
		}
	}
	return nil
}

func (m *Meta) decodeResponse(b []byte) error {
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return parseErr(n)
		}
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.VarintType:
			v, n := consumeVarint(b)
			if n < 0 {
				return parseErr(n)
			}
			b = b[n:]
			m.ErrorCode = int32(v)
		case num == 2 && typ == protowire.BytesType:
			v, n := consumeBytes(b)
			if n < 0 {
				return parseErr(n)
			}
			b = b[n:]
			m.ErrorText = string(v)
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return parseErr(n)
			}
			b = b[n:]
		}
	}
	return nil
}

// decodeUserField parses one map entry {1: key, 2: value}; a missing key or
// value is "", as in protobuf.
func (m *Meta) decodeUserField(b []byte) error {
	var k, v []byte
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return parseErr(n)
		}
		b = b[n:]
		if typ == protowire.BytesType && (num == 1 || num == 2) {
			s, n := consumeBytes(b)
			if n < 0 {
				return parseErr(n)
			}
			b = b[n:]
			if num == 1 {
				k = s
			} else {
				v = s
			}
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return parseErr(n)
		}
		b = b[n:]
	}
	if m.UserFields == nil {
		m.UserFields = make(map[string]string)
	}
	m.UserFields[string(k)] = string(v)
	return nil
}

// requiredVarints checks that b is a well-formed message and reports which of
// the varint fields 1 (bit 0) and 2 (bit 1) it holds: the required fields of
// ChunkInfo and StreamSettings. A packed field 4 (StreamSettings'
// extra_stream_ids) must hold whole varints.
func requiredVarints(b []byte) (uint8, error) {
	var f uint8
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return 0, parseErr(n)
		}
		b = b[n:]
		if typ == protowire.VarintType && (num == 1 || num == 2) {
			f |= 1 << (num - 1)
		}
		if typ == protowire.BytesType && num == 4 {
			if packed, k := consumeBytes(b); k >= 0 {
				for len(packed) > 0 {
					_, k = protowire.ConsumeVarint(packed)
					if k < 0 {
						return 0, parseErr(k)
					}
					packed = packed[k:]
				}
			}
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return 0, parseErr(n)
		}
		b = b[n:]
	}
	return f, nil
}
