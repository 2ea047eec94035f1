package gateway

import (
	"time"

	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/gateway/store"
)

// RestoreResult counts what Restore brought back.
type RestoreResult struct {
	Retained int
	Sessions int
	Queued   int // QoS 1/2 messages queued or in flight
	Expired  int // sessions that expired while the broker was down
}

// Restore loads the state store.Open returned: retained messages and
// persistent sessions with their subscriptions, queues, in-flight
// messages, inbound QoS 2 ids, delayed wills and expiry deadlines. Call it
// once, after New and before serving. Sessions are restored disconnected;
// one that was connected when the broker stopped counts its expiry from
// now. A session whose expiry (or will delay) passed while the broker was
// down expires now (its will is published).
func (s *Server) Restore(st *store.State) RestoreResult {
	var res RestoreResult
	if st == nil {
		return res
	}
	s.origins.restore(st.Origins)
	for i := range st.Retained {
		m := fromStore(&st.Retained[i])
		s.retained.Set(m.Topic, m) // all of it: the bound refuses new topics, it drops nothing kept
		s.retainedChange(nil, false, m, true)
		res.Retained++
	}
	now := time.Now()
	var wills []*Message
	for i := range st.Sessions {
		ss := &st.Sessions[i]
		expiry := ss.Meta.Expiry
		if !ss.HasMeta || expiry <= 0 || expiry > s.opts.MaxSessionExpiry {
			expiry = s.opts.MaxSessionExpiry // a lost meta record, or a lowered sessions.max_expiry
		}
		offline := now
		if ss.Meta.DisconnectedAt != 0 {
			offline = time.Unix(0, ss.Meta.DisconnectedAt)
		}
		var will *Message
		if ss.Meta.Will != nil {
			will = fromStore(ss.Meta.Will)
		}
		deadline := offline.Add(expiry)
		if expiry < neverExpires && !deadline.After(now) {
			if will != nil {
				wills = append(wills, will)
			}
			if s.state != nil {
				s.state.SessionDel(ss.ID)
			}
			s.stats.expired.Add(1)
			res.Expired++
			continue
		}
		sess := s.restoreSession(ss, expiry, now)
		res.Sessions++
		res.Queued += len(ss.Queue)
		sess.mu.Lock()
		sess.offlineAt = offline
		if will != nil {
			at := time.Unix(0, ss.Meta.WillAt)
			if !at.After(now) {
				wills = append(wills, will)
			} else {
				sess.will, sess.willAt = will, at
				gen := sess.gen
				sess.willTimer = time.AfterFunc(at.Sub(now), func() { s.reg.fireWill(sess, gen) })
			}
		}
		sess.persistMeta(offline)
		if expiry < neverExpires {
			gen := sess.gen
			sess.expiryTimer = time.AfterFunc(deadline.Sub(now), func() { s.reg.expire(sess, gen) })
		}
		sess.mu.Unlock()
		s.reg.mu.Lock()
		s.reg.sessions[ss.ID] = sess
		s.reg.mu.Unlock()
	}
	for _, w := range wills {
		s.publishWill(w)
	}
	return res
}

// restoreSession rebuilds one disconnected session.
func (s *Server) restoreSession(ss *store.Session, expiry time.Duration, now time.Time) *session {
	sess := newSession(s, ss.ID)
	sess.owner = ss.Meta.Owner
	sess.ownerUnknown = !ss.Meta.OwnerKnown // a record from before owners were kept, or a lost one
	sess.expiry = expiry
	sess.persisted = s.state != nil
	for _, sb := range ss.Subs {
		group, inner, _ := packet.SplitShared(sb.Filter)
		if group == "" {
			inner = sb.Filter
		}
		sub := subscription{sess: sess, qos: sb.QoS, noLocal: sb.NoLocal, rap: sb.RetainAsPublished,
			rh: sb.RetainHandling, subID: sb.SubID, group: group}
		sess.subs.set(sb.Filter, group)
		s.subBytes.Add(subCost(sb.Filter))
		if isSys(sb.Filter) {
			s.sysSubs.Add(1)
		}
		s.subs.Add(inner, treeKey(ss.ID, group), sub)
	}
	// A QoS 2 message sent before the restart is resent with its packet id
	// (DUP), or only its PUBREL once PUBREC came [MQTT-4.4.0-1]. A QoS 1
	// send is not recorded, but the queue goes out in order: a QoS 1
	// message queued ahead of a sent QoS 2 one was sent too, and is resent
	// with it, in the order first sent [MQTT-4.6.0-1], not after it.
	sentUpTo := -1 // index in ss.Queue of the last message recorded as sent
	ids := make(map[uint16]bool)
	for i, e := range ss.Queue {
		if e.PID != 0 && !ids[e.PID] {
			ids[e.PID] = true
			sentUpTo = i
		}
	}
	if sentUpTo >= 0 {
		// New packet ids go on after the last one sent, as they do across
		// a reconnect, rather than start again at 1. A client that got a
		// DUP resend of a QoS 2 PUBLISH it had already acknowledged may
		// still hold a stale copy under that id (libmosquitto 2.0 queues
		// the resend a second time, drain.go): reusing the id soon would
		// hand the client that copy again and strand the new message.
		sess.nextID = ss.Queue[sentUpTo].PID
	}
	for i, e := range ss.Queue {
		q := queued{msg: fromStore(&e.Msg), qos: e.QoS, retain: e.Retain, subIDs: e.SubIDs, seq: e.Seq}
		if sess.inflight == nil && sentUpTo >= 0 {
			sess.inflight = make(map[uint16]*outflight, len(ids))
		}
		id := e.PID
		if id != 0 {
			if _, dup := sess.inflight[id]; dup {
				id = 0 // two entries claim one id (damage): send it anew
			}
		} else if i < sentUpTo && e.QoS > 0 && len(ids) < 0xFFFF {
			id = restoreID(sess, ids)
		}
		if id == 0 {
			sess.queue.push(q)
			sess.charge(q.msg.size())
			continue
		}
		sess.inflight[id] = &outflight{q: q, released: e.Released, sent: now}
		sess.order = append(sess.order, id)
		if !e.Released {
			sess.charge(q.msg.size())
		}
	}
	for _, id := range ss.InQoS2 {
		if sess.inboundQoS2 == nil {
			sess.inboundQoS2 = make(map[uint16]*inbound2)
		}
		sess.inboundQoS2[id] = &inbound2{kept: true} // a resent PUBLISH is acknowledged, not delivered again
	}
	return sess
}

// restoreID picks a packet id for a restored in-flight QoS 1 message: one
// that no recorded QoS 2 send holds (ids) nor another restored message.
func restoreID(sess *session, ids map[uint16]bool) uint16 {
	for {
		id := sess.allocID()
		if !ids[id] {
			ids[id] = true
			return id
		}
	}
}
