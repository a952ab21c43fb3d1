package grpcpb

import "github.com/gobrpc/gobrpc/tools/bench/echobenchpb"

// The messages of echo.proto, generated once in package echobenchpb.
type (
	EchoRequest  = echobenchpb.EchoRequest
	EchoResponse = echobenchpb.EchoResponse
)
