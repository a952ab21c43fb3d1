package baidustd

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/gobrpc/gobrpc/protocol/meta"
)

// toProto builds the generated message our encoder should be equal to,
// presence following Meta's writing rules.
func toProto(t testing.TB, m *Meta) *meta.RpcMeta {
	t.Helper()
	p := &meta.RpcMeta{CorrelationId: proto.Int64(m.CorrelationID)}
	if m.HasRequest {
		r := &meta.RpcRequestMeta{ServiceName: proto.String(m.ServiceName), MethodName: proto.String(m.MethodName)}
		if m.HasLogID {
			r.LogId = proto.Int64(m.LogID)
		}
		if m.TraceID != 0 {
			r.TraceId = proto.Int64(m.TraceID)
		}
		if m.SpanID != 0 {
			r.SpanId = proto.Int64(m.SpanID)
		}
		if m.ParentSpanID != 0 {
			r.ParentSpanId = proto.Int64(m.ParentSpanID)
		}
		if m.RequestID != "" {
			r.RequestId = proto.String(m.RequestID)
		}
		if m.TimeoutMs > 0 {
			r.TimeoutMs = proto.Int32(m.TimeoutMs)
		}
		p.Request = r
	}
	if m.HasResponse {
		p.Response = &meta.RpcResponseMeta{ErrorCode: proto.Int32(m.ErrorCode)}
		if m.ErrorText != "" {
			p.Response.ErrorText = proto.String(m.ErrorText)
		}
	}
	if !m.Sparse || m.CompressType != 0 {
		p.CompressType = proto.Int32(m.CompressType)
	}
	if m.AttachmentSize > 0 {
		p.AttachmentSize = proto.Int32(m.AttachmentSize)
	}
	p.AuthenticationData = m.AuthenticationData
	if m.StreamSettings != nil {
		p.StreamSettings = &meta.StreamSettings{}
		if err := proto.Unmarshal(m.StreamSettings, p.StreamSettings); err != nil {
			t.Fatal(err)
		}
	}
	if len(m.UserFields) > 0 {
		p.UserFields = m.UserFields
	}
	if !m.Sparse || m.ContentType != 0 {
		p.ContentType = meta.ContentType(m.ContentType).Enum()
	}
	if !m.Sparse || m.ChecksumType != 0 {
		p.ChecksumType = proto.Int32(m.ChecksumType)
	}
	if !m.Sparse || len(m.ChecksumValue) > 0 {
		p.ChecksumValue = m.ChecksumValue
		if p.ChecksumValue == nil {
			p.ChecksumValue = []byte{}
		}
	}
	if m.ChecksumWithAttachment {
		p.ChecksumWithAttachment = proto.Bool(true)
	}
	return p
}

// fromProto is what DecodeMeta must produce for the message p.
func fromProto(t testing.TB, p *meta.RpcMeta) Meta {
	t.Helper()
	var m Meta
	if r := p.Request; r != nil {
		m.HasRequest = true
		m.ServiceName, m.MethodName = r.GetServiceName(), r.GetMethodName()
		m.LogID, m.HasLogID = r.GetLogId(), r.LogId != nil
		m.TraceID, m.SpanID, m.ParentSpanID = r.GetTraceId(), r.GetSpanId(), r.GetParentSpanId()
		m.RequestID = r.GetRequestId()
		m.TimeoutMs = max(r.GetTimeoutMs(), 0)
	}
	if r := p.Response; r != nil {
		m.HasResponse = true
		m.ErrorCode, m.ErrorText = r.GetErrorCode(), r.GetErrorText()
	}
	m.CompressType = p.GetCompressType()
	m.CorrelationID = p.GetCorrelationId()
	m.AttachmentSize = p.GetAttachmentSize()
	m.AuthenticationData = p.AuthenticationData
	if p.StreamSettings != nil {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(p.StreamSettings)
		if err != nil {
			t.Fatal(err)
		}
		m.StreamSettings = b
		if m.StreamSettings == nil {
			m.StreamSettings = []byte{}
		}
	}
	if len(p.UserFields) > 0 {
		m.UserFields = p.UserFields
	}
	// proto2 enums are closed: C++ (so brpc, and DecodeMeta) treats an
	// out-of-range content_type as an unknown field. Go's generated code keeps
	// it (Go treats every enum as open), so it is dropped here.
	contentType := p.ContentType != nil && *p.ContentType >= 0 && *p.ContentType <= 3
	if contentType {
		m.ContentType = int32(*p.ContentType)
	}
	m.ChecksumType = p.GetChecksumType()
	if len(p.ChecksumValue) > 0 {
		m.ChecksumValue = p.ChecksumValue
	}
	m.ChecksumWithAttachment = p.GetChecksumWithAttachment()
	m.Sparse = p.CompressType == nil && !contentType && p.ChecksumType == nil && p.ChecksumValue == nil
	return m
}

// metaDiff names the exported fields that differ.
func metaDiff(a, b *Meta) string {
	va, vb := reflect.ValueOf(*a), reflect.ValueOf(*b)
	var d []string
	for i := range va.NumField() {
		f := va.Type().Field(i)
		if f.IsExported() && !reflect.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()) {
			d = append(d, fmt.Sprintf("%s: %#v != %#v", f.Name, va.Field(i).Interface(), vb.Field(i).Interface()))
		}
	}
	return strings.Join(d, "\n")
}

func randomMeta(r *rand.Rand) Meta {
	ints := []int64{0, 1, -1, 127, 128, math.MaxInt32, math.MinInt32, math.MaxInt64, math.MinInt64, 1 << 32}
	i64 := func() int64 {
		if r.IntN(2) == 0 {
			return ints[r.IntN(len(ints))]
		}
		return r.Int64() >> r.IntN(64)
	}
	i32 := func() int32 { return int32(i64()) }
	str := func() string {
		b := make([]byte, r.IntN(3)*r.IntN(80))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return string(b)
	}
	bts := func() []byte {
		switch r.IntN(3) {
		case 0:
			return nil
		case 1:
			return []byte{}
		}
		return []byte(str() + "x")
	}
	var m Meta
	if r.IntN(2) == 0 {
		m.HasRequest, m.ServiceName, m.MethodName = true, str(), str()
		m.HasLogID = r.IntN(2) == 0
		if m.HasLogID {
			m.LogID = i64()
		}
		if r.IntN(2) == 0 {
			m.TraceID, m.SpanID, m.ParentSpanID = i64(), i64(), i64()
		}
		m.RequestID = str()
		m.TimeoutMs = max(i32(), 0)
	}
	if r.IntN(2) == 0 {
		m.HasResponse, m.ErrorCode, m.ErrorText = true, i32(), str()
	}
	m.Sparse = r.IntN(4) == 0
	if !m.Sparse || r.IntN(2) == 0 {
		m.CompressType, m.ContentType, m.ChecksumType = i32(), int32(r.IntN(4)), i32()
		m.ChecksumValue = bts()
	}
	m.CorrelationID = i64()
	m.AttachmentSize = max(i32(), 0)
	m.AuthenticationData = bts()
	if r.IntN(3) == 0 {
		ss := &meta.StreamSettings{StreamId: proto.Int64(i64()), Writable: proto.Bool(r.IntN(2) == 0)}
		for range r.IntN(3) {
			ss.ExtraStreamIds = append(ss.ExtraStreamIds, i64())
		}
		m.StreamSettings, _ = proto.MarshalOptions{Deterministic: true}.Marshal(ss)
	}
	if n := r.IntN(12) - 6; n > 0 {
		m.UserFields = map[string]string{}
		for range n {
			m.UserFields[str()] = str()
		}
	}
	m.ChecksumWithAttachment = r.IntN(2) == 0
	return m
}

func TestCrossCheckGenerated(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	det := proto.MarshalOptions{Deterministic: true}
	for i := range 3000 {
		m := randomMeta(r)
		ours := AppendMeta(nil, &m)
		if len(ours) != m.Size() {
			t.Fatalf("#%d: Size() = %d, encoded %d", i, m.Size(), len(ours))
		}
		// Ours -> generated.
		var p meta.RpcMeta
		if err := proto.Unmarshal(ours, &p); err != nil {
			t.Fatalf("#%d: generated code rejects our encoding %x: %v", i, ours, err)
		}
		want := m
		// Sparse reads back true only when none of its four fields was written.
		want.Sparse = m.Sparse && m.CompressType == 0 && m.ContentType == 0 && m.ChecksumType == 0 && len(m.ChecksumValue) == 0
		if len(m.ChecksumValue) == 0 {
			want.ChecksumValue = nil // reads back as nil
		}
		if got := fromProto(t, &p); !metaEqual(&got, &want) {
			t.Fatalf("#%d: generated code reads differently:\n%s", i, metaDiff(&got, &want))
		}
		// Generated -> ours, and byte-identical encodings (field order, map order, sizes).
		theirs, err := det.Marshal(toProto(t, &m))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(ours, theirs) {
			t.Fatalf("#%d: encodings differ\nours   %x\ntheirs %x", i, ours, theirs)
		}
		var back Meta
		if err := DecodeMeta(theirs, &back); err != nil {
			t.Fatalf("#%d: DecodeMeta(proto.Marshal): %v", i, err)
		}
		if !metaEqual(&back, &want) {
			t.Fatalf("#%d: decoded differently:\n%s", i, metaDiff(&back, &want))
		}
	}
}

// TestCrossCheckGolden parses every golden meta with the generated code too.
func TestCrossCheckGolden(t *testing.T) {
	for _, name := range goldenNames(t) {
		frame := readGolden(t, name)
		metaSize := binary.BigEndian.Uint32(frame[8:])
		var p meta.RpcMeta
		if err := proto.Unmarshal(frame[HeaderSize:HeaderSize+metaSize], &p); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var m Meta
		if _, _, err := DecodeFrame(frame, &m); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if want := fromProto(t, &p); !metaEqual(&m, &want) {
			t.Fatalf("%s: ours %+v\ngenerated %+v", name, m, want)
		}
	}
}

// checkAgainstGenerated decodes b with both codecs: they must agree on
// success and on the result. Used by the mutation test and FuzzMeta.
func checkAgainstGenerated(t testing.TB, b []byte) {
	var p meta.RpcMeta
	perr := proto.Unmarshal(b, &p)
	var m Meta
	err := DecodeMeta(b, &m)
	if (perr == nil) != (err == nil) {
		t.Fatalf("meta %x: generated says %v, we say %v", b, perr, err)
	}
	if err != nil {
		if !errors.Is(err, ErrBadMeta) {
			t.Fatalf("meta %x: error %v is not ErrBadMeta", b, err)
		}
		return
	}
	want := fromProto(t, &p)
	if p.ContentType != nil && (*p.ContentType < 0 || *p.ContentType > 3) {
		// Go kept the last, out-of-range value; an earlier valid one, which
		// C++ and we keep, is lost to fromProto: do not compare.
		want.ContentType, want.Sparse = m.ContentType, m.Sparse
	}
	if m.StreamSettings != nil { // raw bytes vs re-marshalled: compare as messages
		var a meta.StreamSettings
		if proto.Unmarshal(m.StreamSettings, &a) != nil || !proto.Equal(&a, p.StreamSettings) {
			t.Fatalf("meta %x: stream settings differ", b)
		}
		m.StreamSettings, want.StreamSettings = nil, nil
	}
	if !metaEqual(&m, &want) {
		t.Fatalf("meta %x:\n%s", b, metaDiff(&m, &want))
	}
}

func TestCrossCheckMutations(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	var seeds [][]byte
	for _, name := range goldenNames(t) {
		frame := readGolden(t, name)
		seeds = append(seeds, frame[HeaderSize:HeaderSize+binary.BigEndian.Uint32(frame[8:])])
	}
	for range 200 {
		m := randomMeta(r)
		seeds = append(seeds, AppendMeta(nil, &m))
	}
	for range 20000 {
		b := bytes.Clone(seeds[r.IntN(len(seeds))])
		for range 1 + r.IntN(4) {
			if len(b) == 0 {
				break
			}
			switch r.IntN(4) {
			case 0:
				b[r.IntN(len(b))] = byte(r.Uint32())
			case 1:
				b[r.IntN(len(b))] ^= 1 << r.IntN(8)
			case 2:
				b = b[:r.IntN(len(b))]
			case 3:
				j := r.IntN(len(b))
				b = append(b[:j:j], append([]byte{byte(r.Uint32())}, b[j:]...)...)
			}
		}
		checkAgainstGenerated(t, b)
	}
}
