package gateway

// A session's outgoing window: the QoS 1/2 messages sent to its client and
// not yet acknowledged (s.inflight, in send order s.order), what the writer
// may take from the queue under the window (takeSendable), and the client's
// PUBACK, PUBREC and PUBCOMP moving it. Each method takes s.mu or says
// that its caller holds it.

import (
	"time"

	"github.com/edgegw/edgegw/gateway/packet"
)

// outflight is one outgoing QoS 1/2 message awaiting its acknowledgement.
type outflight struct {
	q        queued
	released bool      // QoS 2: PUBREC received, PUBREL sent, awaiting PUBCOMP
	relPos   uint64    // QoS 2: the state record of its PUBREC, which its PUBREL waits for (0: none)
	resend   bool      // must be sent again on the current connection
	sent     time.Time // first sent (flow control: how long it waits for its ack)
}

// outgoing is what the writer puts on the wire for one session step.
type outgoing struct {
	q      queued
	id     uint16
	dup    bool
	pubrel bool // a PUBREL for id instead of a PUBLISH
}

// takeSendable moves what may be sent now onto out: in-flight messages to
// resend first, then queued messages while the in-flight window allows.
// QoS 0 messages are not gated by the window. It stops after about
// maxBytes of payload so one write stays bounded.
//
// It also ends flow control once the queue is below its low water mark:
// the publishers to release are returned in rel, for the caller to release
// (releaseWaiters) after the call.
//
// more reports that it stopped at maxBytes with messages still sendable:
// the writer must come back for them (nothing else would wake it for QoS 0).
func (s *session) takeSendable(c *client, window int, now time.Time, maxBytes int64, out []outgoing) (_ []outgoing, rel []*keep, more bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != c || s.destroyed || s.drainFor == c {
		return out, nil, false
	}
	defer func() {
		if len(s.waiters) > 0 && s.belowLowWater() {
			rel = s.takeWaiters()
		}
	}()
	if s.needResend {
		// Resends count against the (possibly smaller) window the new
		// connection allows [MQTT-4.9.0-2] (v5 Receive Maximum): what is
		// left waits for acks, oldest first.
		outstanding := len(s.inflight) - s.unsent
		az := s.srv.opts.Authorizer
		var denied []uint16
		for _, id := range s.order {
			f := s.inflight[id]
			if !f.resend {
				continue
			}
			if !f.released && az != nil && !s.mayRead(az, f.q.msg.Topic) {
				// Sent before a reload (or a restart) denied its topic:
				// authorization holds for every delivery, a resend too.
				s.srv.stats.deny(deniedDelivery)
				if f.q.qos == 1 {
					denied = append(denied, id)
					continue
				}
				// QoS 2: the receiver may hold the packet id until a
				// PUBREL [MQTT-4.3.3-10], [MQTT-4.3.3-2](3.1.1) and
				// would discard a later message sent under it as a
				// duplicate, so the flow is not dropped: it goes on
				// from its PUBREL, as if the PUBREC had come, without
				// the message. A receiver answers every PUBREL with a
				// PUBCOMP [MQTT-4.3.3-11], [MQTT-4.3.3-2](3.1.1), one
				// that never got the PUBLISH too (MQTT 5: reason 0x92,
				// Packet Identifier not found), and the id is free on
				// both sides (docs/security.md).
				f.released = true
				s.charge(-f.q.msg.size())
				s.persistReleased(f.q)
			}
			if outstanding >= window {
				break
			}
			f.resend = false
			s.unsent--
			outstanding++
			if f.released {
				out = append(out, outgoing{id: id, pubrel: true})
			} else {
				out = append(out, outgoing{q: f.q, id: id, dup: true}) // [MQTT-4.4.0-1]
			}
		}
		for _, id := range denied {
			s.forget(id, s.inflight[id])
		}
		s.needResend = s.unsent > 0
	}
	var taken int64
	// held: stopped at a message whose verdict is not in. That is not
	// more work: the verdict wakes the writer (hold.settle), and a writer
	// told to come back would spin until then.
	held := false
	s.feedQueue() // retained messages of a SUBSCRIBE, as the queue has room (retained.go)
	for s.queue.len() > 0 && taken < maxBytes {
		var q queued
		if f := s.queue.front(); f.msg.withheld() {
			held = true
			break // its verdict is not in: nothing overtakes it (hold.go)
		} else if f.qos > 0 && len(s.inflight) >= window {
			// The window gates only QoS 1/2: QoS 0 messages queued behind
			// a waiting one still go out (field report 000, principle 1).
			var ok bool
			if z := s.queue.firstQoS0(); z == nil || z.msg.withheld() {
				held = z != nil
				break
			}
			if q, ok = s.queue.removeFirstQoS0(); !ok {
				break
			}
		} else {
			q = s.queue.pop()
		}
		taken += q.msg.size()
		if q.msg.refused() {
			// Refused after it was queued here (a shared copy handed on):
			// its publisher was told it was not kept.
			s.charge(-q.msg.size())
			s.unstore(q)
			continue
		}
		if q.msg.expired(now) {
			s.charge(-q.msg.size())
			s.unstore(q)
			s.srv.stats.drop(dropExpired)
			continue
		}
		if az := s.srv.opts.Authorizer; az != nil && !s.mayRead(az, q.msg.Topic) {
			// Checked again as it leaves the queue: a reload (or a restart
			// with a changed ACL) since routing may have denied its topic,
			// and authorization holds for every message delivered. A
			// cached verdict: a map look-up while the rules are unchanged.
			s.charge(-q.msg.size())
			s.unstore(q)
			s.srv.stats.deny(deniedDelivery)
			continue
		}
		if q.qos == 0 {
			s.charge(-q.msg.size())
			out = append(out, outgoing{q: q})
			continue
		}
		id := s.allocID()
		if s.inflight == nil {
			s.inflight = make(map[uint16]*outflight)
		}
		s.inflight[id] = &outflight{q: q, sent: now}
		s.order = append(s.order, id)
		s.persistSent(q, id)
		out = append(out, outgoing{q: q, id: id})
	}
	more = !held && s.queue.len() > 0 && (s.queue.qos0 > 0 || len(s.inflight) < window) ||
		s.feed != nil && s.queue.len() == 0 // the feed has more for the emptied queue
	return out, nil, more
}

// allocID returns a packet id not in flight. Caller holds s.mu and has
// checked the window, so a free id exists.
func (s *session) allocID() uint16 {
	for {
		s.nextID++
		if s.nextID == 0 {
			s.nextID = 1
		}
		if _, used := s.inflight[s.nextID]; !used {
			return s.nextID
		}
	}
}

// forget removes id from the in-flight set. Caller holds s.mu.
func (s *session) forget(id uint16, f *outflight) {
	if f.resend {
		s.unsent--
	}
	delete(s.inflight, id)
	for i, v := range s.order {
		if v == id {
			s.order = append(s.order[:i], s.order[i+1:]...)
			break
		}
	}
	if !f.released {
		s.charge(-f.q.msg.size())
	}
	s.unstore(f.q)
	s.drainProgress()
}

// dropUnsendable releases an in-flight message the client cannot take (too
// large for its maximum packet size).
func (s *session) dropUnsendable(c *client, id uint16) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != c {
		return
	}
	if f := s.inflight[id]; f != nil {
		s.forget(id, f)
	}
}

// ackVerdict is what an acknowledgement from the client did to the
// outgoing window.
type ackVerdict int

const (
	ackIgnored   ackVerdict = iota // unknown id, or from a connection that lost the session
	ackMoved                       // the window moved
	ackWrongKind                   // the wrong acknowledgement for the flow: a protocol error
)

// ackPuback handles PUBACK. A PUBACK for a QoS 2 flow (before or after its
// PUBREL) is the wrong kind of acknowledgement [MQTT-4.3.3-3], [MQTT-4.3.3-5].
func (s *session) ackPuback(c *client, id uint16) ackVerdict {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.inflight[id]
	if s.conn != c || f == nil {
		return ackIgnored
	}
	if f.q.qos != 1 {
		return ackWrongKind
	}
	s.forget(id, f)
	return ackMoved
}

// ackPubrec handles PUBREC: sendRel when a PUBREL must be sent (also for an
// id not in flight, answered PUBREL "not found" in v5), once the state
// record at pos is kept (0: none; see sendRel). A v5 PUBREC with an error
// reason ends the exchange. A PUBREC for a QoS 1 message is the wrong kind
// of acknowledgement.
func (s *session) ackPubrec(c *client, id uint16, rc packet.ReasonCode) (v ackVerdict, sendRel, found bool, pos uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != c {
		return ackIgnored, false, false, 0
	}
	f := s.inflight[id]
	if f == nil {
		s.relOwed++
		return ackIgnored, true, false, 0
	}
	if f.q.qos != 2 {
		return ackWrongKind, false, true, 0
	}
	if rc.IsError() {
		s.forget(id, f)
		return ackMoved, false, true, 0
	}
	if !f.released {
		f.released = true
		s.charge(-f.q.msg.size()) // the payload is no longer needed once PUBREC arrived
		f.relPos = s.persistReleased(f.q)
	}
	// A drain ends once this PUBREL is queued (relQueued), not now: a
	// close before it is queued would send nothing.
	s.relOwed++
	return ackIgnored, true, true, f.relPos
}

// relQueued is called after every PUBREL that ackPubrec said to send is
// queued on the connection.
func (s *session) relQueued() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.relOwed--
	s.drainProgress()
}

// ackPubcomp handles PUBCOMP. A PUBCOMP for a QoS 1 message, or for a QoS 2
// flow whose PUBREC never came, is the wrong kind of acknowledgement.
func (s *session) ackPubcomp(c *client, id uint16) ackVerdict {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.inflight[id]
	if s.conn != c || f == nil {
		return ackIgnored
	}
	if !f.released {
		return ackWrongKind
	}
	s.forget(id, f)
	return ackMoved
}
