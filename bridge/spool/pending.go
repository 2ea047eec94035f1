package spool

// Design note: one write per group commit (issue 16). With SyncBatch and
// SyncAlways a QoS 1/2 record is encoded into the spool's pending buffer
// and written to its segment together with every record appended in the
// same window, in one pwrite as the flush starts, before its fsync. A
// pwrite per append, made under the spool's lock, bought nothing (no one
// is told a QoS 1/2 record is kept before its group commit anyway) and
// cost, at a sensor fleet's 500 msg/s (make bench, sensors; 4 runs
// alternating with the write-per-append build on a shared 2-core machine,
// load 2.5-5.5): edgegw 12.7 % of a core on average, 11.5 % with one
// write per commit; wake-ups 2,470/s, 1,840/s; pwrite 540/s, 84/s; futex
// 745/s, 335/s (the readers no longer wait on a lock held across a
// syscall).
//
// What is the same as a write per append:
//   - the file format and the order of the bytes in the file (a commit's
//     records are the bytes the single writes would have written);
//   - kill -9 loses no record its publisher was told of: done is called
//     after the commit's write (and fsync), and a QoS 0 record (no one
//     waits for it) is written at once, with whatever is pending before
//     it, as before (writeNow);
//   - readers (Next, Peek, Head, Get) see a record as soon as AppendAsync
//     returned: a reader that reaches a pending record writes the buffer
//     first (flushPendingFor), so every record a reader has is in the
//     file;
//   - a full disk refuses the records and keeps the spool: a pending
//     write that fails is cut off the file again, its records are taken
//     back out of the index as if never appended (their IDs are reused:
//     no one saw them) and their dones get the error (ErrNoSpace for a
//     full disk), delivered by the flusher. One failed write refuses the
//     whole window's records, not just those that did not fit.
//
// Pending records are the newest, the tail of the active segment, and
// never removed: a removal (an overflow victim) writes them first, and
// Ack and Drop take IDs only a reader can have handed out.

import (
	"errors"
	"fmt"
)

// pending is the records appended but not yet written (SyncBatch,
// SyncAlways), all in one segment. Guarded by Spool.mu.
type pending struct {
	buf   []byte
	seg   *segment // nil: nothing pending
	off   int64    // where buf goes in seg's file
	first ID       // the ID of the first record in buf
	// failed are dones of records taken back after a failed write, for
	// the flusher to call (outside the lock) with their error.
	failed []failedCallback
}

// failedCallback is a done to be called with err by the flusher.
type failedCallback struct {
	fn  func(ID, error)
	err error
}

// writeNow reports whether a record of qos is written by its append
// rather than at its group commit: with SyncNone (done is called right
// after the write), and for QoS 0, which no one waits on (so that kill -9
// keeps it, as the documentation promises).
func (s *Spool) writeNow(qos byte) bool {
	return s.opts.Sync == SyncNone || qos == 0
}

// addPendingLocked encodes record id (m) of g, to go at offset off, into
// the pending buffer. Caller holds s.mu; anything pending is in g (a
// segment is sealed only after its pending records are written).
func (s *Spool) addPendingLocked(g *segment, off int64, id ID, m *Message) {
	p := &s.pend
	if p.seg == nil {
		p.seg, p.off, p.first = g, off, id
	}
	p.buf = appendRecord(p.buf, id, m)
}

// writtenEnd is the end of g's bytes in its file: its size less what is
// pending. Caller holds s.mu.
func (s *Spool) writtenEnd(g *segment) int64 {
	if s.pend.seg == g {
		return s.pend.off
	}
	return g.size
}

// isPendingLocked reports whether record i of g is not yet written.
// Caller holds s.mu.
func (s *Spool) isPendingLocked(g *segment, i int) bool {
	return s.pend.seg == g && g.base+ID(i) >= s.pend.first
}

// flushPendingFor writes the pending buffer if record i of g is in it (a
// reader or a removal reached it). false: the write failed and the record
// was taken back. Caller holds s.mu.
func (s *Spool) flushPendingFor(g *segment, i int) bool {
	if !s.isPendingLocked(g, i) {
		return true
	}
	return s.writePendingLocked() == nil
}

// writePendingLocked writes the pending buffer to its segment. On failure
// the records are taken back (unwritePendingLocked) and the error, as
// their appends would have returned it, is returned. Caller holds s.mu.
func (s *Spool) writePendingLocked() error {
	p := &s.pend
	if p.seg == nil {
		return nil
	}
	g := p.seg
	if _, err := g.f.WriteAt(p.buf, p.off); err != nil {
		// Cut off whatever part was written so the next record does not
		// land behind garbage.
		if terr := g.f.Truncate(p.off); terr != nil {
			s.failLocked(fmt.Errorf("spool: write: %w (truncate: %v)", err, terr))
		}
		err = s.writeErrLocked("write", err)
		if errors.Is(err, ErrNoSpace) {
			// writeErrLocked counted one; every record in buf was refused.
			s.noSpace += uint64(s.nextID-p.first) - 1
		}
		s.unwritePendingLocked(err)
		return err
	}
	s.written.Add(uint64(len(p.buf)))
	s.ahead.seed(g.f, p.off, p.buf)
	p.seg = nil
	p.reset()
	return nil
}

// reset empties the buffer; one grown over 1 MiB (a burst or a huge
// message) is released, not pinned: after a failed write that may be for
// as long as the disk stays full.
func (p *pending) reset() {
	if cap(p.buf) > 1<<20 {
		p.buf = nil
	} else {
		p.buf = p.buf[:0]
	}
}

// unwritePendingLocked takes the pending records back out of the index,
// as if they had never been appended, and queues their dones with err for
// the flusher. Caller holds s.mu.
func (s *Spool) unwritePendingLocked(err error) {
	p := &s.pend
	g := p.seg
	from := int(p.first - g.base)
	for i := g.count() - 1; i >= from; i-- {
		n := g.recLen(i)
		lane := g.lanes[i]
		q := &s.laneQ[lane]
		q.ids = q.ids[:len(q.ids)-1] // the newest of its lane
		s.liveLane[lane]--
		g.live--
		s.live--
		s.liveBytes -= n - recOverhead
		s.diskBytes -= n
		s.appended--
	}
	g.offs, g.lanes = g.offs[:from], g.lanes[:from]
	g.size = p.off
	g.lo = min(g.lo, from) // oldestLocked may have pointed it at a pending record
	s.nextID = p.first
	if b := s.batch; b != nil {
		k := len(b.cbs)
		for k > 0 && b.cbs[k-1].id >= p.first {
			k--
		}
		for _, c := range b.cbs[k:] {
			p.failed = append(p.failed, failedCallback{c.fn, err})
		}
		clear(b.cbs[k:])
		b.cbs = b.cbs[:k]
	}
	p.seg = nil
	p.reset()
	s.kickFlusher() // to deliver the failed dones
}
