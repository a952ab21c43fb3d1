// Package grpc holds what gobrpc needs of the gRPC wire protocol (brpc's
// "h2:grpc", unary calls) on top of the standard library's HTTP/2: status
// codes and their mapping to brpc's error codes, the grpc-timeout header,
// length-prefixed messages, grpc-message's percent-encoding and metadata
// headers. HTTP/2 itself (frames, HPACK, flow control) is net/http's; the
// server and the channel use this package to speak gRPC over it.
//
// Handlers and callers read a call's gRPC status with StatusOf; a handler
// answers a status brpc's error codes cannot name (NOT_FOUND, ...) with
// SetStatus. Metadata is the Controller's user fields: a request's
// metadata is cntl.RequestUserFields() on the server, a handler's
// cntl.ResponseUserFields() go back as response metadata.
package grpc
