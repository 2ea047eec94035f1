package gateway

// A client's message whose verdict can still be a refusal (an
// asynchronous sink, a synchronous sink's error, the state store's
// records) is withheld from its subscribers until the verdict is in:
// every copy waits in its queue (takeSendable stops at it) and, if
// refused, is taken out of every queue and off the retained store, so a
// message its publisher was told was not kept (0x83, or no ack) reaches
// no one, and its resend arrives once. A message nobody can refuse (QoS
// 0, no state store and no sink) has no hold and is delivered at once.
// Nor has a bridge's inbound message (Publish, PublishExactlyOnce): its
// exactly-once design keeps the id with the routing in one state record
// and accepts a resend routed again after a refusal (exactlyonce.go).

import (
	"sync"
	"sync/atomic"
)

const (
	holdPending int32 = iota
	holdKept
	holdRefused
)

// hold is the verdict a routed message waits for before any copy leaves.
type hold struct {
	srv   *Server
	m     *Message
	left  atomic.Int32 // verdicts outstanding, plus the router's guard
	state atomic.Int32 // holdPending, holdKept, holdRefused

	mu       sync.Mutex
	errs     []error
	first    *session   // the first session a copy was queued for while pending
	sessions []*session // the others

	// The retained value the message replaced, put back if it is refused.
	retained bool
	prev     *Message
	hadPrev  bool
}

// withheld reports whether m may not leave a queue yet.
func (m *Message) withheld() bool { return m.held != nil && m.held.state.Load() == holdPending }

// refused reports whether m was refused after it was queued.
func (m *Message) refused() bool { return m.held != nil && m.held.state.Load() == holdRefused }

// heldMessage is a publisher's message with room for its hold, so that
// withholding it costs no allocation of its own: until routing arms it the
// hold is inert (decided, kept).
type heldMessage struct {
	msg  Message
	hold hold
}

func newHeldMessage() *Message {
	hm := &heldMessage{}
	hm.hold.state.Store(holdKept)
	hm.msg.held = &hm.hold
	return &hm.msg
}

// armHold gives m a pending hold with the router's guard and returns it;
// nil when m was armed before (routed again: not withheld again).
func armHold(srv *Server, m *Message) *hold {
	hd := m.held
	if hd == nil {
		hd = &hold{}
		m.held = hd
	} else if hd.srv != nil {
		return nil
	}
	hd.srv, hd.m = srv, m
	hd.left.Store(1)
	hd.state.Store(holdPending)
	return hd
}

// join records s as holding a copy. It reports false when the verdict is
// already in (the caller wakes s itself). Caller holds s.mu.
func (hd *hold) join(s *session) bool {
	hd.mu.Lock()
	defer hd.mu.Unlock()
	if hd.state.Load() != holdPending {
		return false
	}
	if hd.first == nil {
		hd.first = s
	} else {
		hd.sessions = append(hd.sessions, s)
	}
	return true
}

// add counts one more verdict to wait for.
func (hd *hold) add() {
	if hd != nil {
		hd.left.Add(1)
	}
}

// done records one verdict; the last one decides. w wakes the sessions
// (nil: their writers are kicked).
func (hd *hold) done(err error, w *keeper) {
	if hd == nil {
		return
	}
	if err != nil {
		hd.mu.Lock()
		hd.errs = append(hd.errs, err)
		hd.mu.Unlock()
	}
	if hd.left.Add(-1) != 0 {
		return
	}
	hd.mu.Lock()
	refused := len(hd.errs) > 0
	if refused {
		hd.state.Store(holdRefused)
	} else {
		hd.state.Store(holdKept)
	}
	first, sessions := hd.first, hd.sessions
	hd.first, hd.sessions = nil, nil
	hd.mu.Unlock()
	if refused {
		hd.srv.unretain(hd.m, hd)
	}
	if first != nil {
		hd.settle(first, refused, w)
	}
	for _, s := range sessions {
		hd.settle(s, refused, w)
	}
}

func (hd *hold) settle(s *session, refused bool, w *keeper) {
	if c, n := s.settle(hd.m, refused); c != nil {
		w.wake(c, n)
	}
}

// settle lets the session's copies of m go (kept) or takes them out of
// its queue and the state store (refused). It returns the connection to
// wake and its queue length (nil: nothing to wake).
func (s *session) settle(m *Message, refused bool) (*client, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.destroyed {
		return nil, 0
	}
	if refused {
		s.queue.remove(func(q *queued) bool { return q.msg == m }, func(q queued) {
			s.charge(-q.msg.size())
			s.unstore(q)
		})
	}
	return s.conn, s.queue.len()
}

// unretain puts back the retained value a refused message replaced,
// unless a later message replaced it meanwhile.
func (s *Server) unretain(m *Message, hd *hold) {
	if !hd.retained {
		return
	}
	deleted := len(m.Payload) == 0
	restored := false
	s.retained.Update(m.Topic, func(cur *Message, has bool) (*Message, bool) {
		if (has && cur == m) || (deleted && !has) {
			restored = true
			prev, had := hd.prev, hd.hadPrev
			for had && prev.refused() { // refused too: what it replaced
				prev, had = prev.held.prev, prev.held.hadPrev
			}
			s.retainedChange(cur, has, prev, had)
			return prev, had
		}
		return cur, has
	})
	if !restored {
		return
	}
	if cur, ok := s.retained.Get(m.Topic); ok {
		s.persistRetain(cur)
	} else {
		s.persistRetain(&Message{Topic: m.Topic})
	}
}
