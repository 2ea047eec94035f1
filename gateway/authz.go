package gateway

// Authorization on the delivery path and the counters of refusals.
//
// A subscription's filter is checked once, at SUBSCRIBE; every message it
// matches is checked again before delivery, because a filter allowed as a
// whole can match topics the subscriber may not read (alice may subscribe
// shared/+/x, but shared/secret/x is denied to her). The verdict for a topic
// depends only on the session's owner and client id, both fixed for the
// session's life, so each session keeps a small cache of verdicts by topic.
// The cache is dropped when the Authorizer's generation changes (a reload),
// so new rules apply to existing subscriptions from the next message on.

import (
	"strings"
	"sync"
)

// readCacheMax bounds a session's cached verdicts. A session that sees more
// distinct topics starts over: the cost is a recomputation, never a wrong
// verdict. At ~100 bytes an entry this is at most ~25 KiB per session, and
// only for sessions that receive messages while an ACL is configured.
const readCacheMax = 256

// readCache is a session's CanRead verdicts by topic under one generation.
// mu is a leaf lock: nothing else is locked while it is held.
type readCache struct {
	mu  sync.Mutex
	gen uint64
	m   map[string]bool
}

// mayRead reports whether a message on topic may be delivered to s.
func (s *session) mayRead(az Authorizer, topic string) bool {
	gen := az.Generation()
	rc := &s.reads
	rc.mu.Lock()
	if rc.gen != gen {
		clear(rc.m)
		rc.gen = gen
	}
	v, ok := rc.m[topic]
	owner := s.owner // adopt changes it under rc.mu
	rc.mu.Unlock()
	if ok {
		return v
	}
	v = az.CanRead(owner, s.id, topic)
	rc.mu.Lock()
	if rc.gen == gen && s.owner == owner {
		if rc.m == nil {
			rc.m = make(map[string]bool)
		}
		if len(rc.m) >= readCacheMax {
			clear(rc.m)
		}
		// The topic may share memory with a whole packet's buffer: the
		// cache keeps its own copy.
		rc.m[strings.Clone(topic)] = v
	}
	rc.mu.Unlock()
	return v
}

// adopt makes user the owner of a session restored without a recorded
// owner (a state file written before owners were kept): trust on first
// resume, once, after an upgrade. Until then its deliveries were checked
// as anonymous. Caller holds the registry's lock and s.mu.
func (s *session) adopt(user string) {
	s.reads.mu.Lock()
	s.owner = user
	clear(s.reads.m) // verdicts computed for the old owner
	s.reads.mu.Unlock()
	s.ownerUnknown = false // the attach that adopts writes the session's meta, owner included
}

// denial says what an authorization refusal was for.
type denial int

const (
	deniedPublish           denial = iota // PUBLISH (v5: PUBACK/PUBREC 0x87; 3.1.1: acknowledged and dropped)
	deniedSubscribe                       // SUBSCRIBE filter (SUBACK 0x80 / 0x87)
	deniedDelivery                        // a message a subscription matched but its owner may not read
	deniedSessionOwner                    // CONNECT for a client id whose session belongs to another user
	deniedTopicLimit                      // a topic name or filter over max_topic_levels / max_topic_length (limits.go)
	deniedSubscriptionLimit               // a new subscription past max_subscriptions (limits.go)
	numDenials
)

func (d denial) String() string {
	switch d {
	case deniedPublish:
		return "publish"
	case deniedSubscribe:
		return "subscribe"
	case deniedDelivery:
		return "delivery"
	case deniedSessionOwner:
		return "session_owner"
	case deniedTopicLimit:
		return "topic_limit"
	case deniedSubscriptionLimit:
		return "subscription_limit"
	}
	return "unknown"
}

func (c *counters) deny(d denial) { c.denied[d].Add(1) }
