// Package errno holds brpc's error codes and the one place their text is
// formatted ("[E<code>]reason"). It is a leaf: every layer of gobrpc, and
// code that only needs error codes, imports it without the rest of the
// framework. Package controller re-exports everything here, so
// controller.ERPCTIMEDOUT and errno.ERPCTIMEDOUT are the same value.
package errno

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"syscall"
)

// Errno is an RPC error code. The values are brpc's (src/brpc/errno.proto),
// so a code means the same thing in logs, on the wire and in HTTP statuses
// whether the peer is gobrpc or C++ brpc. System errors (ECONNREFUSED,
// EHOSTDOWN, ...) use Linux's errno numbers, as brpc does.
type Errno int32

// brpc error codes.
const (
	ENOSERVICE        Errno = 1001 // service not found
	ENOMETHOD         Errno = 1002 // method not found
	EREQUEST          Errno = 1003 // bad request
	ERPCAUTH          Errno = 1004 // authentication failed
	ETOOMANYFAILS     Errno = 1005 // too many sub-calls failed
	EPCHANFINISH      Errno = 1006 // internal, ParallelChannel
	EBACKUPREQUEST    Errno = 1007 // backup timer fired
	ERPCTIMEDOUT      Errno = 1008 // RPC deadline reached
	EFAILEDSOCKET     Errno = 1009 // broken connection
	EHTTP             Errno = 1010 // bad HTTP call
	EOVERCROWDED      Errno = 1011 // too much unwritten data on the connection
	ERTMPPUBLISHABLE  Errno = 1012
	ERTMPCREATESTREAM Errno = 1013
	EEOF              Errno = 1014 // got EOF
	EUNUSED           Errno = 1015 // connection not needed
	ESSL              Errno = 1016
	EH2RUNOUTSTREAMS  Errno = 1017
	EREJECT           Errno = 1018 // rejected by the cluster-recover policy
	EPROGREADTIMEOUT  Errno = 1019
	EINTERNAL         Errno = 2001 // server internal error
	ERESPONSE         Errno = 2002 // bad response
	ELOGOFF           Errno = 2003 // server is stopping
	ELIMIT            Errno = 2004 // concurrency limit reached
	ECLOSE            Errno = 2005 // close the connection
	EITP              Errno = 2006
	ESHUTDOWNWRITE    Errno = 2007
	ERDMA             Errno = 3001
	ERDMAMEM          Errno = 3002
)

// System error codes that brpc also reports as RPC error codes. The numbers
// are Linux's on every OS, as brpc's are: a code means the same thing on
// the wire whichever system sent it. OfSystem maps the running
// system's errno to them.
const (
	EPERM         Errno = 1
	ENOENT        Errno = 2
	EINTR         Errno = 4
	EIO           Errno = 5
	EBADF         Errno = 9
	EAGAIN        Errno = 11
	ENOMEM        Errno = 12
	EACCES        Errno = 13
	EINVAL        Errno = 22
	ENFILE        Errno = 23
	EMFILE        Errno = 24
	EPIPE         Errno = 32
	ENODATA       Errno = 61
	EADDRINUSE    Errno = 98
	EADDRNOTAVAIL Errno = 99
	ENETDOWN      Errno = 100
	ENETUNREACH   Errno = 101
	ECONNABORTED  Errno = 103
	ECONNRESET    Errno = 104
	ENOBUFS       Errno = 105
	ETIMEDOUT     Errno = 110 // connect timeout
	ECONNREFUSED  Errno = 111
	EHOSTDOWN     Errno = 112
	EHOSTUNREACH  Errno = 113
	ECANCELED     Errno = 125
)

// systemErrnos pairs each system code above with the running system's
// errno of the same name.
var systemErrnos = map[syscall.Errno]Errno{
	syscall.EPERM: EPERM, syscall.ENOENT: ENOENT, syscall.EINTR: EINTR, syscall.EIO: EIO,
	syscall.EBADF: EBADF, syscall.EAGAIN: EAGAIN, syscall.ENOMEM: ENOMEM, syscall.EACCES: EACCES,
	syscall.EINVAL: EINVAL, syscall.ENFILE: ENFILE, syscall.EMFILE: EMFILE, syscall.EPIPE: EPIPE,
	syscall.EADDRINUSE: EADDRINUSE, syscall.EADDRNOTAVAIL: EADDRNOTAVAIL, syscall.ENETDOWN: ENETDOWN,
	syscall.ENETUNREACH: ENETUNREACH, syscall.ECONNABORTED: ECONNABORTED, syscall.ECONNRESET: ECONNRESET,
	syscall.ENOBUFS: ENOBUFS, syscall.ETIMEDOUT: ETIMEDOUT, syscall.ECONNREFUSED: ECONNREFUSED,
	syscall.EHOSTDOWN: EHOSTDOWN, syscall.EHOSTUNREACH: EHOSTUNREACH, syscall.ECANCELED: ECANCELED,
}

// OfSystem maps an errno of the running system to brpc's code
// (Linux's number). An errno without a Linux counterpart here is
// EFAILEDSOCKET on other systems; on Linux it is kept as it is.
func OfSystem(e syscall.Errno) Errno {
	if c, ok := systemErrnos[e]; ok {
		return c
	}
	if runtime.GOOS == "linux" {
		return Errno(e)
	}
	return EFAILEDSOCKET
}

var errnoNames = map[Errno]string{
	ENOSERVICE: "ENOSERVICE", ENOMETHOD: "ENOMETHOD", EREQUEST: "EREQUEST",
	ERPCAUTH: "ERPCAUTH", ETOOMANYFAILS: "ETOOMANYFAILS", EPCHANFINISH: "EPCHANFINISH",
	EBACKUPREQUEST: "EBACKUPREQUEST", ERPCTIMEDOUT: "ERPCTIMEDOUT",
	EFAILEDSOCKET: "EFAILEDSOCKET", EHTTP: "EHTTP", EOVERCROWDED: "EOVERCROWDED",
	ERTMPPUBLISHABLE: "ERTMPPUBLISHABLE", ERTMPCREATESTREAM: "ERTMPCREATESTREAM",
	EEOF: "EEOF", EUNUSED: "EUNUSED", ESSL: "ESSL", EH2RUNOUTSTREAMS: "EH2RUNOUTSTREAMS",
	EREJECT: "EREJECT", EPROGREADTIMEOUT: "EPROGREADTIMEOUT", EINTERNAL: "EINTERNAL",
	ERESPONSE: "ERESPONSE", ELOGOFF: "ELOGOFF", ELIMIT: "ELIMIT", ECLOSE: "ECLOSE",
	EITP: "EITP", ESHUTDOWNWRITE: "ESHUTDOWNWRITE", ERDMA: "ERDMA", ERDMAMEM: "ERDMAMEM",
	EPERM: "EPERM", ENOENT: "ENOENT", EINTR: "EINTR", EIO: "EIO", EBADF: "EBADF",
	EAGAIN: "EAGAIN", ENOMEM: "ENOMEM", EACCES: "EACCES", EINVAL: "EINVAL",
	ENFILE: "ENFILE", EMFILE: "EMFILE", EPIPE: "EPIPE", ENODATA: "ENODATA",
	EADDRINUSE: "EADDRINUSE", EADDRNOTAVAIL: "EADDRNOTAVAIL", ENETDOWN: "ENETDOWN",
	ENETUNREACH: "ENETUNREACH", ECONNABORTED: "ECONNABORTED", ECONNRESET: "ECONNRESET",
	ENOBUFS: "ENOBUFS", ETIMEDOUT: "ETIMEDOUT", ECONNREFUSED: "ECONNREFUSED",
	EHOSTDOWN: "EHOSTDOWN", EHOSTUNREACH: "EHOSTUNREACH", ECANCELED: "ECANCELED",
}

var errnoDescriptions = map[Errno]string{
	ENOSERVICE: "No such service", ENOMETHOD: "No such method",
	EREQUEST: "Bad request", ERPCAUTH: "Authentication failed",
	ETOOMANYFAILS: "Too many sub calls failed", EPCHANFINISH: "ParallelChannel finished",
	EBACKUPREQUEST: "Sending backup request", ERPCTIMEDOUT: "RPC call is timed out",
	EFAILEDSOCKET: "Broken socket", EHTTP: "Bad http call",
	EOVERCROWDED: "The server is overcrowded", EEOF: "Got EOF", EUNUSED: "The socket was not needed",
	ESSL: "SSL related operation failed", EH2RUNOUTSTREAMS: "The H2 socket was run out of streams",
	EREJECT: "The Request is rejected", EPROGREADTIMEOUT: "Progressive read timeout",
	EINTERNAL: "Internal Server Error", ERESPONSE: "Bad Response",
	ELOGOFF: "Server is stopping", ELIMIT: "Reached server's max_concurrency",
	ECLOSE: "Close socket initiatively", EITP: "Failed Itp response",
	ESHUTDOWNWRITE: "Shutdown write of the socket", ERDMA: "RDMA verbs error",
	ERDMAMEM: "Memory not registered for RDMA",
	// Linux's strerror texts, so a code reads the same on every OS.
	EPERM: "Operation not permitted", ENOENT: "No such file or directory",
	EINTR: "Interrupted system call", EIO: "Input/output error", EBADF: "Bad file descriptor",
	EAGAIN: "Resource temporarily unavailable", ENOMEM: "Cannot allocate memory",
	EACCES: "Permission denied", EINVAL: "Invalid argument", ENFILE: "Too many open files in system",
	EMFILE: "Too many open files", EPIPE: "Broken pipe", ENODATA: "No data available",
	EADDRINUSE: "Address already in use", EADDRNOTAVAIL: "Cannot assign requested address",
	ENETDOWN: "Network is down", ENETUNREACH: "Network is unreachable",
	ECONNABORTED: "Software caused connection abort", ECONNRESET: "Connection reset by peer",
	ENOBUFS: "No buffer space available", ETIMEDOUT: "Connection timed out",
	ECONNREFUSED: "Connection refused", EHOSTDOWN: "Host is down",
	EHOSTUNREACH: "No route to host", ECANCELED: "Operation canceled",
}

// Name returns the constant's name, e.g. "ERPCTIMEDOUT", or "E<code>" for
// an unknown code.
func (e Errno) Name() string {
	if n, ok := errnoNames[e]; ok {
		return n
	}
	return "E" + strconv.Itoa(int(e))
}

// Error describes the code the way brpc's berror() does.
func (e Errno) Error() string {
	if d, ok := errnoDescriptions[e]; ok {
		return d
	}
	if e > 0 && e < 1000 && runtime.GOOS == "linux" {
		return syscall.Errno(e).Error()
	}
	return "Unknown error " + strconv.Itoa(int(e))
}

// HTTPStatus is the HTTP status brpc answers a failed HTTP call with
// (src/brpc/http_status_code.cpp): 0 is 200 OK.
func (e Errno) HTTPStatus() int {
	switch e {
	case 0:
		return 200 // OK
	case ENOSERVICE, ENOMETHOD:
		return 404 // Not Found
	case ERPCAUTH:
		return 401 // Unauthorized
	case EREQUEST, EINVAL:
		return 400 // Bad Request
	case ELIMIT, ELOGOFF:
		return 503 // Service Unavailable
	case EPERM:
		return 403 // Forbidden
	case ERPCTIMEDOUT, ETIMEDOUT:
		return 504 // Gateway Timeout
	}
	return 500 // Internal Server Error
}

// Is lets errors.Is match Go's context errors: ERPCTIMEDOUT is
// context.DeadlineExceeded and ECANCELED is context.Canceled, so code that
// checks a context's errors works on gobrpc's results unchanged.
func (e Errno) Is(target error) bool {
	switch target {
	case context.DeadlineExceeded:
		return e == ERPCTIMEDOUT
	case context.Canceled:
		return e == ECANCELED
	}
	return false
}

// Text is brpc's error text: "[E<code>]" then the reason. It is the one
// place that prefix is written.
func Text(code Errno, reason string) string {
	return "[E" + strconv.Itoa(int(code)) + "]" + reason
}

// AppendText appends Text(code, reason) to b.
func AppendText(b []byte, code Errno, reason string) []byte {
	b = append(b, "[E"...)
	b = strconv.AppendInt(b, int64(code), 10)
	b = append(b, ']')
	return append(b, reason...)
}

// Error is a failed RPC: its code and brpc's error text, which starts with
// "[E<code>]". errors.Is(err, errno.ERPCTIMEDOUT) matches the code, and
// errors.Is(err, context.DeadlineExceeded) matches ERPCTIMEDOUT too.
type Error struct {
	Code Errno
	Text string
}

func (e *Error) Error() string {
	if e.Text != "" {
		return e.Text
	}
	return Text(e.Code, e.Code.Error())
}

// Unwrap lets errors.Is(err, errno.ECODE) match.
func (e *Error) Unwrap() error { return e.Code }

// New returns an *Error with code and reason formatted as brpc does.
func New(code Errno, reason string) *Error { return &Error{Code: code, Text: Text(code, reason)} }

// CodeOf is the code an error stands for: 0 for nil, the code of an *Error
// or Errno in its chain, ERPCTIMEDOUT for context.DeadlineExceeded,
// ECANCELED for context.Canceled, and EINTERNAL for anything else.
func CodeOf(err error) Errno {
	if err == nil {
		return 0
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	var code Errno
	if errors.As(err, &code) {
		return code
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return ERPCTIMEDOUT
	case errors.Is(err, context.Canceled):
		return ECANCELED
	}
	return EINTERNAL
}
