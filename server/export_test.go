package server

import "time"

// SetTimeoutsForTest shortens the sniff and HTTP deadlines (servers read
// the HTTP idle one when they start); the returned function restores them.
func SetTimeoutsForTest(sniff, httpBody, httpIdle time.Duration) (restore func()) {
	oldSniff, oldBody, oldIdle := sniffTimeout.get(), httpBodyTimeout.get(), httpIdleTimeout.get()
	sniffTimeout.set(sniff)
	httpBodyTimeout.set(httpBody)
	httpIdleTimeout.set(httpIdle)
	return func() {
		sniffTimeout.set(oldSniff)
		httpBodyTimeout.set(oldBody)
		httpIdleTimeout.set(oldIdle)
	}
}
