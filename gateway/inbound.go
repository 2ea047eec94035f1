package gateway

import (
	"net"
	"sync/atomic"
	"time"
)

// inboundFlows counts a v5 client's QoS 1/2 publishes that it may still
// consider unacknowledged, to hold it to the Receive Maximum the broker
// announced in CONNACK [MQTT-3.3.4-9]. A flow opens when its PUBLISH is read
// and closes when the broker queues its PUBACK, its PUBCOMP, or a PUBREC
// with an error code. The client only learns of an ack after it is queued,
// so this count never exceeds the client's own: a client that keeps to the
// window is never cut. Flows opened on an earlier connection are not
// counted (their PUBREL closes one of this connection's), which can only make the
// check more lenient, never stricter.
type inboundFlows struct {
	max  int          // the Receive Maximum announced; 0 = not checked (3.1/3.1.1)
	open atomic.Int32 // written by the reader and by sink verdicts
}

// done closes one flow; the count never goes below zero.
func (f *inboundFlows) done() {
	if f.max == 0 {
		return
	}
	for {
		v := f.open.Load()
		if v <= 0 || f.open.CompareAndSwap(v, v-1) {
			return
		}
	}
}

// drainForTakeover lets c's reader handle what c already received before
// another connection takes its session: the read side is shut (TCP half
// close), so the reader gets the bytes already queued (a DISCONNECT sent
// just before the client reconnected) and then end of stream. It waits for
// the reader to finish, at most wait (a peer that keeps sending cannot hold
// the new connection longer; the caller then closes it outright). On transports without a half close
// (WebSocket, serial) it does nothing: the takeover closes as before.
func (c *client) drainForTakeover(wait time.Duration) {
	cr, ok := tcpConn(c.conn)
	if !ok {
		return
	}
	c.wmu.Lock()
	if c.readDone == nil {
		c.readDone = make(chan struct{})
	}
	done, ended := c.readDone, c.readEnded
	c.wmu.Unlock()
	if ended {
		return
	}
	c.takenOver.Store(true) // the end of stream it is about to read is the takeover's
	if cr.CloseRead() != nil {
		return
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
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
