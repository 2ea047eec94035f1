package gateway

// Retained messages: the store's bound, and a SUBSCRIBE's retained set
// sent as the subscriber's queue drains.
//
// The bound: the store keeps at most MaxRetainedMessages topics and
// MaxRetainedBytes, counted as topic and payload bytes plus
// retainedOverhead per message. A retained message for a
// topic already stored always replaces it (and an empty one deletes it);
// one for a new topic that does not fit is routed as usual but not
// retained, and counted (Stats.RetainedRefused). Keeping what is stored
// rather than evicting it: a device's last state is what a dashboard
// comes for, and a flood of new topics should not push it out.
//
// The feed: a SUBSCRIBE takes the matching retained messages (pointers;
// the messages stay shared with the store) and the session feeds them into
// its queue only while the queue is below half its limits: at once, before
// the SUBACK goes (so what fits precedes anything published after the
// SUBSCRIBE), then whenever the writer takes from the queue
// (takeSendable). A subscriber that keeps up gets every retained message,
// and the queue's limits hold. A topic that gets
// a live message while the feed runs has its retained message skipped: it
// would be older than what the subscriber already has. The feed lives in
// memory: a session that goes offline keeps it for its next connection,
// a restart loses it.

// retainedOverhead is what a retained message costs beyond its topic and
// payload: the Message, its trie nodes and their maps (measured: 100,000
// messages of 64 B on topics r/<n>/v held 59 MiB of heap).
const retainedOverhead = 512

// retainedCost is what m is charged against MaxRetainedBytes.
func retainedCost(m *Message) int64 { return m.size() + retainedOverhead }

// retainedFeed is a session's retained messages still to queue.
type retainedFeed struct {
	batches []retainedBatch
	// live holds the topics delivered live since the feed began.
	live map[string]struct{}
}

// retainedBatch is one subscription's retained messages.
type retainedBatch struct {
	msgs   []*Message
	next   int
	qos    byte
	subIDs []uint32
}

// retainFits reports whether the store has room for m as a new topic's
// retained message and charges it. Called under the store's lock
// (retain's Update).
func (s *Server) retainFits(m *Message) bool {
	o := &s.opts
	if s.retainedCount.Load() >= int64(o.MaxRetainedMessages) || s.retainedBytes.Load()+retainedCost(m) > o.MaxRetainedBytes {
		return false
	}
	s.retainedCount.Add(1)
	s.retainedBytes.Add(retainedCost(m))
	return true
}

// retainedChange keeps the store's count and bytes: old (had) replaced by
// v (keep). Called under the store's lock.
func (s *Server) retainedChange(old *Message, had bool, v *Message, keep bool) {
	if had {
		s.retainedCount.Add(-1)
		s.retainedBytes.Add(-retainedCost(old))
	}
	if keep {
		s.retainedCount.Add(1)
		s.retainedBytes.Add(retainedCost(v))
	}
}

// startFeed makes the session record live topics before a SUBSCRIBE
// collects its retained messages, so none of them is sent after a newer
// live one.
func (s *session) startFeed() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.feed == nil {
		s.feed = &retainedFeed{live: make(map[string]struct{})}
	}
}

// addFeed queues a subscription's retained messages for the feed.
func (s *session) addFeed(c *client, b retainedBatch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == c && s.feed != nil && len(b.msgs) > 0 {
		s.feed.batches = append(s.feed.batches, b)
	}
}

// feedNow queues what fits of the feed at once, before the SUBACK's
// writer wakes: a client that has seen its SUBACK gets those retained
// messages before anything published after it (all of them when they fit
// in half the queue). It ends a feed with nothing to send.
func (s *session) feedNow() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.feedQueue()
}

// feedQueue moves retained messages into the queue while it is below half
// its limits. Caller holds s.mu.
func (s *session) feedQueue() {
	f := s.feed
	if f == nil {
		return
	}
	o := &s.srv.opts
	for len(f.batches) > 0 {
		b := &f.batches[0]
		for b.next < len(b.msgs) {
			m := b.msgs[b.next]
			// An empty queue always takes one: a message larger than
			// the room is not stuck for good.
			if s.queue.len() > 0 && (2*s.queue.len() >= o.MaxQueuedMessages || 2*(s.queuedBytes+m.size()) > o.MaxQueuedBytes ||
				s.srv.queuedBytes.Load()+s.srv.subBytes.Load()+m.size() > o.MemoryBudget) {
				return // the queue drains first
			}
			b.msgs[b.next] = nil
			b.next++
			if _, newer := f.live[m.Topic]; newer {
				continue
			}
			q := queued{msg: m, qos: min(m.QoS, b.qos), retain: true, subIDs: b.subIDs} // retain flag set: 5.0 §3.3.1.3, [MQTT-3.3.1-8](3.1.1)
			s.persistQueued(&q, nil)
			s.queue.push(q)
			s.charge(m.size())
			if m.held != nil {
				m.held.join(s) // still withheld: its verdict wakes the writer
			}
		}
		f.batches[0] = retainedBatch{}
		f.batches = f.batches[1:]
	}
	s.feed = nil
}
