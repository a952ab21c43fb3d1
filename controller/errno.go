package controller

import (
	"syscall"

	"github.com/gobrpc/gobrpc/errno"
)

// Errno is an RPC error code with brpc's numbers; it is errno.Errno, kept
// here so controller.Errno and controller.ECODE read as in brpc.
type Errno = errno.Errno

// Error is a failed RPC as Controller.Err returns it; see errno.Error.
type Error = errno.Error

// The error codes, the same values as package errno's.
const (
	ENOSERVICE        = errno.ENOSERVICE
	ENOMETHOD         = errno.ENOMETHOD
	EREQUEST          = errno.EREQUEST
	ERPCAUTH          = errno.ERPCAUTH
	ETOOMANYFAILS     = errno.ETOOMANYFAILS
	EPCHANFINISH      = errno.EPCHANFINISH
	EBACKUPREQUEST    = errno.EBACKUPREQUEST
	ERPCTIMEDOUT      = errno.ERPCTIMEDOUT
	EFAILEDSOCKET     = errno.EFAILEDSOCKET
	EHTTP             = errno.EHTTP
	EOVERCROWDED      = errno.EOVERCROWDED
	ERTMPPUBLISHABLE  = errno.ERTMPPUBLISHABLE
	ERTMPCREATESTREAM = errno.ERTMPCREATESTREAM
	EEOF              = errno.EEOF
	EUNUSED           = errno.EUNUSED
	ESSL              = errno.ESSL
	EH2RUNOUTSTREAMS  = errno.EH2RUNOUTSTREAMS
	EREJECT           = errno.EREJECT
	EPROGREADTIMEOUT  = errno.EPROGREADTIMEOUT
	EINTERNAL         = errno.EINTERNAL
	ERESPONSE         = errno.ERESPONSE
	ELOGOFF           = errno.ELOGOFF
	ELIMIT            = errno.ELIMIT
	ECLOSE            = errno.ECLOSE
	EITP              = errno.EITP
	ESHUTDOWNWRITE    = errno.ESHUTDOWNWRITE
	ERDMA             = errno.ERDMA
	ERDMAMEM          = errno.ERDMAMEM
	EPERM             = errno.EPERM
	ENOENT            = errno.ENOENT
	EINTR             = errno.EINTR
	EIO               = errno.EIO
	EBADF             = errno.EBADF
	EAGAIN            = errno.EAGAIN
	ENOMEM            = errno.ENOMEM
	EACCES            = errno.EACCES
	EINVAL            = errno.EINVAL
	ENFILE            = errno.ENFILE
	EMFILE            = errno.EMFILE
	EPIPE             = errno.EPIPE
	ENODATA           = errno.ENODATA
	EADDRINUSE        = errno.EADDRINUSE
	EADDRNOTAVAIL     = errno.EADDRNOTAVAIL
	ENETDOWN          = errno.ENETDOWN
	ENETUNREACH       = errno.ENETUNREACH
	ECONNABORTED      = errno.ECONNABORTED
	ECONNRESET        = errno.ECONNRESET
	ENOBUFS           = errno.ENOBUFS
	ETIMEDOUT         = errno.ETIMEDOUT
	ECONNREFUSED      = errno.ECONNREFUSED
	EHOSTDOWN         = errno.EHOSTDOWN
	EHOSTUNREACH      = errno.EHOSTUNREACH
	ECANCELED         = errno.ECANCELED
)

// ErrnoOfSystem maps an errno of the running system to brpc's code
// (Linux's number); see errno.OfSystem.
func ErrnoOfSystem(e syscall.Errno) Errno { return errno.OfSystem(e) }
