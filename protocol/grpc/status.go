package grpc

import (
	"strconv"

	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/internal/ctrl"
)

// Code is a gRPC status code.
type Code uint32

// The gRPC status codes (grpc/grpc doc/statuscodes.md).
const (
	OK                 Code = 0
	Canceled           Code = 1
	Unknown            Code = 2
	InvalidArgument    Code = 3
	DeadlineExceeded   Code = 4
	NotFound           Code = 5
	AlreadyExists      Code = 6
	PermissionDenied   Code = 7
	ResourceExhausted  Code = 8
	FailedPrecondition Code = 9
	Aborted            Code = 10
	OutOfRange         Code = 11
	Unimplemented      Code = 12
	Internal           Code = 13
	Unavailable        Code = 14
	DataLoss           Code = 15
	Unauthenticated    Code = 16
)

var codeNames = [...]string{"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
	"NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
	"ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"}

func (c Code) String() string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return "CODE(" + strconv.FormatUint(uint64(c), 10) + ")"
}

// FromErrno is the status a server answers for a brpc error code:
// brpc's ErrorCodeToGrpcStatus (src/brpc/grpc.cpp), every code it does
// not name being INTERNAL.
func FromErrno(e controller.Errno) Code {
	switch e {
	case 0:
		return OK
	case controller.ENOSERVICE, controller.ENOMETHOD:
		return Unimplemented
	case controller.ERPCAUTH:
		return Unauthenticated
	case controller.EREQUEST, controller.EINVAL:
		return InvalidArgument
	case controller.ELIMIT:
		return ResourceExhausted
	case controller.ELOGOFF:
		return Unavailable
	case controller.EPERM:
		return PermissionDenied
	case controller.ERPCTIMEDOUT:
		return DeadlineExceeded
	case controller.ECANCELED:
		return Canceled
	}
	return Internal
}

// ToErrno is the brpc error code a channel reports for a status:
// brpc's GrpcStatusToErrorCode, except UNAVAILABLE, which brpc makes
// EINTERNAL and gobrpc ELOGOFF: gRPC servers answer it when they cannot
// serve now (a brpc server stopping answers ELOGOFF as UNAVAILABLE), and
// gRPC's own clients retry it, so a channel retries it on another server
// (without taking the answering server out of selection).
func ToErrno(c Code) controller.Errno {
	switch c {
	case OK:
		return 0
	case Canceled:
		return controller.ECANCELED
	case InvalidArgument:
		return controller.EINVAL
	case DeadlineExceeded:
		return controller.ERPCTIMEDOUT
	case PermissionDenied:
		return controller.EPERM
	case ResourceExhausted:
		return controller.ELIMIT
	case Unimplemented:
		return controller.ENOMETHOD
	case Unavailable:
		return controller.ELOGOFF
	case Unauthenticated:
		return controller.ERPCAUTH
	}
	return controller.EINTERNAL
}

// StatusOf is the gRPC status of a call made or served with cntl: the
// status a gRPC server answered (exact, though ToErrno folds several
// into one brpc code), the one a handler set with SetStatus, or else
// FromErrno of the Controller's error code.
func StatusOf(cntl *controller.Controller) Code {
	st := ctrl.Of(cntl)
	if c := Code(st.GRPCStatus); c != OK && ToErrno(c) == cntl.ErrorCode() {
		return c
	}
	return FromErrno(cntl.ErrorCode())
}

// SetStatus fails a served call with a gRPC status and message: the
// client sees exactly that status, which brpc's error codes may not name
// (NOT_FOUND, ALREADY_EXISTS, ...). The Controller's error code is
// ToErrno(code), so baidu_std and HTTP clients of the same handler see
// that. OK is ignored.
func SetStatus(cntl *controller.Controller, code Code, msg string) {
	if code == OK {
		return
	}
	cntl.SetFailed(ToErrno(code), "%s", msg)
	ctrl.Of(cntl).GRPCStatus = uint32(code)
}
