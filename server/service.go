package server

import "github.com/gobrpc/gobrpc/rpc"

// The descriptors generated registration code builds, defined in the leaf
// package rpc (so generated code needs no server) and named here too.
type (
	// Handler serves one method; see rpc.Handler.
	Handler = rpc.Handler
	// MethodDesc binds a method to its handler.
	MethodDesc = rpc.MethodDesc
	// ServiceDesc is a service to register.
	ServiceDesc = rpc.ServiceDesc
	// Registrar is what Register...Server functions need; *Server is one.
	Registrar = rpc.Registrar
)
