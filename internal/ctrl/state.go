// Package ctrl holds the parts of a Controller that only the framework
// (channel, server, transport) may write: results of a call, server-side
// request data and the hook used by StartCancel.
//
// The public controller package owns a State inside every Controller and
// installs Of at init, so users cannot reach these fields while the
// framework packages can, without an import cycle.
package ctrl

import (
	"context"
	"net"
	"sync"
)

// Canceler is the in-flight call a Controller can cancel.
type Canceler interface {
	// Cancel ends the call with ECANCELED if it has not ended yet.
	Cancel()
}

// State is the framework-owned part of a Controller.
type State struct {
	// Results, written once by the call's single completion owner.
	ErrorCode        int32
	ErrorText        string
	LatencyUs        int64
	RemoteSide       net.Addr
	LocalSide        net.Addr
	RetriedCount     int
	HasBackupRequest bool

	// Server side.
	Server        bool
	LogID         int64
	HasLogID      bool
	ServiceName   string
	MethodName    string
	Ctx           context.Context
	ReceivedAtNs  int64
	TimeoutMsSent int32 // the timeout the client delivered in the meta, 0 if none

	// Call lifecycle (client side). Mu guards Call and CancelRequested.
	Mu              sync.Mutex
	Call            Canceler
	CancelRequested bool
	InUse           bool
	// Done is released once when an asynchronous or synchronous call ends;
	// Controller.Join waits on it.
	Done sync.WaitGroup
}

// Of returns the framework-owned state of a *controller.Controller.
// It is installed by package controller at init time.
var Of func(cntl any) *State
