// Package baidustd is the codec of brpc's baidu_std protocol: framing,
// RpcMeta, compression of the message and its CRC32C checksum, byte-compatible
// with C++ brpc (testdata/brpc-wire holds frames recorded from it).
//
// A frame is a 12-byte header ("PRPC", body_size, meta_size, big-endian),
// the RpcMeta, then the payload: the (possibly compressed) message followed
// by the raw attachment, whose length is in the meta.
//
// The package is the hot path of every RPC, so it allocates nothing in steady
// state: Meta is a flat struct encoded and decoded by hand (protocol/meta has
// the generated protobuf types it is tested against), decoded byte fields
// alias the frame, and Cut on a growing buffer is the whole incremental parser.
//
// Writing a request and reading it back:
//
//	m := baidustd.Meta{HasRequest: true, ServiceName: "example.EchoService",
//		MethodName: "Echo", CorrelationID: 1}
//	frame, err := baidustd.AppendFrame(buf[:0], &m, msgBytes, attachment)
//
//	// reader side: buf holds what was read so far
//	n, err := baidustd.Cut(buf, baidustd.DefaultMaxBodySize)
//	if errors.Is(err, baidustd.ErrNotEnoughData) { /* read more */ }
//	var in baidustd.Meta
//	msg, att, err := baidustd.DecodeFrame(buf[:n], &in)
//	if err == nil { err = baidustd.VerifyChecksum(&in, msg, att) }
//	if err == nil { msg, err = baidustd.DecompressLimit(nil, in.CompressType, msg, maxBody) }
//	buf = buf[n:] // the next frame, if any
//
// Order on receipt, as brpc: split off the attachment, verify the checksum
// over the bytes as received, then decompress, then unmarshal.
package baidustd
