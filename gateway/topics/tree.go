package topics

// Design note — Tree
//
// Tree is a trie with one node per filter level. A node keeps its literal
// children in a map, looked up with a substring of the topic (a map lookup
// with a string key does not allocate), and its wildcard children in two
// dedicated fields, plus and hash, so Match never hashes "+" or "#" and the
// [MQTT-4.7.2-1] rule is a flag test at the root. The (key, value) entries of
// a filter live on the node where the filter ends; a "...#" filter's entries
// live on the hash child of its parent. A node with entries also keeps its
// filter string so Match hands it to fn without rebuilding it.
//
// Match walks the topic by index (no strings.Split) and recurses only into
// branches that exist: its cost grows with the topic's depth and the number
// of matching entries, not with the number of subscriptions. It runs under
// the read lock, so publishes proceed in parallel; Add and Remove take the
// write lock. Remove prunes every node left with no entries and no children
// and drops empty maps, so the tree's memory follows live subscriptions.
//
// Entries of one node are a slice (iterated on the hot path); when a filter
// has many subscribers a key->position index is added so Add and Remove stay
// O(1) instead of scanning.

import (
	"strings"
	"sync"
)

// indexMin is the number of entries on a node above which a key index is
// kept; below it a linear scan is cheaper than a map.
const indexMin = 8

// Tree is a concurrency-safe set of subscriptions: one value per
// (filter, key) pair, where filter is an MQTT topic filter and key names the
// subscriber (a client id, or a key the broker composes for a shared
// subscription). The zero value is an empty tree ready to use; [NewTree]
// returns one. A Tree must not be copied after first use.
type Tree[V any] struct {
	mu    sync.RWMutex
	root  node[V] // never pruned; its level is unused
	len   int     // entries; guarded by mu
	nodes int     // nodes below root; guarded by mu
}

type node[V any] struct {
	parent   *node[V]
	level    string              // this node's key in parent.children (literal nodes only)
	children map[string]*node[V] // literal levels; nil when empty
	plus     *node[V]            // "+" child
	hash     *node[V]            // "#" child (a leaf: "#" is always the last level)
	filter   string              // the filter ending here; set while entries is non-empty
	entries  []entry[V]
	index    map[string]int // key -> position in entries; nil unless len(entries) > indexMin
}

type entry[V any] struct {
	key string
	v   V
}

// NewTree returns an empty Tree.
func NewTree[V any]() *Tree[V] {
	return &Tree[V]{}
}

// Add sets the value of the subscription (filter, key), creating it if it
// does not exist. It reports whether an existing value was replaced.
//
// The filter should have passed [ValidFilter]; an invalid filter is stored
// with its misplaced wildcards treated as literal text.
func (t *Tree[V]) Add(filter, key string, v V) (replaced bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := &t.root
	for rest, last := filter, false; !last; {
		var lvl string
		lvl, rest, last = cutLevel(rest)
		n = t.child(n, lvl, last)
	}
	if i := n.find(key); i >= 0 {
		n.entries[i].v = v
		return true
	}
	if len(n.entries) == 0 {
		n.filter = filter
	}
	n.entries = append(n.entries, entry[V]{key: key, v: v})
	if n.index != nil {
		n.index[key] = len(n.entries) - 1
	} else if len(n.entries) > indexMin {
		n.index = make(map[string]int, len(n.entries))
		for i, e := range n.entries {
			n.index[e.key] = i
		}
	}
	t.len++
	return false
}

// child returns the child of n for one filter level, creating it if needed.
// Caller holds t.mu for writing.
func (t *Tree[V]) child(n *node[V], lvl string, last bool) *node[V] {
	switch {
	case lvl == "+":
		if n.plus == nil {
			n.plus = &node[V]{parent: n}
			t.nodes++
		}
		return n.plus
	case lvl == "#" && last:
		if n.hash == nil {
			n.hash = &node[V]{parent: n}
			t.nodes++
		}
		return n.hash
	}
	if c := n.children[lvl]; c != nil {
		return c
	}
	// Clone so a long-gone filter string is not pinned by a shared prefix.
	c := &node[V]{parent: n, level: strings.Clone(lvl)}
	if n.children == nil {
		n.children = make(map[string]*node[V])
	}
	n.children[c.level] = c
	t.nodes++
	return c
}

// Remove deletes the subscription (filter, key) and reports whether it
// existed. Nodes left empty are pruned.
func (t *Tree[V]) Remove(filter, key string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := &t.root
	for rest, last := filter, false; !last && n != nil; {
		var lvl string
		lvl, rest, last = cutLevel(rest)
		switch {
		case lvl == "+":
			n = n.plus
		case lvl == "#" && last:
			n = n.hash
		default:
			n = n.children[lvl]
		}
	}
	if n == nil {
		return false
	}
	i := n.find(key)
	if i < 0 {
		return false
	}
	n.removeAt(i)
	t.len--
	t.prune(n)
	return true
}

// prune detaches n and then its ancestors while they hold nothing.
// Caller holds t.mu for writing.
func (t *Tree[V]) prune(n *node[V]) {
	for n != &t.root && len(n.entries) == 0 && len(n.children) == 0 && n.plus == nil && n.hash == nil {
		p := n.parent
		switch n {
		case p.plus:
			p.plus = nil
		case p.hash:
			p.hash = nil
		default:
			delete(p.children, n.level)
			if len(p.children) == 0 {
				p.children = nil // maps never shrink; drop it
			}
		}
		n.parent = nil
		t.nodes--
		n = p
	}
}

// find returns the position of key in n.entries, or -1.
func (n *node[V]) find(key string) int {
	if n.index != nil {
		if i, ok := n.index[key]; ok {
			return i
		}
		return -1
	}
	for i := range n.entries {
		if n.entries[i].key == key {
			return i
		}
	}
	return -1
}

// removeAt deletes n.entries[i] by moving the last entry into its place.
func (n *node[V]) removeAt(i int) {
	last := len(n.entries) - 1
	if n.index != nil {
		delete(n.index, n.entries[i].key)
	}
	if i != last {
		n.entries[i] = n.entries[last]
		if n.index != nil {
			n.index[n.entries[i].key] = i
		}
	}
	n.entries[last] = entry[V]{} // release key and value to the GC
	n.entries = n.entries[:last]
	switch {
	case last == 0:
		n.entries, n.index, n.filter = nil, nil, ""
	case cap(n.entries) > 64 && last < cap(n.entries)/4:
		// A filter that once had many subscribers gives the memory back.
		n.entries = append([]entry[V](nil), n.entries...)
	}
	if n.index != nil && last <= indexMin/2 {
		n.index = nil
	}
}

// Match calls fn for every subscription whose filter matches the topic name,
// once per (filter, key), in no particular order. It does not allocate.
//
// fn runs while the tree's read lock is held: it must be quick and must not
// call Add, Remove, Match or Len on the same tree (a recursive read lock
// deadlocks as soon as a writer is waiting). Collect what you need and act
// after Match returns.
func (t *Tree[V]) Match(topic string, fn func(filter, key string, v V)) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	// [MQTT-4.7.2-1] a topic starting with '$' is not matched by a
	// filter whose first level is a wildcard.
	t.root.match(topic, false, len(topic) > 0 && topic[0] == '$', fn)
}

// match visits the entries under n that match the remaining topic levels.
// done means the topic has no levels left; dollarRoot is true only at the root of
// a '$' topic, where wildcard children are skipped.
// Caller holds the read lock.
func (n *node[V]) match(topic string, done, dollarRoot bool, fn func(filter, key string, v V)) {
	if n.hash != nil && !dollarRoot {
		// "#" matches the parent level ("a/#" matches "a") and any
		// number of levels below it.
		n.hash.emit(fn)
	}
	if done {
		n.emit(fn)
		return
	}
	lvl, rest, last := cutLevel(topic)
	if n.plus != nil && !dollarRoot {
		n.plus.match(rest, last, false, fn)
	}
	if c := n.children[lvl]; c != nil {
		c.match(rest, last, false, fn)
	}
}

func (n *node[V]) emit(fn func(filter, key string, v V)) {
	for i := range n.entries {
		e := &n.entries[i]
		fn(n.filter, e.key, e.v)
	}
}

// Len returns the number of subscriptions in the tree.
func (t *Tree[V]) Len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.len
}

// nodeCount returns the number of nodes below the root (for tests).
func (t *Tree[V]) nodeCount() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.nodes
}
