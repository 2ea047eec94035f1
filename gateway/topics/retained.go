package topics

// Design note — Retained
//
// Retained is a trie of topic names with one node per level; a node holds a
// value when a retained message is stored at exactly its topic. A query
// walks the filter level by level: a literal level is one map lookup, "+"
// visits every child, "#" visits the whole subtree. A query therefore costs
// the size of the part of the trie the filter can reach, not the number of
// stored topics. Delete prunes empty nodes and empty maps so memory follows
// the retained set. A sync.RWMutex guards everything; Match runs under the
// read lock.

import (
	"strings"
	"sync"
)

// Retained is a concurrency-safe store of one value per exact topic name
// (the retained message of that topic), queried by topic filter. The zero
// value is an empty store ready to use; [NewRetained] returns one.
// A Retained must not be copied after first use.
type Retained[V any] struct {
	mu    sync.RWMutex
	root  rnode[V] // never pruned; holds no value
	len   int      // stored topics; guarded by mu
	nodes int      // nodes below root; guarded by mu
}

type rnode[V any] struct {
	parent   *rnode[V]
	level    string // this node's key in parent.children
	children map[string]*rnode[V]
	topic    string // the full topic name; set while has is true
	v        V
	has      bool
}

// NewRetained returns an empty Retained store.
func NewRetained[V any]() *Retained[V] {
	return &Retained[V]{}
}

// Set stores v as the retained value of topic, replacing any previous one.
// The topic should have passed [ValidTopic]; '+' and '#' in it are stored as
// literal text.
func (r *Retained[V]) Set(topic string, v V) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.set(topic, v)
}

// Update replaces the value of topic by what fn returns for the current
// one (had: there is one); fn returning keep false deletes it. fn runs
// under the store's lock and must not call into the store.
func (r *Retained[V]) Update(topic string, fn func(old V, had bool) (v V, keep bool)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var old V
	n := r.find(topic)
	had := n != nil && n.has
	if had {
		old = n.v
	}
	v, keep := fn(old, had)
	switch {
	case keep:
		r.set(topic, v)
	case had:
		r.delete(n)
	}
}

// set is Set under r.mu.
func (r *Retained[V]) set(topic string, v V) {
	n := &r.root
	for rest, last := topic, false; !last; {
		var lvl string
		lvl, rest, last = cutLevel(rest)
		c := n.children[lvl]
		if c == nil {
			c = &rnode[V]{parent: n, level: strings.Clone(lvl)}
			if n.children == nil {
				n.children = make(map[string]*rnode[V])
			}
			n.children[c.level] = c
			r.nodes++
		}
		n = c
	}
	if !n.has {
		n.has = true
		n.topic = topic
		r.len++
	}
	n.v = v
}

// find returns the node of topic, or nil. Caller holds r.mu.
func (r *Retained[V]) find(topic string) *rnode[V] {
	n := &r.root
	for rest, last := topic, false; !last && n != nil; {
		var lvl string
		lvl, rest, last = cutLevel(rest)
		n = n.children[lvl]
	}
	return n
}

// Get returns the retained value of topic, if any.
func (r *Retained[V]) Get(topic string) (V, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if n := r.find(topic); n != nil && n.has {
		return n.v, true
	}
	var zero V
	return zero, false
}

// Delete removes the retained value of topic and reports whether there was
// one. Nodes left empty are pruned.
func (r *Retained[V]) Delete(topic string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.find(topic)
	if n == nil || !n.has {
		return false
	}
	r.delete(n)
	return true
}

// delete removes n's value and prunes the nodes left empty. Caller holds
// r.mu; n has a value.
func (r *Retained[V]) delete(n *rnode[V]) {
	var zero V
	n.v, n.has, n.topic = zero, false, ""
	r.len--
	for n != &r.root && !n.has && len(n.children) == 0 {
		p := n.parent
		delete(p.children, n.level)
		if len(p.children) == 0 {
			p.children = nil // maps never shrink; drop it
		}
		n.parent = nil
		r.nodes--
		n = p
	}
}

// Len returns the number of stored topics.
func (r *Retained[V]) Len() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.len
}

// Match calls fn for every stored topic that matches the filter, in no
// particular order. The filter should have passed [ValidFilter].
//
// fn runs while the store's read lock is held: it must not call Set, Delete,
// Get, Match or Len on the same store (a recursive read lock deadlocks as
// soon as a writer is waiting).
func (r *Retained[V]) Match(filter string, fn func(topic string, v V)) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	r.root.match(filter, true, fn)
}

// match visits the stored topics below n matching the remaining filter
// levels. root is true at the trie root, where [MQTT-4.7.2-1] applies.
// Caller holds the read lock.
func (n *rnode[V]) match(filter string, root bool, fn func(topic string, v V)) {
	lvl, rest, last := cutLevel(filter)
	switch {
	case lvl == "#" && last:
		// The parent level ("a/#" matches "a") and everything below.
		if n.has {
			fn(n.topic, n.v)
		}
		for k, c := range n.children {
			if root && strings.HasPrefix(k, "$") { // [MQTT-4.7.2-1]
				continue
			}
			c.walk(fn)
		}
	case lvl == "+":
		for k, c := range n.children {
			if root && strings.HasPrefix(k, "$") { // [MQTT-4.7.2-1]
				continue
			}
			c.visit(rest, last, fn)
		}
	default:
		if c := n.children[lvl]; c != nil {
			c.visit(rest, last, fn)
		}
	}
}

// visit is match for a node reached by one filter level; done means the
// filter has no levels left.
func (n *rnode[V]) visit(filter string, done bool, fn func(topic string, v V)) {
	if done {
		if n.has {
			fn(n.topic, n.v)
		}
		return
	}
	n.match(filter, false, fn)
}

// walk calls fn for n and every stored topic below it.
func (n *rnode[V]) walk(fn func(topic string, v V)) {
	if n.has {
		fn(n.topic, n.v)
	}
	for _, c := range n.children {
		c.walk(fn)
	}
}

// nodeCount returns the number of nodes below the root (for tests).
func (r *Retained[V]) nodeCount() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.nodes
}
