package durable

import (
	"context"
	"errors"
	"sync"
)

// ErrStalled is a refused append: the log's pending set is full because
// the disk has not taken what was appended before it (a stalled or very
// slow disk). Nothing of the append was kept.
var ErrStalled = errors.New("disk stalled: too many records waiting to be written")

// Stall says what an append does when the pending set is full.
type Stall uint8

const (
	// StallWait blocks the appender until the flusher has written
	// enough (or the log closes). The zero value.
	StallWait Stall = iota
	// StallRefuse refuses the append at once with ErrStalled.
	StallRefuse
)

// String returns the policy's name.
func (p Stall) String() string {
	if p == StallRefuse {
		return "refuse"
	}
	return "wait"
}

// Bound is a bounded pending set: the number of records (or bytes; the
// log chooses the unit) appended but not yet written. An appender Takes
// before it appends and the flusher Releases what it wrote, so that a
// stalled disk stops memory from growing without end: appenders wait or
// are refused, as the Stall policy says. Safe for concurrent use.
type Bound struct {
	mu     sync.Mutex
	room   chan struct{} // closed when room was made; replaced by the next waiter
	max    int64
	n      int64
	peak   int64
	closed bool
}

// NewBound returns a bound of limit units (at least 1).
func NewBound(limit int64) *Bound { return &Bound{max: max(limit, 1)} }

// Take reserves n units. With StallWait it waits until they fit (or ctx
// ends, or the bound is closed: then it returns the error and takes
// nothing); with StallRefuse it returns ErrStalled at once. n larger than
// the whole bound is taken when nothing else is pending, so one huge
// record is never refused for ever.
func (b *Bound) Take(ctx context.Context, n int64, p Stall) error {
	b.mu.Lock()
	for {
		if b.closed {
			b.mu.Unlock()
			return ErrClosed
		}
		if b.n == 0 || b.n+n <= b.max {
			b.n += n
			b.peak = max(b.peak, b.n)
			b.mu.Unlock()
			return nil
		}
		if p == StallRefuse {
			b.mu.Unlock()
			return ErrStalled
		}
		if b.room == nil {
			b.room = make(chan struct{})
		}
		room := b.room
		b.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			return ctx.Err()
		}
		b.mu.Lock()
	}
}

// Admit is Take without a context: a waiter leaves only when there is
// room or the bound is closed.
func (b *Bound) Admit(n int64, p Stall) error { return b.Take(context.Background(), n, p) }

// Release returns n units: the flusher wrote them (or they were taken
// back).
func (b *Bound) Release(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	b.n -= n
	if b.n < 0 {
		panic("durable: Bound released more than taken")
	}
	b.wakeLocked()
	b.mu.Unlock()
}

// Close wakes every waiter with ErrClosed; later Takes fail too.
func (b *Bound) Close() {
	b.mu.Lock()
	b.closed = true
	b.wakeLocked()
	b.mu.Unlock()
}

func (b *Bound) wakeLocked() {
	if b.room != nil {
		close(b.room)
		b.room = nil
	}
}

// Pending is what is taken now; Peak the most ever taken at once.
func (b *Bound) Pending() (n, peak int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n, b.peak
}

// ErrClosed is a Take on a closed bound.
var ErrClosed = errors.New("closed")
