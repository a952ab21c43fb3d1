// Package rpc is what generated code needs, and nothing more: the Caller a
// client stub calls through, the descriptors a server registration
// builds, the Registrar it registers on, and the per-call options of the
// context-first clients. It imports neither channel nor server, so a
// binary that only calls services links no server (its flags, pages and
// pprof handlers), and one that only serves links no client.
//
// *channel.Channel and *channel.SelectiveChannel are Callers;
// *server.Server is a Registrar.
package rpc

import (
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/gobrpc/gobrpc/controller"
)

// Caller sends one RPC. Generated stubs take a Caller, so tests and
// middleware can wrap one.
//
// With done == nil the call is synchronous: CallMethod returns when cntl
// holds the result. Otherwise CallMethod returns at once and done runs
// exactly once after cntl holds the result; req and resp must stay
// untouched until then.
type Caller interface {
	CallMethod(md protoreflect.MethodDescriptor, cntl *controller.Controller, req, resp proto.Message, done func())
}

// Handler serves one method. req is already parsed; the handler fills
// resp (and cntl's response attachment, or cntl.SetFailed) and then calls
// done exactly once, possibly later and from another goroutine.
type Handler func(cntl *controller.Controller, req, resp proto.Message, done func())

// MethodDesc binds a method of a service to its handler.
type MethodDesc struct {
	Name    string // the short method name, e.g. "Echo"
	Handler Handler
}

// ServiceDesc describes a service to register: its protobuf descriptor and
// one handler per method. Generated Register...Server functions build it.
type ServiceDesc struct {
	Descriptor protoreflect.ServiceDescriptor
	Methods    []MethodDesc
}

// Registrar is what generated Register...Server functions need.
type Registrar interface {
	RegisterService(desc *ServiceDesc) error
}
