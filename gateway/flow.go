package gateway

// Flow control: a congested subscriber that keeps up holds its publishers'
// acknowledgements (session.deliver decides, addWaiter registers them)
// until its queue drains below the low water mark (takeSendable releases
// them), and a subscriber that stops draining for flowStall is given up on
// (checkStall). Each method takes s.mu or says that its caller holds it.

import "time"

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
