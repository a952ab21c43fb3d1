//go:build !linux

package server

// peerClosed cannot tell a half-closed peer without POLLRDHUP (Linux): a
// client that sends part of a protocol's first bytes and closes waits for
// the sniff timeout instead.
func peerClosed(uintptr) bool { return false }
