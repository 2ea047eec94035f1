package gateway

import (
	"net"
	"syscall"
)

// ackNow makes the kernel send at once the acknowledgement it is holding
// back (delayed ACK) for what tc received. A client with Nagle's algorithm
// on (the default of most socket APIs but Go's) keeps a small write, such
// as a DISCONNECT written after a PUBLISH, in its own kernel until the data
// before it is acknowledged: without this the bytes it already wrote come
// only when the delayed ACK fires (up to 40 ms on Linux), after the
// takeover decided. On loopback the client's kernel answers the ACK with
// those bytes before the setsockopt returns (the ACK and the answer are
// handled in the same softirq, and the answer waits in this socket's
// backlog until the call releases it); over a network they are a round
// trip away.
func ackNow(tc *net.TCPConn) {
	raw, err := tc.SyscallConn()
	if err != nil {
		return
	}
	raw.Control(func(fd uintptr) {
		syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_QUICKACK, 1)
	})
}
