package server

import (
	"syscall"
	"unsafe"
)

// peerClosed reports whether the peer has shut its side down, with a
// zero-timeout poll for POLLRDHUP (Linux).
func peerClosed(fd uintptr) bool {
	const pollRDHUP = 0x2000
	pfd := struct {
		fd      int32
		events  int16
		revents int16
	}{fd: int32(fd), events: pollRDHUP}
	var ts syscall.Timespec // zero: do not wait
	n, _, errno := syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1,
		uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
	return errno == 0 && n == 1 && pfd.revents&(pollRDHUP|0x10 /* POLLHUP */ |0x8 /* POLLERR */) != 0
}
