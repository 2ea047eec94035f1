package gateway

// Shutdown drain: when the server stops (the serving context is
// cancelled), a connection whose session is kept in the state store is
// not closed at once. Its session stops sending (nothing new leaves the
// queue) and the close waits, at most Options.ShutdownGrace, for the
// client to acknowledge what it already received (PUBACK, PUBREC,
// PUBCOMP).
//
// Why: a QoS 2 PUBLISH whose PUBREC is on the wire when the connection is
// closed is resent after the restart as a DUP PUBLISH under its packet id
// [MQTT-4.4.0-1], to a client that already holds that id. A receiver must
// treat it as the same message [MQTT-4.3.3-9], but libmosquitto (2.0, the
// library under mosquitto_sub and many devices) queues it a second time
// under the same id: the next PUBREL hands over the first copy, and the
// second stays until the id is used again, when that PUBREL hands over the
// stale copy once more and the new message is never delivered. A PUBREC
// read during the drain is recorded, so the restart sends only the PUBREL.
// A QoS 1 PUBACK read then spares the client a duplicate.
//
// A PUBREL sent on the connection is waited for too, until its PUBCOMP.
// A client answers every PUBREL with a PUBCOMP, whether or not it still
// holds the id [MQTT-4.3.3-11], so a PUBREL resent after the restart is
// harmless; but libmosquitto 2.0 hands a QoS 2 message over only after
// its PUBCOMP was written, and drops the message when that write fails.
// A close right behind a PUBREL (a close with an earlier ack still unread
// resets the connection) failed that write and lost the message: the
// PUBREL resent after the restart finds nothing to hand over. Sessions
// that are not persistent lose their state at the stop anyway and are
// closed at once.

import "time"

// drain holds the persistent sessions of cs back from sending and waits
// until each has its sends acknowledged, at most ShutdownGrace in all.
func (s *Server) drain(cs []*client) {
	var waits []<-chan struct{}
	for _, c := range cs {
		c.wmu.Lock()
		var sess *session
		if c.ready && !c.closed && !c.closing {
			sess = c.sess // published by ready (connect.go)
		}
		c.wmu.Unlock()
		if sess == nil {
			continue
		}
		if ch := sess.startDrain(c); ch != nil {
			waits = append(waits, ch)
		}
	}
	if len(waits) == 0 {
		return
	}
	t := time.NewTimer(s.opts.ShutdownGrace)
	defer t.Stop()
	for _, ch := range waits {
		select {
		case <-ch:
		case <-t.C:
			return
		}
	}
}

// startDrain stops the session sending on c and returns a channel closed
// once nothing sent on c waits for its PUBACK, PUBREC or PUBCOMP; nil when
// there is nothing to wait for (or the session is not c's, or not
// persistent).
func (s *session) startDrain(c *client) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != c || s.destroyed || !s.persisted {
		return nil
	}
	s.drainFor = c
	if !s.awaitingAck() {
		return nil
	}
	s.drained = make(chan struct{})
	return s.drained
}

// awaitingAck reports whether a message sent on the current connection
// waits for its PUBACK, PUBREC or PUBCOMP. Caller holds s.mu.
func (s *session) awaitingAck() bool {
	if s.conn == nil || s.conn != s.drainFor {
		return false
	}
	if s.relOwed > 0 {
		return true // a PUBREL is decided but not yet queued: closing now would lose it
	}
	for _, f := range s.inflight {
		if !f.resend {
			return true // sent on this connection (its PUBLISH or its PUBREL), not yet acknowledged
		}
	}
	return false
}

// drainProgress ends a drain wait once the last ack came; called
// when an ack moved the window. Caller holds s.mu.
func (s *session) drainProgress() {
	if s.drained != nil && !s.awaitingAck() {
		close(s.drained)
		s.drained = nil
	}
}
