package spool

import (
	"context"
	"errors"
	"os"
	"sort"
	"sync"

	"github.com/edgegw/edgegw/internal/durable"
)

// recLoc is where a live record is, captured under s.mu, read without it.
type recLoc struct {
	id  ID
	f   durable.File
	off int64
	n   int64
	end int64 // the segment's valid size when captured: bytes below it never change
}

// locOfLocked returns where record i of g is, which must be written
// (flushPendingFor). end is what is written of g, not what is pending:
// read's read-ahead must not cache bytes a failed write cuts off again.
// Caller holds s.mu.
func (s *Spool) locOfLocked(g *segment, i int) recLoc {
	return recLoc{id: g.base + ID(i), f: g.f, off: int64(g.offs[i]), n: g.recLen(i), end: s.writtenEnd(g)}
}

// scanLocked appends to out up to limit live records with IDs above after.
// Caller holds s.mu.
func (s *Spool) scanLocked(after ID, limit int, out []recLoc) []recLoc {
	from := after + 1
	k := sort.Search(len(s.segs), func(i int) bool { return s.segs[i].base > from }) - 1
	for k = max(k, 0); k < len(s.segs) && len(out) < limit; k++ {
		g := s.segs[k]
		if g.live == 0 {
			continue
		}
		i := 0
		if from > g.base {
			if from-g.base >= ID(g.count()) {
				continue
			}
			i = int(from - g.base)
		}
		for i = g.nextLive(i); i >= 0 && len(out) < limit; i = g.nextLive(i + 1) {
			if !s.flushPendingFor(g, i) {
				return out // taken back: they were the newest
			}
			out = append(out, s.locOfLocked(g, i))
		}
	}
	return out
}

// read loads one record. os.ErrClosed means its segment was deleted (the
// record was removed meanwhile).
//
// It reads ahead: one pread fetches up to readAhead bytes of the segment
// (only below its valid size when the record was located, which no later
// write changes), and the next records are decoded from that block. The
// bridge's sender reads records in order, a batch per group commit or a
// whole backlog, and a pread per record was the costliest part of its
// pick (4 % of edgegw's CPU in a 20,000-message drain). The block is
// reused: the message's topic and payload are copied out of it, in one
// allocation (ownBytes).
func (s *Spool) read(l recLoc) (Message, error) {
	if l.n > readAhead || l.end < l.off+l.n {
		buf := make([]byte, l.n)
		if _, err := l.f.ReadAt(buf, l.off); err != nil {
			return Message{}, err
		}
		return decodeRecord(buf, l.id)
	}
	c := &s.ahead
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.f != l.f || l.off < c.off || l.off+l.n > c.off+int64(len(c.buf)) {
		if c.buf == nil {
			c.buf = make([]byte, readAhead)
		}
		c.f = nil
		n, err := l.f.ReadAt(c.buf[:min(readAhead, l.end-l.off)], l.off)
		if int64(n) < l.n {
			return Message{}, err
		}
		c.f, c.off, c.buf = l.f, l.off, c.buf[:n]
	}
	at := l.off - c.off
	m, err := decodeRecord(c.buf[at:at+l.n], l.id)
	if err == nil {
		m.ownBytes()
	}
	return m, err
}

// readAhead is the most one read of a segment fetches (read).
const readAhead = 32 << 10

// readBlock is the segment bytes read last (read), reused.
type readBlock struct {
	mu  sync.Mutex
	f   durable.File // nil: empty
	off int64
	buf []byte // bytes [off, off+len(buf)) of f
}

// seed puts the bytes just written at off of f in the block, so that the
// sender, woken as the commit starts, reads the window from memory and
// not with a pread (issue 16: at sensor rates that pread was one of the
// three ordinary system calls of each commit, and the first such call
// after the process went idle wakes the runtime's sysmon thread). They
// extend the block when they follow it and fit; otherwise they replace it
// if they fit alone: a sender reading an older backlog from the block
// then reads it again, one pread per commit at most. Only bytes written
// whole may be seeded: a failed write is cut off again.
//
// The caller holds the spool's mu, and read holds c.mu across its pread:
// waiting for c.mu here would hold every append, ack and scan behind a
// reader's disk read (a cold backlog on a slow SD card). A block in use
// is not seeded: the seed is only a saving, and the reader replaces the
// block anyway.
func (c *readBlock) seed(f durable.File, off int64, b []byte) {
	if !c.mu.TryLock() {
		return
	}
	defer c.mu.Unlock()
	switch {
	case c.f == f && c.off+int64(len(c.buf)) == off && len(c.buf)+len(b) <= readAhead:
		c.buf = append(c.buf, b...)
	case len(b) <= readAhead:
		if c.buf == nil {
			c.buf = make([]byte, 0, readAhead)
		}
		c.f, c.off, c.buf = f, off, append(c.buf[:0], b...)
	}
}

// readFailed handles a record that could not be read back: unless its
// segment was deleted under us, it is dropped so the queue keeps moving.
func (s *Spool) readFailed(l recLoc, err error) {
	if errors.Is(err, os.ErrClosed) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if g, i := s.locateLocked(l.id); g != nil && !g.isRemoved(i) {
		s.log.Error("unreadable record dropped", "reason", DropCorrupt, "id", uint64(l.id), "err", err)
		s.removeLocked(g, i, DropCorrupt)
	}
}

// Next returns the oldest unacked message with an ID above after, waiting
// until there is one or ctx ends. The bridge keeps up to max_inflight
// messages in flight by passing the last ID it sent; after a reconnect,
// Next(ctx, 0) starts again from the oldest unacked message, so every
// unacked message is re-sent in order.
func (s *Spool) Next(ctx context.Context, after ID) (ID, Message, error) {
	var one [1]recLoc
	for {
		if err := ctx.Err(); err != nil {
			return 0, Message{}, err
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return 0, Message{}, ErrClosed
		}
		locs := s.scanLocked(after, 1, one[:0])
		if len(locs) == 0 {
			if s.notify == nil {
				s.notify = make(chan struct{})
			}
			ch := s.notify
			s.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return 0, Message{}, ctx.Err()
			}
			continue
		}
		s.mu.Unlock()
		m, err := s.read(locs[0])
		switch {
		case err != nil:
			s.readFailed(locs[0], err)
		case s.expired(&m):
			s.drop(locs[0].id, DropExpired)
			after = locs[0].id
		default:
			return locs[0].id, m, nil
		}
	}
}

// Peek returns up to n unacked messages with IDs above after, oldest
// first, without waiting.
func (s *Spool) Peek(after ID, n int) ([]Entry, error) {
	if n <= 0 {
		return nil, nil
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	locs := s.scanLocked(after, n, make([]recLoc, 0, min(n, 64)))
	s.mu.Unlock()
	out := make([]Entry, 0, len(locs))
	for _, l := range locs {
		m, err := s.read(l)
		if err != nil {
			s.readFailed(l, err)
			continue
		}
		if s.expired(&m) {
			s.drop(l.id, DropExpired)
			continue
		}
		out = append(out, Entry{ID: l.id, Message: m})
	}
	return out, nil
}

// Get returns record id if it is still in the spool (ok false: acked,
// dropped, or not written). An expired one is dropped, as by Next, and not
// returned; an unreadable one is dropped as corrupt. Unlike Peek(id-1, 1)
// it never reads another record: the bridge re-reads a record the
// upstream refused for now, and the record after it may be in flight,
// sent before it expired, which must not be dropped as expired under its
// acker.
func (s *Spool) Get(id ID) (m Message, ok bool, err error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return m, false, ErrClosed
	}
	g, i := s.locateLocked(id)
	if g == nil || g.isRemoved(i) || !s.flushPendingFor(g, i) {
		s.mu.Unlock()
		return m, false, nil
	}
	l := s.locOfLocked(g, i)
	s.mu.Unlock()
	m, err = s.read(l)
	switch {
	case err != nil:
		s.readFailed(l, err)
		return Message{}, false, nil
	case s.expired(&m):
		s.drop(id, DropExpired)
		return Message{}, false, nil
	}
	return m, true, nil
}
