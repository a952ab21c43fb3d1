package transport

import (
	"reflect"
	"sync"
)

// The socket map shares endpoints (and so connections and health state)
// between every channel that talks to the same server with the same
// connection type and group, as brpc's SocketMap does.

type endpointKey struct {
	addr        string
	connType    ConnType
	group       string
	maxBodySize int
	auth        any // the Authenticator, or a key of its own when it is not comparable
}

var socketMap = struct {
	sync.Mutex
	m map[endpointKey]*Endpoint
}{m: map[endpointKey]*Endpoint{}}

// GetEndpoint returns the shared endpoint for addr, creating it on first
// use. Every GetEndpoint must be paired with a PutEndpoint.
func GetEndpoint(addr string, opts EndpointOptions, group string) *Endpoint {
	key := endpointKey{addr: addr, connType: opts.ConnType, group: group, maxBodySize: opts.MaxBodySize}
	if opts.Auth != nil {
		key.auth = opts.Auth
		if !reflect.ValueOf(opts.Auth).Comparable() { // a func, or a struct holding one
			key.auth = new(byte) // cannot be a map key: share with no one
		}
	}
	if key.connType == 0 {
		key.connType = Single
	}
	socketMap.Lock()
	defer socketMap.Unlock()
	e := socketMap.m[key]
	if e == nil {
		e = NewEndpoint(addr, opts)
		e.key = key
		socketMap.m[key] = e
	}
	e.refs++
	return e
}

// PutEndpoint releases a reference; the last one closes the endpoint's
// connections and stops its health checking.
func PutEndpoint(e *Endpoint) {
	socketMap.Lock()
	e.refs--
	last := e.refs == 0
	if last && socketMap.m[e.key] == e {
		delete(socketMap.m, e.key)
	}
	socketMap.Unlock()
	if last {
		e.Close()
	}
}
