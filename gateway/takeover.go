package gateway

// A takeover's drain of the old connection, and the TCP socket under a
// connection (found through TLS and WebSocket wrappers; also used to reset
// a stuck peer).

import (
	"net"
	"time"
)

// drainForTakeover lets c's reader handle what c already received before
// another connection takes its session: the read side is shut (TCP half
// close), so the reader gets the bytes already queued (a DISCONNECT sent
// just before the client reconnected) and then end of stream. It waits for
// the reader to finish, at most wait (a peer that keeps sending cannot hold
// the new connection longer; the caller then closes it outright). On transports without a half close
// (WebSocket, serial) it does nothing: the takeover closes as before.
func (c *client) drainForTakeover(wait time.Duration) {
	c.wmu.Lock()
	if c.readDone == nil {
		c.readDone = make(chan struct{})
	}
	done, ended := c.readDone, c.readEnded
	c.wmu.Unlock()
	if !ended {
		c.shutRead(done, wait)
	}
}

// drainBeforeAttach is drainForTakeover before the new connection takes
// the session, waiting until c has left it: a DISCONNECT the old
// connection already received (with Session Expiry 0: the session ends)
// is handled before the takeover decides whether there is a session to
// resume. It reports whether c left the session within wait.
func (c *client) drainBeforeAttach(wait time.Duration) bool {
	c.wmu.Lock()
	if c.leftDone == nil {
		c.leftDone = make(chan struct{})
	}
	done, left := c.leftDone, c.left
	c.wmu.Unlock()
	return left || c.shutRead(done, wait)
}

// shutRead shuts c's read side and waits for done, at most wait. It
// reports whether done came; false at once without a TCP socket. Before
// the shut it acknowledges what c received, so a client's TCP sends what
// it held back waiting for that ACK (Nagle's algorithm) while the read
// side is still open.
func (c *client) shutRead(done <-chan struct{}, wait time.Duration) bool {
	cr, ok := tcpConn(c.conn)
	if !ok {
		return false
	}
	c.takenOver.Store(true) // the end of stream it is about to read is the takeover's
	ackNow(cr)              // what the client wrote but its TCP held back for our ACK comes first (takeover_linux.go)
	if cr.CloseRead() != nil {
		return false
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// sessionLeft marks the connection detached from its session and wakes a
// takeover waiting for it.
func (c *client) sessionLeft() {
	c.wmu.Lock()
	c.left = true
	if c.leftDone != nil {
		close(c.leftDone)
	}
	c.wmu.Unlock()
}

// readerEnded marks the reader finished and wakes a takeover waiting for it.
func (c *client) readerEnded() {
	c.wmu.Lock()
	c.readEnded = true
	if c.readDone != nil {
		close(c.readDone)
	}
	c.wmu.Unlock()
}

// netConner is a connection wrapping another (crypto/tls, a WebSocket).
type netConner interface{ NetConn() net.Conn }

// tcpConn finds the TCP socket under conn, through TLS.
func tcpConn(conn net.Conn) (*net.TCPConn, bool) {
	for range 4 {
		switch c := conn.(type) {
		case *net.TCPConn:
			return c, true
		case netConner:
			conn = c.NetConn()
		default:
			return nil, false
		}
	}
	return nil, false
}

// abort closes conn so that the kernel drops what it still holds for the
// peer (SO_LINGER 0: a reset, not a slow trickle of a stuck reader's
// backlog after the connection is already given up on).
func abort(conn net.Conn) {
	if tc, ok := tcpConn(conn); ok {
		tc.SetLinger(0)
	}
	conn.Close()
}
