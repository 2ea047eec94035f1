package gateway

import (
	"errors"
	"runtime"
	"sync"
	"time"
)

// subscription is one entry of the topic tree: a session's subscription with
// its options. The tree key is the client id, or for shared subscriptions
// "$share/<group>/" + client id, so a client can hold both kinds on a filter.
type subscription struct {
	sess    *session
	qos     byte
	noLocal bool
	rap     bool // retain as published
	rh      byte // retain handling
	subID   uint32
	group   string // shared subscription group, "" for a normal one
}

// target is one session a message goes to, after overlapping subscriptions
// are merged: highest QoS, every subscription identifier.
type target struct {
	sess   *session
	qos    byte
	rap    bool
	subIDs []uint32
	share  string // the shared subscription it was picked for, "" if also (or only) for others
}

type routing struct {
	targets []target
	indexed bool                      // index is in use (targets is large)
	index   map[*session]int          // target index by session; kept, cleared, across uses
	shared  map[string][]subscription // group+"\x00"+filter -> members
}

// linearLimit is the target count up to which duplicates are found by a
// scan; above it a map keeps fan-out to thousands of sessions linear.
const linearLimit = 16

var routingPool = sync.Pool{New: func() any { return new(routing) }}

func (r *routing) add(sub subscription) {
	idx := -1
	if r.indexed {
		if i, ok := r.index[sub.sess]; ok {
			idx = i
		}
	} else {
		for i := range r.targets {
			if r.targets[i].sess == sub.sess {
				idx = i
				break
			}
		}
	}
	if idx >= 0 {
		t := &r.targets[idx]
		t.share = "" // one copy for several subscriptions: not one group's to hand on
		if sub.qos > t.qos {
			t.qos = sub.qos
		}
		t.rap = t.rap || sub.rap
		if sub.subID != 0 {
			t.subIDs = append(t.subIDs, sub.subID)
		}
		return
	}
	t := target{sess: sub.sess, qos: sub.qos, rap: sub.rap}
	if sub.subID != 0 {
		t.subIDs = []uint32{sub.subID}
	}
	r.targets = append(r.targets, t)
	switch {
	case r.indexed:
		r.index[sub.sess] = len(r.targets) - 1
	case len(r.targets) > linearLimit:
		if r.index == nil {
			r.index = make(map[*session]int, 2*len(r.targets))
		}
		r.indexed = true
		for i := range r.targets {
			r.index[r.targets[i].sess] = i
		}
	}
}

func (r *routing) reset() {
	clear(r.targets)
	r.targets = r.targets[:0]
	if r.indexed {
		clear(r.index)
		r.indexed = false
	}
	if cap(r.targets) > 4096 {
		r.targets, r.index = nil, nil // a huge fan-out's buffers are not kept
	}
	for k := range r.shared {
		delete(r.shared, k)
	}
}

// route delivers m to every matching subscription and sink. It never blocks
// on a subscriber: each delivery is an enqueue under that session's lock.
// The error is a sink's (a bridge could not take the message durably); the
// subscribers have been served regardless.
func (s *Server) route(m *Message) error {
	_, _, err := s.routeKept(m, nil)
	return err
}

// routeKept is route for a publisher whose acknowledgement may wait without
// blocking its reader: for asynchronous sinks (a bridge spool's group
// commit) and for flow control (a subscriber whose queue passed its high
// water mark). With d set, routeKept may call d.deferAck once and returns
// pending = true; the returned function is then called exactly once
// (possibly before routeKept returns) with the combined verdict. Without
// pending, err is the synchronous verdict. matched reports whether any
// subscription or sink took the message.
func (s *Server) routeKept(m *Message, d deferrer) (pending, matched bool, err error) {
	var from *client
	if pa, ok := d.(*pendingAck); ok {
		from = pa.c
	}
	return s.routeVia(m, d, from)
}

// routeVia is routeKept called by the reader of from (nil: not a reader),
// which then writes what it queued for other connections itself once its
// input is drained (writer.go).
func (s *Server) routeVia(m *Message, d deferrer, from *client) (pending, matched bool, err error) {
	if m.Origin != OriginSys { // received: from clients and bridges, not the broker's own reports
		s.stats.received.Add(1)
	}
	h := keeper{d: d, from: from}
	if _, client := d.(*pendingAck); client && m.QoS > 0 && (s.state != nil || s.sinks.active()) {
		h.hold = armHold(s, m) // something may still refuse it: its copies wait (hold.go)
	}
	if m.Retain {
		h.pos = s.retain(m)
	}
	if sp, ok := d.(statePositioner); ok {
		h.pos = max(h.pos, sp.statePos())
	}
	sinks, sinkErr := s.sinks.deliver(m, &h)

	r := routingPool.Get().(*routing)
	s.subs.Match(m.Topic, func(filter, key string, sub subscription) {
		if sub.noLocal && sub.sess.id == m.Origin {
			return // [MQTT-3.8.3-3] v5 no local
		}
		if sub.group != "" {
			if r.shared == nil {
				r.shared = make(map[string][]subscription)
			}
			k := sub.group + "\x00" + filter
			r.shared[k] = append(r.shared[k], sub)
			return
		}
		r.add(sub)
	})
	az := s.opts.Authorizer
	for k, members := range r.shared {
		if az != nil {
			members = s.readers(az, members, m.Topic)
			if len(members) == 0 {
				continue
			}
		}
		n := len(r.targets)
		r.add(s.pickShared(k, members))
		if len(r.targets) > n { // a copy of its own for this group
			r.targets[n].share = k
		}
	}
	matched = sinks > 0 || len(r.targets) > 0
	var now time.Time // only a message with an expiry needs the clock
	if !m.Expiry.IsZero() {
		now = time.Now()
	}
	congested := false
	var waitBuf [4]*session
	waitOn := waitBuf[:0]
	for _, t := range r.targets {
		if az != nil && !t.sess.mayRead(az, m.Topic) {
			s.stats.deny(deniedDelivery)
			continue
		}
		qos := min(m.QoS, t.qos)
		c, w := t.sess.deliver(m, qos, t.rap && m.Retain, t.subIDs, t.share, now, &h)
		congested = congested || c
		if w {
			waitOn = append(waitOn, t.sess)
		}
	}
	// Flow control: registered after delivery, with no session lock held
	// (opening the publisher's ack slot takes the publisher's locks). A
	// bridge's inbound message waits for no subscriber, as with Publish
	// (exactlyonce.go).
	if _, bridged := d.(*syncKeep); bridged {
		waitOn = waitOn[:0]
	}
	for _, sess := range waitOn {
		if k := h.get(); k != nil {
			sess.addWaiter(k)
		}
	}
	if err := s.waitState(m, &h); err != nil {
		sinkErr = errors.Join(sinkErr, err)
	}
	r.reset()
	routingPool.Put(r)
	h.hold.done(sinkErr, &h) // the router's guard: decides unless a verdict is still to come
	if h.k != nil {
		if sinkErr != nil {
			h.k.mu.Lock()
			h.k.errs = append(h.k.errs, sinkErr)
			h.k.mu.Unlock()
		}
		pending, sinkErr = true, nil
		defer h.k.finish("", nil) // release the guard; may complete right here
	}
	if congested {
		// A receiving session's queue is filling up: its writer is behind.
		// Yield this processor once so the writer gets to run instead of
		// this publisher's reader decoding more messages that would only be
		// dropped. It does not wait for the subscriber (delivery never
		// blocks a publisher): with nothing else runnable it returns at
		// once. Without it, 20 busy publisher readers kept the one
		// subscriber's writer off the CPU for whole scheduler slices and
		// fan-in at QoS 0 dropped 76% of what it accepted.
		runtime.Gosched()
	}
	return pending, matched, sinkErr
}

// readers keeps, in place, the shared group members that may read the
// message's topic, so a denied member never takes a message from the
// others.
func (s *Server) readers(az Authorizer, members []subscription, topic string) []subscription {
	n := 0
	for _, m := range members {
		if m.sess.mayRead(az, topic) {
			members[n] = m
			n++
		} else {
			s.stats.deny(deniedDelivery)
		}
	}
	return members[:n]
}

// pickShared chooses one member of a shared subscription group, round-robin
// among connected members; if none is connected, among all (the message
// waits in that member's persistent session).
func (s *Server) pickShared(key string, members []subscription) subscription {
	s.shareMu.Lock()
	n := s.shareRR[key]
	s.shareRR[key] = n + 1
	s.shareMu.Unlock()
	for i := range members {
		m := members[(int(n)+i)%len(members)]
		if m.sess.online.Load() {
			return m
		}
	}
	return members[int(n)%len(members)]
}

// publishWill publishes a will message.
func (s *Server) publishWill(w *Message) {
	if err := s.route(w); err != nil {
		s.log.Warn("will not stored by a sink", "topic", w.Topic, "err", err)
	}
}
