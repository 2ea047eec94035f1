package gateway

// Design note: a shared subscription hands each message to one member
// (pickShared), into that member's session. When the session ends before
// its client took the message (a clean session's connection drops, a
// persistent one expires, a clean start discards it), MQTT 5 §4.8.2 says
// the server SHOULD send it to another client subscribed to the same
// shared subscription, and the publisher was already acknowledged: the
// message would be lost with a member that happened to go. So the ending
// session's copies routed for a group alone (queued.share) go to another
// member, in the order the session held them: in flight first, then
// queued. A QoS 2 message once sent is the client's and ends with its
// session: the server MUST NOT send it to any other client
// [MQTT-4.8.2-5]; a QoS 1 one still in flight may have reached the client,
// so it can arrive twice in the group (at least once). A copy that also served a
// non-shared subscription of the same session is that session's own and
// ends with it. Restored after a restart, a queued message no longer knows
// its group (the state store does not keep it) and ends with its session,
// as before.

import "time"

// takeSharedLocked returns the copies s holds for shared subscriptions that
// its client has not taken, oldest first; release, which must follow,
// drops them from s. Caller holds s.mu.
func (s *session) takeSharedLocked() []queued {
	var out []queued
	for _, id := range s.order {
		// A QoS 2 message sent to this client stays with it [MQTT-4.8.2-5].
		if f := s.inflight[id]; f != nil && f.q.qos < 2 && f.q.share != "" {
			out = append(out, f.q)
		}
	}
	s.queue.each(func(q *queued) {
		if q.share != "" {
			out = append(out, *q)
		}
	})
	return out
}

// redeliverShared gives each of qs to another member of its shared
// subscription, chosen as routing chooses (pickShared), at that member's
// QoS. The ended session's subscriptions are out of the tree by now. A
// message no member may read any more, or with no member left, is dropped,
// as it was before.
func (s *Server) redeliverShared(qs []queued) {
	if len(qs) == 0 {
		return
	}
	az := s.opts.Authorizer
	now := time.Now()
	var members []subscription
	for _, q := range qs {
		members = members[:0]
		s.subs.Match(q.msg.Topic, func(filter, _ string, sub subscription) {
			if sub.group != "" && sub.group+"\x00"+filter == q.share {
				members = append(members, sub)
			}
		})
		if az != nil {
			members = s.readers(az, members, q.msg.Topic)
		}
		if len(members) == 0 {
			continue
		}
		m := s.pickShared(q.share, members)
		var ids []uint32
		if m.subID != 0 {
			ids = []uint32{m.subID}
		}
		m.sess.deliver(q.msg, min(q.msg.QoS, m.qos), m.rap && q.msg.Retain, ids, q.share, now, &keeper{})
	}
}
