package gateway

// A session is the broker-side state of one client id: subscriptions, the
// queue of messages waiting to go out, the outgoing in-flight window and the
// inbound QoS 2 packet ids. It outlives connections when it is persistent.
// This file holds the session and its queue; the outgoing window is in
// outbound.go, flow control in flow.go, the inbound QoS 2 ids in inbound.go
// and the subscriptions in subscriptions.go.
//
// Ownership: the registry alone creates, resumes, takes over, expires and
// destroys sessions. A connection that owns a session (s.conn == c) may
// change it; every method that changes it checks ownership under s.mu, so a
// connection that was taken over cannot touch the session any more even if
// its packets are still being read.
//
// Lock order: doc.go. Nothing does I/O while holding s.mu.

import (
	"sync"
	"sync/atomic"
	"time"
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
	relOwed  int           // PUBRELs decided by ackPubrec, not yet queued on the connection (drain.go)

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

	feed *retainedFeed // retained messages still to queue (retained.go)
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
	if s.feed != nil {
		s.feed.live[m.Topic] = struct{}{} // its retained message is older now (retained.go)
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
	withheld := m.held != nil && m.held.join(s) // woken by its verdict (hold.go)
	s.mu.Unlock()
	if c != nil && !withheld {
		h.wake(c, queued) // a routing reader may flush it inline (writer.go)
	}
	return congested, wait
}

// writerBehind reports whether the connection's writer could send queued
// messages right now but has not yet: the queue holds QoS 0 messages or the
// in-flight window is open. A queue that waits only for the client's
// acknowledgements is not helped by giving the writer CPU. Caller holds s.mu.
func (s *session) writerBehind() bool {
	c := s.conn
	return c != nil && (s.queue.qos0 > 0 || len(s.inflight) < c.window)
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
	s.feed = nil
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
