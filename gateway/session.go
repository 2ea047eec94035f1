package gateway

// A session is the broker-side state of one client id: subscriptions, the
// queue of messages waiting to go out, the outgoing in-flight window and the
// inbound QoS 2 packet ids. It outlives connections when it is persistent.
//
// Ownership: the registry alone creates, resumes, takes over, expires and
// destroys sessions. A connection that owns a session (s.conn == c) may
// change it; every method that changes it checks ownership under s.mu, so a
// connection that was taken over cannot touch the session any more even if
// its packets are still being read.
//
// Lock order: doc.go. Nothing does I/O while holding s.mu.

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgegw/edgegw/gateway/packet"
)

type session struct {
	srv   *Server
	id    string
	owner string // user name of the client that created the session ("" = anonymous); see adopt
	// ownerUnknown: restored from a record that did not keep the owner;
	// the first user that resumes the session becomes its owner (adopt).
	// Guarded by the registry's lock.
	ownerUnknown bool
	reads        readCache   // delivery authorization verdicts (authz.go)
	online       atomic.Bool // s.conn != nil; read without the lock by shared-subscription routing

	mu          sync.Mutex
	conn        *client // owner, nil while disconnected
	gen         uint64  // attach count: expiry and will timers of an earlier disconnect are stale
	expiry      time.Duration
	expiryTimer *time.Timer
	destroyed   bool

	// The maps are made on first use: most sessions of a gateway's sensors
	// never have anything in flight or an inbound QoS 2 message.
	subs subList // by filter as subscribed ($share/... included)

	queue       deque
	queuedBytes int64 // queue and in-flight payload bytes charged to this session

	inflight    map[uint16]*outflight
	order       []uint16 // in-flight packet ids in send order (resend on resume)
	needResend  bool
	unsent      int // in-flight entries flagged resend, not yet sent on the current connection
	nextID      uint16
	inboundQoS2 map[uint16]*inbound2 // received, PUBREL not yet seen

	drainFor *client       // the server is stopping: nothing more is sent on it (drain.go)
	drained  chan struct{} // closed when nothing sent on drainFor awaits its PUBACK/PUBREC

	will      *Message // pending will after an abnormal close with a delay
	willTimer *time.Timer
	willAt    time.Time // when will is due

	persisted bool      // the state store holds this session (persist.go)
	offlineAt time.Time // when the last connection left (expiry counts from it)

	// Flow control (see deliver): publishers whose acknowledgements wait
	// for this session's queue to drain, and the stall guard that gives up
	// on a subscriber that stopped draining.
	waiters    []*keep
	stallTimer *time.Timer // armed only while waiters exist
}

// outflight is one outgoing QoS 1/2 message awaiting its acknowledgement.
type outflight struct {
	q        queued
	released bool      // QoS 2: PUBREC received, PUBREL sent, awaiting PUBCOMP
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

func newSession(srv *Server, id string) *session {
	return &session{srv: srv, id: id}
}

// charge adds n bytes to the session's and the server's queued bytes.
// Caller holds s.mu.
func (s *session) charge(n int64) {
	s.queuedBytes += n
	s.srv.queuedBytes.Add(n)
}

// deliver queues m for this session. It never blocks on the client and
// never does I/O; at most it wakes the connection's writer. It reports
// congestion: the queue is at least half full, or a message was dropped
// for lack of room (the caller may yield, see Server.routeKept).
//
// Flow control: a QoS 1/2 message for a connected subscriber that keeps up
// (its oldest unacknowledged message went out less than flowStall ago) and
// whose queue is past its high water mark (half of
// max_queued_messages or max_queued_bytes) makes the publisher's
// acknowledgement wait until the queue drains below the low water mark (a
// quarter). The publisher's own in-flight window then slows it to the
// subscriber's pace, so acknowledged messages are not dropped while the
// subscriber keeps up; while that holds, the per-session limits are soft
// for such messages (the publishers' windows bound the overshoot) and only
// the global memory_budget drops. A subscriber that makes no progress for
// flowStall is not keeping up: waiting publishers are released, its queue
// is trimmed to the limits and the overflow policy applies.
//
// wait reports that the publisher's acknowledgement should wait for this
// session (the caller registers it with addWaiter, outside s.mu: opening
// the publisher's ack slot takes the publisher's locks).
func (s *session) deliver(m *Message, qos byte, retain bool, subIDs []uint32, share string, now time.Time, h *keeper) (congested, wait bool) {
	if m.expired(now) {
		s.srv.stats.drop(dropExpired)
		return false, false
	}
	sz := m.size()
	o := &s.srv.opts
	s.mu.Lock()
	if s.destroyed || (s.conn == nil && qos == 0) {
		// QoS 0 is not kept for a disconnected client: a session holds QoS 0
		// messages only optionally (5.0 §4.1; 3.1.1 requires only QoS 1/2
		// [MQTT-3.1.2-5](3.1.1)).
		s.mu.Unlock()
		return false, false
	}
	flow := qos > 0 && s.conn != nil && h != nil && h.d != nil && s.keepingUp()
	// Overflow policy: make room by dropping this session's QoS 0 messages
	// first, then its oldest; a QoS 0 message never displaces a QoS 1/2 one.
	for {
		reason := dropReason(-1)
		switch {
		case s.srv.queuedBytes.Load()+s.srv.subBytes.Load()+sz > o.MemoryBudget:
			reason = dropMemoryBudget
		case flow:
			// Per-session limits are soft under flow control.
		case s.queue.len() >= o.MaxQueuedMessages || s.queuedBytes+sz > o.MaxQueuedBytes:
			reason = dropQueueFull
		}
		if reason < 0 {
			break
		}
		if old, ok := s.queue.removeFirstQoS0(); ok {
			s.charge(-old.msg.size())
			s.srv.stats.drop(reason)
			continue
		}
		if qos > 0 && s.queue.len() > 0 {
			old := s.queue.pop()
			s.charge(-old.msg.size())
			s.unstore(old)
			s.srv.stats.drop(reason)
			continue
		}
		congested = s.writerBehind()
		s.mu.Unlock()
		s.srv.stats.drop(reason) // the new message itself
		return congested, false
	}
	if subIDs != nil {
		subIDs = append([]uint32(nil), subIDs...) // the routing buffer is reused
	}
	q := queued{msg: m, qos: qos, retain: retain, subIDs: subIDs, share: share}
	s.persistQueued(&q, h)
	s.queue.push(q)
	s.charge(sz)
	c := s.conn
	queued := s.queue.len()
	high := 2*s.queue.len() >= o.MaxQueuedMessages || 2*s.queuedBytes >= o.MaxQueuedBytes
	congested = high && s.writerBehind()
	wait = flow && high
	s.mu.Unlock()
	if c != nil {
		h.wake(c, queued) // a routing reader may flush it inline (writer.go)
	}
	return congested, wait
}

// addWaiter makes k's publisher wait for this session's queue to drain,
// unless it drained or stopped keeping up meanwhile.
func (s *session) addWaiter(k *keep) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == nil || s.destroyed || s.belowLowWater() || !s.keepingUp() {
		return
	}
	k.left.Add(1)
	s.waiters = append(s.waiters, k)
	if s.stallTimer == nil {
		s.stallTimer = time.AfterFunc(s.flowStall(), s.checkStall)
	}
}

// trimToLimits applies the overflow policy to a queue that grew past the
// per-session limits under flow control (QoS 0 first, then the oldest).
// Caller holds s.mu.
func (s *session) trimToLimits() {
	o := &s.srv.opts
	for s.queue.len() > o.MaxQueuedMessages || (s.queuedBytes > o.MaxQueuedBytes && s.queue.len() > 0) {
		old, ok := s.queue.removeFirstQoS0()
		if !ok {
			old = s.queue.pop()
		}
		s.charge(-old.msg.size())
		s.unstore(old)
		s.srv.stats.drop(dropQueueFull)
	}
}

// belowLowWater reports whether the queue has drained enough to release
// waiting publishers. Caller holds s.mu.
func (s *session) belowLowWater() bool {
	o := &s.srv.opts
	return 4*s.queue.len() <= o.MaxQueuedMessages && 4*s.queuedBytes <= o.MaxQueuedBytes
}

// takeWaiters detaches the waiting publishers for release after s.mu is
// unlocked (releasing sends their acks: no I/O or foreign locks under
// s.mu). Caller holds s.mu.
func (s *session) takeWaiters() []*keep {
	w := s.waiters
	s.waiters = nil
	if s.stallTimer != nil {
		s.stallTimer.Stop()
		s.stallTimer = nil
	}
	return w
}

// flowStall is how long a message may stay unacknowledged by a subscriber
// that still counts as keeping up: Options.FlowStall, 250 ms by default (a
// LAN client acks in milliseconds), or write_timeout when that is shorter.
// A subscriber over a slower link gets the plain overflow policy instead
// of holding publishers.
func (s *session) flowStall() time.Duration {
	return min(s.srv.opts.FlowStall, s.srv.opts.WriteTimeout)
}

// oldestSent is when the oldest in-flight message was first sent (zero
// when nothing is in flight). Caller holds s.mu.
func (s *session) oldestSent() time.Time {
	if len(s.order) == 0 {
		return time.Time{}
	}
	return s.inflight[s.order[0]].sent
}

// keepingUp reports whether the subscriber is draining: nothing of it has
// waited for an acknowledgement longer than flowStall. A subscriber that
// never acknowledges (field report 002) stops holding publishers after
// flowStall, and its persistent session keeps the first send times across
// reconnects, so reconnecting does not buy it more. Caller holds s.mu.
func (s *session) keepingUp() bool {
	t := s.oldestSent()
	return t.IsZero() || time.Since(t) < s.flowStall()
}

// checkStall runs while publishers wait on this session: without progress
// for flowStall the subscriber is not keeping up and they are released.
func (s *session) checkStall() {
	s.mu.Lock()
	if s.stallTimer == nil || len(s.waiters) == 0 {
		s.mu.Unlock()
		return
	}
	if s.keepingUp() {
		wait := s.flowStall()
		if t := s.oldestSent(); !t.IsZero() {
			wait -= time.Since(t)
		}
		s.stallTimer = time.AfterFunc(max(wait, time.Millisecond), s.checkStall)
		s.mu.Unlock()
		return
	}
	s.srv.stats.slowConsumers.Add(1)
	s.trimToLimits()
	w := s.takeWaiters()
	s.mu.Unlock()
	releaseWaiters(w)
}

// writerBehind reports whether the connection's writer could send queued
// messages right now but has not yet: the queue holds QoS 0 messages or the
// in-flight window is open. A queue that waits only for the client's
// acknowledgements is not helped by giving the writer CPU. Caller holds s.mu.
func (s *session) writerBehind() bool {
	c := s.conn
	return c != nil && (s.queue.qos0 > 0 || len(s.inflight) < c.window)
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
	for s.queue.len() > 0 && taken < maxBytes {
		var q queued
		if f := s.queue.front(); f.qos > 0 && len(s.inflight) >= window {
			// The window gates only QoS 1/2: QoS 0 messages queued behind
			// a waiting one still go out (field report 000, principle 1).
			var ok bool
			if q, ok = s.queue.removeFirstQoS0(); !ok {
				break
			}
		} else {
			q = s.queue.pop()
		}
		taken += q.msg.size()
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
	more = s.queue.len() > 0 && (s.queue.qos0 > 0 || len(s.inflight) < window)
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
// id not in flight, answered PUBREL "not found" in v5). A v5 PUBREC with an
// error reason ends the exchange. A PUBREC for a QoS 1 message is the wrong
// kind of acknowledgement.
func (s *session) ackPubrec(c *client, id uint16, rc packet.ReasonCode) (v ackVerdict, sendRel, found bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != c {
		return ackIgnored, false, false
	}
	f := s.inflight[id]
	if f == nil {
		return ackIgnored, true, false
	}
	if f.q.qos != 2 {
		return ackWrongKind, false, true
	}
	if rc.IsError() {
		s.forget(id, f)
		return ackMoved, false, true
	}
	if !f.released {
		f.released = true
		s.charge(-f.q.msg.size()) // the payload is no longer needed once PUBREC arrived
		s.persistReleased(f.q)
		s.drainProgress()
	}
	return ackIgnored, true, true
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

// subscribe adds or replaces a subscription. filter is as the client sent
// it, inner without a $share prefix.
func (s *session) subscribe(c *client, filter, inner string, sub subscription) (existed bool, pos uint64, owner bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != c || s.destroyed {
		return false, 0, false
	}
	existed = s.subs.set(filter, sub.group)
	if !existed {
		s.srv.subBytes.Add(subCost(filter))
		if isSys(filter) {
			s.srv.sysSubs.Add(1)
		}
	}
	s.srv.subs.Add(inner, treeKey(s.id, sub.group), sub) // [MQTT-3.8.4-3] replaces
	return existed, s.persistSub(filter, sub), true
}

func (s *session) unsubscribe(c *client, filter string) (found, owner bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != c || s.destroyed {
		return false, false
	}
	group, found := s.subs.remove(filter)
	if found {
		s.srv.subBytes.Add(-subCost(filter))
		if isSys(filter) {
			s.srv.sysSubs.Add(-1)
		}
		s.srv.subs.Remove(treeFilter(filter), treeKey(s.id, group))
		s.persistUnsub(filter)
	}
	return found, true
}

// release frees everything the session holds. Caller holds s.mu; the
// registry calls it when the session is destroyed.
//
// It returns the publishers waiting on this session's flow control, for the
// caller to release after unlocking.
func (s *session) release() []*keep {
	s.destroyed = true
	w := s.takeWaiters()
	s.queue.drain(func(q queued) { s.charge(-q.msg.size()) })
	for id, f := range s.inflight {
		if !f.released {
			s.charge(-f.q.msg.size())
		}
		delete(s.inflight, id)
	}
	s.order = nil
	s.unsent = 0
	s.needResend = false
	s.drainProgress()
	clear(s.inboundQoS2)
	for _, it := range s.subs.items {
		s.srv.subBytes.Add(-subCost(it.filter))
		if isSys(it.filter) {
			s.srv.sysSubs.Add(-1)
		}
		s.srv.subs.Remove(treeFilter(it.filter), treeKey(s.id, it.group))
	}
	s.subs = subList{}
	if s.expiryTimer != nil {
		s.expiryTimer.Stop()
		s.expiryTimer = nil
	}
	if s.willTimer != nil {
		s.willTimer.Stop()
		s.willTimer = nil
	}
	return w
}

// treeKey is the topic tree key of a subscription of client id.
func treeKey(clientID, group string) string {
	if group == "" {
		return clientID
	}
	return "$share/" + group + "/" + clientID
}

// treeFilter strips a $share/<group>/ prefix.
func treeFilter(filter string) string {
	if _, f, ok := packet.SplitShared(filter); ok {
		return f
	}
	return filter
}

// subList is a session's subscriptions: each filter as subscribed with its
// shared-subscription group (the options live in the topic tree). A slice:
// most sessions hold a handful, and a one-entry map cost ~0.4 KiB per idle
// session; an index is added once the list is long. Caller holds s.mu.
type subList struct {
	items []subItem
	index map[string]int // filter -> position; nil while short
}

type subItem struct{ filter, group string }

const subIndexMin = 16

func (l *subList) find(filter string) int {
	if l.index != nil {
		if i, ok := l.index[filter]; ok {
			return i
		}
		return -1
	}
	for i := range l.items {
		if l.items[i].filter == filter {
			return i
		}
	}
	return -1
}

// set adds or replaces filter's entry and reports whether it existed.
func (l *subList) set(filter, group string) (existed bool) {
	if i := l.find(filter); i >= 0 {
		l.items[i].group = group
		return true
	}
	l.items = append(l.items, subItem{filter, group})
	if l.index != nil {
		l.index[filter] = len(l.items) - 1
	} else if len(l.items) > subIndexMin {
		l.index = make(map[string]int, len(l.items))
		for i, it := range l.items {
			l.index[it.filter] = i
		}
	}
	return false
}

// remove deletes filter's entry and returns its group.
func (l *subList) remove(filter string) (group string, found bool) {
	i := l.find(filter)
	if i < 0 {
		return "", false
	}
	group = l.items[i].group
	last := len(l.items) - 1
	if l.index != nil {
		delete(l.index, filter)
	}
	if i != last {
		l.items[i] = l.items[last]
		if l.index != nil {
			l.index[l.items[i].filter] = i
		}
	}
	l.items[last] = subItem{}
	l.items = l.items[:last]
	if len(l.items) == 0 {
		l.items, l.index = nil, nil
	}
	return group, true
}
