package gateway

import "strings"

// Topic and subscription limits. Every level of a subscription filter is a node of the
// topic tree, and every level of a retained message's topic a node of the
// retained store: a SUBSCRIBE of 16 filters of 60,000 empty levels (960 KB,
// under max_packet_size) made 960,000 nodes, 350 MiB (issue 13). Names and
// filters are therefore bounded in levels and bytes before anything is
// stored; mosquitto refuses more than 200 levels, the defaults here are
// tighter for a 512 MiB board (docs/security.md). A level limit bounds one
// filter, not many: max_subscriptions bounds a session's count (1,000
// distinct 64-level, 1 KB filters held 23.5 MiB of heap).

// topicFits reports whether a topic name is within the limits.
func (o *Options) topicFits(name string) bool {
	return len(name) <= o.MaxTopicLength && strings.Count(name, "/") < o.MaxTopicLevels
}

// filterFits reports whether a subscription filter is within the limits:
// its length as sent, and the levels of the filter the tree stores (inner,
// without a $share/<group>/ prefix).
func (o *Options) filterFits(filter, inner string) bool {
	return len(filter) <= o.MaxTopicLength && strings.Count(inner, "/") < o.MaxTopicLevels
}

// roomFor reports whether s may take a subscription to filter (as sent,
// $share prefix included) under max_subscriptions: replacing one it has
// always fits. Only the owning connection's reader adds subscriptions, so
// the answer still holds when it subscribes right after.
func (s *session) roomFor(filter string, max int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.subs.items) < max || s.subs.find(filter) >= 0
}
