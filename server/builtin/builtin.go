// Package builtin serves brpc's builtin pages over HTTP: /, /status,
// /vars, /brpc_metrics, /flags, /health, /version, /connections,
// /protobufs, /rpcz and /pprof/. Everything a page shows comes from bvar,
// flags and the Server interface below.
//
//	pages := builtin.New(srv, builtin.Options{AllowSetFlags: true})
//	defer pages.Close()
//	if builtin.IsBuiltinPath(r.URL.Path) {
//		pages.ServeHTTP(w, r)
//	}
//
// Every page answers plain text to curl (or without a User-Agent, or with
// ?console=1) and HTML to browsers, as brpc decides; the HTML /vars page
// draws each numeric variable's last 60 seconds and 60 minutes, recorded
// once a second while a Pages is open. See docs/en/builtin_services.md.
package builtin

import (
	"net"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// Server is what the pages need to know about the server serving them.
type Server interface {
	// Version is the server's version string ("" shows "unknown").
	Version() string
	// ListenAddress is the main port's address.
	ListenAddress() net.Addr
	// StartTime is when the server started.
	StartTime() time.Time
	// Services lists the registered services with their methods' statistics.
	Services() []ServiceStatus
	// Connections lists the open connections.
	Connections() []ConnectionStatus
	// Health is the /health answer; "" means "OK".
	Health() string
}

// ServiceStatus describes one service for /status and /protobufs.
type ServiceStatus struct {
	Descriptor protoreflect.ServiceDescriptor
	Methods    []MethodStatus
}

// MethodStatus is one method's statistics, read from its bvars.
type MethodStatus struct {
	FullName       string // "example.EchoService.Echo"
	Count          int64  // calls since start
	Errors         int64  // failed calls since start
	LatencyUs      int64  // average over the bvar window
	MaxLatencyUs   int64
	QPS            float64
	Concurrency    int64  // requests in flight
	MaxConcurrency string // the limiter's live limit, "unlimited" when none
	VarPrefix      string // rpc_server_<port>_<method>, for links to /vars
}

// ConnectionStatus describes one connection for /connections.
type ConnectionStatus struct {
	Remote, Local net.Addr
	Protocol      string // "baidu_std", "http"
	Created       time.Time
	InFlight      int64
}
