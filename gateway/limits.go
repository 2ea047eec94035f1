package gateway

import "strings"

// Subscription memory. The topic tree's cost of a subscription is estimated
// from its filter (an upper bound: subscriptions sharing levels share
// nodes) and counted with the queued payloads against limits.memory_budget.
// Subscriptions may take at most half the budget, so messages always keep
// the other half; a SUBSCRIBE beyond it gets SUBACK 0x97 (v5) / 0x80. The
// estimate is calibrated on the measurement above: 1,000 filters of 64
// levels held 23.5 MiB, ~370 bytes per level.
const (
	subEntryCost = 256 // the subscription's entry, key and session bookkeeping
	subLevelCost = 384 // one node of the topic tree
)

// subCost is the estimated memory of one subscription to filter.
func subCost(filter string) int64 {
	return subEntryCost + int64(len(filter)) + subLevelCost*int64(strings.Count(filter, "/")+1)
}

// subscriptionFits reports whether a new subscription to filter stays within
// the subscriptions' share of the memory budget.
func (s *Server) subscriptionFits(filter string) bool {
	used := s.subBytes.Load() + subCost(filter)
	return used <= s.opts.MemoryBudget/2 && s.queuedBytes.Load()+used <= s.opts.MemoryBudget
}

// Topic and subscription limits. Every level of a subscription filter is a node of the
// topic tree, and every level of a retained message's topic a node of the
// retained store: a SUBSCRIBE of 16 filters of 60,000 empty levels (960 KB,
// under max_packet_size) made 960,000 nodes, 350 MiB (issue 13). Names and
// filters are therefore bounded in levels and bytes before anything is
// stored; mosquitto refuses more than 200 levels, the defaults here are
// tighter for a 512 MiB board (docs/security.md). A level limit bounds one
// filter, not many: max_subscriptions bounds a session's count (1,000
// distinct 64-level, 1 KB filters held 23.5 MiB of heap). The byte limit
// defaults to MQTT's own maximum: a long name's bytes are bounded by the
// packet size, the queues' and the retained store's byte limits, and a
// filter's by its estimated memory (subCost) in the memory budget.

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
func (s *session) roomFor(filter string, max int) (room, exists bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	exists = s.subs.find(filter) >= 0
	return len(s.subs.items) < max || exists, exists
}
