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

// Call is a call made with a Controller, in flight or over.
type Call interface {
	// Cancel ends the call with ECANCELED if it has not ended yet.
	Cancel()
	// Wait returns once the call has ended and its done has returned.
	Wait()
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

	// Call lifecycle (client side). Mu guards Call, CancelRequested and
	// InUse. Call is the last call made with the Controller: the call
	// itself is what Join waits on, so a done that Resets the Controller
	// and starts the next call touches nothing the previous call still
	// uses.
	Mu              sync.Mutex
	Call            Call
	CancelRequested bool
	InUse           bool
}

// Of returns the framework-owned state of a *controller.Controller.
// It is installed by package controller at init time.
var Of func(cntl any) *State
