package gateway

// A session's subscriptions: the filters it holds (subList) and their
// entries in the server's topic tree, changed together under s.mu.

import "github.com/edgegw/edgegw/gateway/packet"

// subscribe adds or replaces a subscription. filter is as the client sent
// it, inner without a $share prefix.
func (s *session) subscribe(c *client, filter, inner string, sub subscription) (existed bool, pos uint64, owner bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != c || s.destroyed {
		return false, 0, false
	}
	existed = s.subs.set(filter, sub.group)
	if !existed {
		s.srv.subBytes.Add(subCost(filter))
		if isSys(filter) {
			s.srv.sysSubs.Add(1)
		}
	}
	s.srv.subs.Add(inner, treeKey(s.id, sub.group), sub) // [MQTT-3.8.4-3] replaces
	return existed, s.persistSub(filter, sub), true
}

func (s *session) unsubscribe(c *client, filter string) (found, owner bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != c || s.destroyed {
		return false, false
	}
	group, found := s.subs.remove(filter)
	if found {
		s.srv.subBytes.Add(-subCost(filter))
		if isSys(filter) {
			s.srv.sysSubs.Add(-1)
		}
		s.srv.subs.Remove(treeFilter(filter), treeKey(s.id, group))
		s.persistUnsub(filter)
	}
	return found, true
}

// treeKey is the topic tree key of a subscription of client id.
func treeKey(clientID, group string) string {
	if group == "" {
		return clientID
	}
	return "$share/" + group + "/" + clientID
}

// treeFilter strips a $share/<group>/ prefix.
func treeFilter(filter string) string {
	if _, f, ok := packet.SplitShared(filter); ok {
		return f
	}
	return filter
}

// subList is a session's subscriptions: each filter as subscribed with its
// shared-subscription group (the options live in the topic tree). A slice:
// most sessions hold a handful, and a one-entry map cost ~0.4 KiB per idle
// session; an index is added once the list is long. Caller holds s.mu.
type subList struct {
	items []subItem
	index map[string]int // filter -> position; nil while short
}

type subItem struct{ filter, group string }

const subIndexMin = 16

func (l *subList) find(filter string) int {
	if l.index != nil {
		if i, ok := l.index[filter]; ok {
			return i
		}
		return -1
	}
	for i := range l.items {
		if l.items[i].filter == filter {
			return i
		}
	}
	return -1
}

// set adds or replaces filter's entry and reports whether it existed.
func (l *subList) set(filter, group string) (existed bool) {
	if i := l.find(filter); i >= 0 {
		l.items[i].group = group
		return true
	}
	l.items = append(l.items, subItem{filter, group})
	if l.index != nil {
		l.index[filter] = len(l.items) - 1
	} else if len(l.items) > subIndexMin {
		l.index = make(map[string]int, len(l.items))
		for i, it := range l.items {
			l.index[it.filter] = i
		}
	}
	return false
}

// remove deletes filter's entry and returns its group.
func (l *subList) remove(filter string) (group string, found bool) {
	i := l.find(filter)
	if i < 0 {
		return "", false
	}
	group = l.items[i].group
	last := len(l.items) - 1
	if l.index != nil {
		delete(l.index, filter)
	}
	if i != last {
		l.items[i] = l.items[last]
		if l.index != nil {
			l.index[l.items[i].filter] = i
		}
	}
	l.items[last] = subItem{}
	l.items = l.items[:last]
	if len(l.items) == 0 {
		l.items, l.index = nil, nil
	}
	return group, true
}
