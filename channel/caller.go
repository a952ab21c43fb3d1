package channel

import (
	"time"

	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/rpc"
)

// Caller sends one RPC; see rpc.Caller. *Channel and *SelectiveChannel
// implement it, generated stubs and clients take one.
type Caller = rpc.Caller

// CallOption sets one call of a context-first client (see rpc.CallOption):
//
//	client := echopb.NewEchoServiceClient(ch)
//	resp, err := client.Echo(ctx, req, channel.WithBackupRequestMs(5))
type CallOption = rpc.CallOption

// CallResult is what a call's Controller holds once it ended; see Result.
type CallResult = rpc.CallResult

// The call options, the same as package rpc's, here where a Channel's user
// looks for them.

// WithTimeout sets the call's timeout, rounded up to a millisecond.
func WithTimeout(d time.Duration) CallOption { return rpc.WithTimeout(d) }

// WithMaxRetry sets how many times a failed attempt may be retried.
func WithMaxRetry(n int) CallOption { return rpc.WithMaxRetry(n) }

// WithBackupRequestMs sends a backup after ms without an answer.
func WithBackupRequestMs(ms int64) CallOption { return rpc.WithBackupRequestMs(ms) }

// WithBackupRequestPolicy decides this call's backups with p.
func WithBackupRequestPolicy(p controller.BackupPolicy) CallOption {
	return rpc.WithBackupRequestPolicy(p)
}

// WithLogID sets the log id carried in the request meta.
func WithLogID(id int64) CallOption { return rpc.WithLogID(id) }

// WithRequestCode sets the key consistent-hashing load balancers hash.
func WithRequestCode(code uint64) CallOption { return rpc.WithRequestCode(code) }

// WithRequestCompressType compresses the request message with t.
func WithRequestCompressType(t controller.CompressType) CallOption {
	return rpc.WithRequestCompressType(t)
}

// WithRequestAttachment sends b after the request message.
func WithRequestAttachment(b []byte) CallOption { return rpc.WithRequestAttachment(b) }

// WithRequestUserField adds a user field (brpc's user_fields) to the request.
func WithRequestUserField(key, value string) CallOption {
	return rpc.WithRequestUserField(key, value)
}

// WithController runs set on the call's Controller before the call.
func WithController(set func(*controller.Controller)) CallOption { return rpc.WithController(set) }

// Result fills r with the call's results when it ends.
func Result(r *CallResult) CallOption { return rpc.Result(r) }
