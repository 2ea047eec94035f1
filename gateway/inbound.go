package gateway

// What a session knows of its client's incoming QoS 1/2 flows: the v5
// Receive Maximum count (inboundFlows, per connection) and the inbound QoS 2
// packet ids, which keep a resent PUBLISH from being delivered twice
// (receiveQoS2) until the PUBREL (forgetQoS2).

import (
	"errors"
	"sync/atomic"
)

// inboundFlows counts a v5 client's QoS 1/2 publishes that it may still
// consider unacknowledged, to hold it to the Receive Maximum the broker
// announced in CONNACK [MQTT-3.3.4-7]. A flow opens when its PUBLISH is read
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

// inbound2 is the state of one inbound QoS 2 packet id. An id is pending
// until the sinks have kept the message (its PUBREC waits for that); a
// duplicate PUBLISH that arrives meanwhile (a resend after reconnect) waits
// for the same verdict instead of being acknowledged early.
type inbound2 struct {
	kept    bool
	waiters []func(error) // acks of duplicates waiting for the verdict
	pos     uint64        // state record of the id; its PUBREC waits for it
}

// qos2State is what receiveQoS2 found.
type qos2State int

const (
	qos2Fresh   qos2State = iota // new id: deliver it
	qos2Kept                     // duplicate of a kept message: acknowledge again
	qos2Pending                  // duplicate of a message whose verdict is pending
	qos2NotOwner
)

// receiveQoS2 records an inbound QoS 2 packet id. A duplicate is never
// delivered twice [MQTT-4.3.3-10], [MQTT-4.3.3-2](3.1.1).
func (s *session) receiveQoS2(c *client, id uint16) (qos2State, *inbound2) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != c {
		return qos2NotOwner, nil
	}
	if e := s.inboundQoS2[id]; e != nil {
		if e.kept {
			return qos2Kept, e
		}
		return qos2Pending, e
	}
	if s.inboundQoS2 == nil {
		s.inboundQoS2 = make(map[uint16]*inbound2)
	}
	e := &inbound2{}
	e.pos = s.persistInQoS2(id, true)
	s.inboundQoS2[id] = e
	return qos2Fresh, e
}

// qos2Verdict records whether a fresh inbound QoS 2 message was kept. A
// message that was not kept is forgotten (the client sends it again), and
// duplicates waiting on it get the same verdict. It does not check
// ownership: the verdict belongs to the session whichever connection asks.
func (s *session) qos2Verdict(id uint16, e *inbound2, err error) {
	s.mu.Lock()
	if s.inboundQoS2[id] != e {
		s.mu.Unlock()
		return
	}
	if err == nil {
		e.kept = true
	} else {
		delete(s.inboundQoS2, id)
		s.persistInQoS2(id, false)
	}
	w := e.waiters
	e.waiters = nil
	s.mu.Unlock()
	for _, done := range w {
		done(err)
	}
}

// waitQoS2 makes done wait for the verdict on a pending id; if the verdict
// came meanwhile, done is called at once with it.
func (s *session) waitQoS2(id uint16, e *inbound2, done func(error)) {
	s.mu.Lock()
	cur := s.inboundQoS2[id]
	if cur == e && !e.kept {
		e.waiters = append(e.waiters, done)
		s.mu.Unlock()
		return
	}
	kept := cur == e && e.kept
	s.mu.Unlock()
	if kept {
		done(nil)
	} else {
		done(errNotKept)
	}
}

// errNotKept is the verdict a duplicate gets when its original was not
// kept by a sink.
var errNotKept = errors.New("message not kept")

// hasInboundQoS2 reports whether id is an inbound QoS 2 flow the session
// holds (a PUBLISH with it is a resend, not a new flow).
func (s *session) hasInboundQoS2(id uint16) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.inboundQoS2[id]
	return ok
}

// forgetQoS2 removes an inbound QoS 2 id on PUBREL. pos is the state
// record of the removal, which the PUBCOMP waits for (0: none).
func (s *session) forgetQoS2(c *client, id uint16) (found bool, pos uint64, owner bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != c {
		return false, 0, false
	}
	_, found = s.inboundQoS2[id]
	delete(s.inboundQoS2, id)
	if found {
		pos = s.persistInQoS2(id, false)
	}
	return found, pos, true
}
