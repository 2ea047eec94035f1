package bridge

import (
	"context"
	"sync"
)

// flowQueue hands the sender's flows to the acker in the order they were
// sent. It grows with what is in flight: the channel it replaces was made
// at the window's maximum at every dial (8,192 flows of ~140 B with an
// automatic window: 1.1 MB allocated, and scanned by every GC cycle) for
// the few dozen a sensor fleet keeps in flight. The window bounds it as
// it bounded the channel (resumed flows may go past the window's caps:
// push never waits, as the channel's send could). One consumer, the
// connection's acker: a second would take its wake-ups.
type flowQueue struct {
	mu      sync.Mutex
	buf     []inflight // a ring: n flows from head
	head, n int
	ready   chan struct{} // capacity 1: a flow was pushed since the acker last looked
}

func newFlowQueue() *flowQueue { return &flowQueue{ready: make(chan struct{}, 1)} }

// push appends f; it never waits.
func (q *flowQueue) push(f inflight) {
	q.mu.Lock()
	if q.n == len(q.buf) {
		grown := make([]inflight, max(16, 2*len(q.buf)))
		for i := range q.n {
			grown[i] = q.buf[(q.head+i)%len(q.buf)]
		}
		q.buf, q.head = grown, 0
	}
	q.buf[(q.head+q.n)%len(q.buf)] = f
	q.n++
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default: // a wake-up is pending already
	}
}

// pop returns the oldest flow, waiting for one; false once ctx ended
// with none there.
func (q *flowQueue) pop(ctx context.Context) (inflight, bool) {
	for {
		q.mu.Lock()
		if q.n > 0 {
			f := q.buf[q.head]
			q.buf[q.head] = inflight{} // nothing kept alive by a slot
			q.head = (q.head + 1) % len(q.buf)
			q.n--
			q.mu.Unlock()
			return f, true
		}
		q.mu.Unlock()
		select {
		case <-q.ready:
		case <-ctx.Done():
			return inflight{}, false
		}
	}
}
