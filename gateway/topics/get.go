package topics

// Get returns the value of the subscription (filter, key), if it exists.
func (t *Tree[V]) Get(filter, key string) (V, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
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
	if n != nil {
		if i := n.find(key); i >= 0 {
			return n.entries[i].v, true
		}
	}
	var zero V
	return zero, false
}
