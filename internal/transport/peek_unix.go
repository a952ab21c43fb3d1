//go:build unix

package transport

import "syscall"

// peekFD reports whether the socket fd is still open at the peer's end: it
// has bytes to read or none yet, but no end of stream or error.
func peekFD(fd uintptr) bool {
	var b [1]byte
	for {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return true
		case err != nil:
			return false
		}
		return n > 0
	}
}
