package channel

import (
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/gobrpc/gobrpc/controller"
)

// Caller sends one RPC. *Channel implements it (and, later, SelectiveChannel);
// generated stubs take a Caller, so tests and middleware can wrap one.
//
// With done == nil the call is synchronous: CallMethod returns when cntl
// holds the result. Otherwise CallMethod returns at once and done runs
// exactly once after cntl holds the result; req and resp must stay
// untouched until then.
type Caller interface {
	CallMethod(md protoreflect.MethodDescriptor, cntl *controller.Controller, req, resp proto.Message, done func())
}
