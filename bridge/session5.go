package bridge

// Design note: the MQTT 5 uplink's session state. paho.golang keeps a
// session's in-flight state in a pahosession.SessionManager, and its default
// one (session/state) allocates packet ids itself, from 1, and persists
// flows in its own store: after a crash it would number messages afresh,
// and a new message could take the id of a QoS 2 flow the broker still
// holds (wireid.go). Its store interface persists packets by the id it
// chose; there is no way to hand it an id. So the bridge implements the
// SessionManager itself, and it is small because the spool already is the
// durable state:
//
//   - the packet id of the publish carrying spool record r is wireID(r),
//     as over 3.1.1, but here it is the id paho sends: the sender sets it
//     in the PUBLISH and AddToSession keeps it (no rewriting on the wire);
//   - the session lives as long as the bridge (not one connection), so
//     after a reconnect with a present session it re-sends each flow under
//     its id [MQTT-4.4.0-1]: the PUBLISH with DUP set if no PUBREC came,
//     else the PUBREL;
//   - after a crash the restarted bridge has no session, but each record
//     still maps to the same id: a QoS 2 PUBLISH the broker holds unreleased
//     is recognised as the same message [MQTT-4.3.3-10];
//   - a flow's end reports its reason code: success acks the spool record;
//     a permanent refusal drops it, counted by reason; a temporary one
//     (0x97 quota exceeded, ...) leaves it in the spool and the session's
//     acker schedules it again (uplink5.go).
//
// Inbound QoS 2 (in rules) is exactly once across reconnects and
// restarts: the ids of flows the bridge has PUBREC'd and not yet seen
// PUBREL for are kept (here while the process runs, and by the gateway on
// disk with the message's routing: inbound.go), and a re-delivered
// PUBLISH with such an id is answered, not delivered again.

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho/log"
	pahosession "github.com/eclipse/paho.golang/paho/session"

	"github.com/edgegw/edgegw/bridge/spool"
)

// flow5 is one upstream QoS 1/2 publish of the MQTT 5 uplink.
type flow5 struct {
	rec  spool.ID
	id   uint16 // its packet id: wireID(rec)
	qos  byte
	lane spool.Lane // its record's priority lane
	size int        // about its size on the wire (for the send window)

	// Under the session's mu:
	pub  *packets.Publish // set by AddToSession; nil while only announced
	rel  bool             // PUBREC received: the re-send is a PUBREL
	resp chan<- packets.ControlPacket

	// Written once, before done is closed.
	reason byte          // the reason code that ended it (>= 0x80: refused)
	reset  bool          // ended because the broker had no session: not answered
	done   chan struct{} // closed when the flow ended
}

// request5 is a SUBSCRIBE or UNSUBSCRIBE of the MQTT 5 uplink waiting
// for its answer. A publish whose own packet id it holds takes another
// (QoS 1) or waits for done (QoS 2, pickWireID) [MQTT-2.2.1-3].
type request5 struct {
	resp chan<- packets.ControlPacket
	done chan struct{} // closed at its answer or the connection's end
}

// end hands the request its answer (empty: the connection ended).
// Caller holds the session's mu.
func (r *request5) end(answer packets.ControlPacket) {
	select {
	case r.resp <- answer:
	default:
	}
	close(r.done)
}

// session5 is the bridge's paho.golang SessionManager; see the note above.
type session5 struct {
	// ended is called, outside mu, for each flow the broker answered:
	// PUBACK, PUBCOMP, or a PUBACK/PUBREC refusing it.
	ended   func(f *flow5)
	resumed atomic.Uint64 // flows re-sent on a connect (Stats.Resumed)

	mu        sync.Mutex
	conn      io.Writer            // nil between connections
	out       map[uint16]*flow5    // outbound publishes by packet id
	req       map[uint16]*request5 // SUBSCRIBE/UNSUBSCRIBE by packet id
	nextReq   uint16               // where the next SUBSCRIBE id search starts
	wireNext  uint16               // where pickWireID looks for a free publish id
	in        map[uint16]bool      // inbound QoS 2 ids: received; true once PUBREC'd
	refusedIn map[uint16]bool      // inbound publishes the gateway refused: not acked
	lostFlows int                  // flows the last CONNACK dropped: no session (takeLostFlows)
	errs      log.Logger
	// releaseIn forgets an inbound QoS 2 id durably (PUBREL), or all (0:
	// no session upstream); called outside mu (inbound.go).
	releaseIn func(id uint16)
}

var _ pahosession.SessionManager = (*session5)(nil)

func newSession5(ended func(*flow5)) *session5 {
	return &session5{
		ended: ended,
		out:   make(map[uint16]*flow5),
		req:   make(map[uint16]*request5),
		in:    make(map[uint16]bool),
		errs:  log.NOOPLogger{},
	}
}

// begin announces the publish of record rec of lane at qos (1 or 2): its flow is
// registered under the id pickWireID gives. If a QoS 2 record's id is
// held by a flow 65535 records apart, begin returns nil and a channel to
// wait on.
func (s *session5) begin(rec spool.ID, qos byte, lane spool.Lane, size int) (*flow5, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id, wait := pickWireID(rec, qos, &s.wireNext, func(w uint16) <-chan struct{} {
		if f := s.out[w]; f != nil {
			return f.done
		}
		if r := s.req[w]; r != nil { // a SUBSCRIBE's [MQTT-2.2.1-3]
			return r.done
		}
		return nil
	}, func(w uint16) bool { return s.out[w] == nil && s.req[w] == nil })
	if wait != nil {
		return nil, wait
	}
	f := &flow5{rec: rec, id: id, qos: qos, lane: lane, size: size, done: make(chan struct{})}
	s.out[id] = f
	return f, nil
}

// requestWait reports whether busy, a channel begin returned, is a
// request's: a wait on it is bounded by ack_timeout (waitForID), a wait
// on a flow is not.
func (s *session5) requestWait(busy <-chan struct{}) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.req {
		if r.done == busy {
			return true
		}
	}
	return false
}

// abandon removes an announced flow paho did not take (AddToSession was
// not called, or failed). A flow paho took stays: it is on the wire or
// will be re-sent.
func (s *session5) abandon(f *flow5) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.out[f.id] == f && f.pub == nil {
		delete(s.out, f.id)
		close(f.done)
	}
}

// pending returns the flows paho took and the broker has not ended,
// oldest record first: after a reconnect they have just been re-sent in
// that order.
func (s *session5) pending() []*flow5 {
	s.mu.Lock()
	defer s.mu.Unlock()
	fs := make([]*flow5, 0, len(s.out))
	for _, f := range s.out {
		if f.pub != nil {
			fs = append(fs, f)
		}
	}
	slices.SortFunc(fs, func(a, b *flow5) int { return cmp.Compare(a.rec, b.rec) })
	return fs
}

// refuseInbound marks inbound publish id as refused by the gateway: Ack
// will not acknowledge it, and a re-delivery of it is delivered again.
func (s *session5) refuseInbound(id uint16) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refusedIn == nil {
		s.refusedIn = make(map[uint16]bool)
	}
	s.refusedIn[id] = true
}

// ConAckReceived is part of pahosession.SessionManager: a connection is up.
// With no session on the broker every flow is forgotten (its record stays
// in the spool and is sent again as a new message); with one, every flow
// is re-sent under its packet id, oldest first.
func (s *session5) ConAckReceived(conn io.Writer, _ *packets.Connect, ca *packets.Connack) error {
	if !ca.SessionPresent && s.releaseIn != nil {
		s.releaseIn(0) // no flow will be resent (inbound.go)
	}
	s.mu.Lock()
	s.conn = conn
	var reset []*flow5
	if !ca.SessionPresent {
		for id, f := range s.out {
			delete(s.out, id)
			reset = append(reset, f)
		}
		clear(s.in)
		clear(s.refusedIn)
	}
	s.lostFlows = len(reset)
	var resend []*flow5
	for _, f := range s.out {
		if f.pub != nil {
			resend = append(resend, f)
		}
	}
	slices.SortFunc(resend, func(a, b *flow5) int { return cmp.Compare(a.rec, b.rec) })
	s.resumed.Add(uint64(len(resend)))
	var err error
	for _, f := range resend {
		if f.rel {
			_, err = (&packets.Pubrel{PacketID: f.id}).WriteTo(conn)
		} else {
			f.pub.Duplicate = true // [MQTT-3.3.1-1]
			_, err = f.pub.WriteTo(conn)
		}
		if err != nil {
			break
		}
	}
	s.mu.Unlock()
	for _, f := range reset {
		f.reset = true
		close(f.done)
	}
	if err != nil {
		return fmt.Errorf("re-send in-flight publishes: %w", err)
	}
	return nil
}

// takeLostFlows returns how many flows the last CONNACK dropped because
// the broker had no session (ConAckReceived), and forgets it.
func (s *session5) takeLostFlows() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.lostFlows
	s.lostFlows = 0
	return n
}

// ConnectionLost is part of pahosession.SessionManager. Outbound flows stay
// (they are re-sent on the next connection); a SUBSCRIBE waiting for its
// SUBACK gets an empty answer, which paho reports as an error.
func (s *session5) ConnectionLost(*packets.Disconnect) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.conn = nil
	for id, r := range s.req {
		delete(s.req, id)
		r.end(packets.ControlPacket{})
	}
	return nil
}

// AddToSession is part of pahosession.SessionManager. A PUBLISH keeps the
// packet id the sender set (wireID of its record, announced by begin);
// a SUBSCRIBE or UNSUBSCRIBE gets an id no flow holds.
func (s *session5) AddToSession(_ context.Context, p pahosession.Packet, resp chan<- packets.ControlPacket) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == nil {
		return pahosession.ErrNoConnection
	}
	if pub, ok := p.(*packets.Publish); ok {
		f := s.out[pub.PacketID]
		if f == nil || f.pub != nil {
			return fmt.Errorf("publish with packet id %d was not announced", pub.PacketID)
		}
		f.pub, f.resp = pub, resp
		return nil
	}
	for range 65535 {
		s.nextReq++
		if s.nextReq == 0 {
			s.nextReq = 1
		}
		if s.out[s.nextReq] == nil && s.req[s.nextReq] == nil {
			p.SetIdentifier(s.nextReq)
			s.req[s.nextReq] = &request5{resp: resp, done: make(chan struct{})}
			return nil
		}
	}
	return pahosession.ErrPacketIdentifiersExhausted
}

// endLocked ends flow f with reason rc. The caller calls s.ended(f)
// after releasing mu.
func (s *session5) endLocked(f *flow5, rc byte, answer packets.ControlPacket) {
	delete(s.out, f.id)
	f.reason = rc
	close(f.done)
	if f.resp != nil {
		select {
		case f.resp <- answer:
		default:
		}
	}
}

// PacketReceived is part of pahosession.SessionManager: paho's reader hands
// it every packet with a packet id.
func (s *session5) PacketReceived(cp *packets.ControlPacket, pubs chan<- *packets.Publish) error {
	if rel, ok := cp.Content.(*packets.Pubrel); ok && s.releaseIn != nil {
		s.releaseIn(rel.PacketID) // durably, before the PUBCOMP below (inbound.go)
	}
	var ended *flow5
	s.mu.Lock()
	conn := s.conn
	var reply io.WriterTo
	switch p := cp.Content.(type) {
	case *packets.Puback:
		if f := s.out[p.PacketID]; f != nil && f.pub != nil && f.qos == 1 {
			s.endLocked(f, p.ReasonCode, *cp)
			ended = f
		}
	case *packets.Pubrec:
		f := s.out[p.PacketID]
		switch {
		case f == nil || f.pub == nil || f.qos != 2:
			// An id the bridge has no flow for (a late duplicate): release
			// it with 0x92 (packet identifier not found) so the broker can
			// forget it.
			if p.ReasonCode < 0x80 {
				reply = &packets.Pubrel{PacketID: p.PacketID, ReasonCode: 0x92}
			}
		case p.ReasonCode >= 0x80: // refused: the flow ends here, no PUBREL
			s.endLocked(f, p.ReasonCode, *cp)
			ended = f
		default:
			f.rel = true
			reply = &packets.Pubrel{PacketID: p.PacketID}
		}
	case *packets.Pubcomp:
		// PUBCOMP's codes are success and 0x92 (the broker no longer knew
		// the id: it had released the message already). Either way the
		// message was accepted at the PUBREC.
		if f := s.out[p.PacketID]; f != nil && f.pub != nil && f.qos == 2 && f.rel {
			s.endLocked(f, rcSuccess, *cp)
			ended = f
		}
	case *packets.Suback, *packets.Unsuback:
		if r := s.req[cp.PacketID()]; r != nil {
			delete(s.req, cp.PacketID())
			r.end(*cp)
		}
	case *packets.Publish:
		if p.QoS == 2 {
			if acked, seen := s.in[p.PacketID]; seen {
				// A re-delivery of a message already taken [MQTT-4.3.3-10]:
				// answer it again if it was answered, never deliver it twice.
				if acked {
					reply = &packets.Pubrec{PacketID: p.PacketID}
				}
				break
			}
			s.in[p.PacketID] = false
		}
		s.mu.Unlock()
		pubs <- p // paho's router: the bridge's handler, then Ack
		return nil
	case *packets.Pubrel:
		delete(s.in, p.PacketID)
		reply = &packets.Pubcomp{PacketID: p.PacketID}
	}
	var err error
	if reply != nil && conn != nil {
		_, err = reply.WriteTo(conn)
	}
	s.mu.Unlock()
	if ended != nil {
		s.ended(ended)
	}
	return err
}

// Ack is part of pahosession.SessionManager: paho calls it after the bridge's
// handler took an inbound publish. One the gateway refused is not
// acknowledged (a persistent upstream session re-delivers it).
func (s *session5) Ack(pb *packets.Publish) error {
	if pb.QoS == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refusedIn[pb.PacketID] {
		delete(s.refusedIn, pb.PacketID)
		if pb.QoS == 2 {
			delete(s.in, pb.PacketID)
		}
		return nil
	}
	if pb.QoS == 2 {
		// Taken: from now on a re-delivery is answered with PUBREC, also
		// after a reconnect if this PUBREC cannot be sent now.
		s.in[pb.PacketID] = true
	}
	if s.conn == nil {
		return pahosession.ErrNoConnection
	}
	var cp io.WriterTo = &packets.Puback{PacketID: pb.PacketID}
	if pb.QoS == 2 {
		cp = &packets.Pubrec{PacketID: pb.PacketID}
	}
	if _, err := cp.WriteTo(s.conn); err != nil {
		return fmt.Errorf("ack inbound %d: %w", pb.PacketID, err)
	}
	return nil
}

// Close is part of pahosession.SessionManager; the session outlives paho's
// clients (paho closes only a session it made).
func (s *session5) Close() error { return nil }

// SetErrorLogger is part of pahosession.SessionManager.
func (s *session5) SetErrorLogger(l log.Logger) { s.errs = l }

// SetDebugLogger is part of pahosession.SessionManager.
func (s *session5) SetDebugLogger(log.Logger) {}
