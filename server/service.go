package server

import (
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/gobrpc/gobrpc/controller"
)

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

// Registrar is what generated Register...Server functions need: *Server
// implements it.
type Registrar interface {
	RegisterService(desc *ServiceDesc) error
}
