// Package meta holds the protobuf definition of brpc's baidu_std RpcMeta
// (rpc_meta.proto) and its generated Go code.
//
// The messages are wire-compatible with apache/brpc: same field numbers, same
// types, proto2 presence. They are the reference definition of the meta; the
// hot path does not use them. protocol/baidustd encodes and decodes the meta by
// hand into a flat struct without allocating, and its tests check that codec
// against these types in both directions.
//
// Use these types when convenience beats speed, e.g. in tools and tests:
//
//	var m meta.RpcMeta
//	if err := proto.Unmarshal(frame[12:12+metaSize], &m); err != nil { ... }
//	fmt.Println(m.GetRequest().GetServiceName(), m.GetCorrelationId())
package meta
