package gateway

// queued is one message waiting in a session's queue, with the per-
// subscription delivery details decided when it was routed.
type queued struct {
	msg    *Message
	qos    byte     // granted: min(message QoS, subscription QoS)
	retain bool     // retain flag as it goes on the wire
	subIDs []uint32 // v5 subscription identifiers of the matching subscriptions
	seq    uint64   // its name in the state store; 0 when not stored (persist.go)
	// share is the shared subscription (group and filter) this copy was
	// routed by, "" if not only by one: when the session ends before the
	// client took it, another member gets it (share.go).
	share string
}

// deque is a FIFO ring of queued messages. It grows by doubling and shrinks
// back when it empties, so a session that once had a burst does not keep a
// large buffer. Not safe for concurrent use: the owning session's mutex
// guards it.
type deque struct {
	buf        []queued
	head, size int
	qos0       int // how many entries have qos 0 (overflow drops these first)
}

func (d *deque) len() int { return d.size }

func (d *deque) push(q queued) {
	if d.size == len(d.buf) {
		d.grow()
	}
	d.buf[(d.head+d.size)%len(d.buf)] = q
	d.size++
	if q.qos == 0 {
		d.qos0++
	}
}

func (d *deque) grow() {
	n := len(d.buf) * 2
	if n == 0 {
		n = 4
	}
	nb := make([]queued, n)
	for i := 0; i < d.size; i++ {
		nb[i] = d.buf[(d.head+i)%len(d.buf)]
	}
	d.buf, d.head = nb, 0
}

func (d *deque) front() *queued { return &d.buf[d.head] }

func (d *deque) pop() queued {
	q := d.buf[d.head]
	d.buf[d.head] = queued{}
	d.head = (d.head + 1) % len(d.buf)
	d.size--
	if q.qos == 0 {
		d.qos0--
	}
	if d.size == 0 {
		d.head = 0
		if len(d.buf) > 64 {
			d.buf = nil // release a burst's buffer
		}
	}
	return q
}

// firstQoS0 returns the oldest QoS 0 entry, or nil.
func (d *deque) firstQoS0() *queued {
	if d.qos0 == 0 {
		return nil
	}
	for i := 0; i < d.size; i++ {
		if q := &d.buf[(d.head+i)%len(d.buf)]; q.qos == 0 {
			return q
		}
	}
	return nil
}

// removeFirstQoS0 removes the oldest QoS 0 entry and returns it.
func (d *deque) removeFirstQoS0() (queued, bool) {
	if d.qos0 == 0 {
		return queued{}, false
	}
	for i := 0; i < d.size; i++ {
		idx := (d.head + i) % len(d.buf)
		if d.buf[idx].qos != 0 {
			continue
		}
		q := d.buf[idx]
		// Shift the entries before it one place towards the tail.
		for j := i; j > 0; j-- {
			d.buf[(d.head+j)%len(d.buf)] = d.buf[(d.head+j-1)%len(d.buf)]
		}
		d.buf[d.head] = queued{}
		d.head = (d.head + 1) % len(d.buf)
		d.size--
		d.qos0--
		return q, true
	}
	return queued{}, false
}

// remove takes out, in place and keeping the order of the rest, every
// entry match reports, calling gone for each.
func (d *deque) remove(match func(*queued) bool, gone func(queued)) {
	n := 0
	for i := 0; i < d.size; i++ {
		q := d.buf[(d.head+i)%len(d.buf)]
		if match(&q) {
			if q.qos == 0 {
				d.qos0--
			}
			gone(q)
			continue
		}
		d.buf[(d.head+n)%len(d.buf)] = q
		n++
	}
	for i := n; i < d.size; i++ {
		d.buf[(d.head+i)%len(d.buf)] = queued{}
	}
	d.size = n
	if n == 0 {
		d.head = 0
	}
}

// each calls fn for every entry, oldest first.
func (d *deque) each(fn func(*queued)) {
	for i := 0; i < d.size; i++ {
		fn(&d.buf[(d.head+i)%len(d.buf)])
	}
}

// drain empties the deque, calling fn for each entry.
func (d *deque) drain(fn func(queued)) {
	for d.size > 0 {
		fn(d.pop())
	}
	d.buf = nil
}
