package spool

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
)

// deleteSegmentLocked removes a sealed segment with no live record. A
// reader holding g.f gets os.ErrClosed. Caller holds s.mu.
func (s *Spool) deleteSegmentLocked(g *segment) {
	i := sort.Search(len(s.segs), func(i int) bool { return s.segs[i].base >= g.base })
	if i == len(s.segs) || s.segs[i] != g {
		return
	}
	s.segs = slices.Delete(s.segs, i, i+1)
	s.diskBytes -= g.size
	s.pinned -= g.dead
	g.f.Close()
	// Not fsyncing the directory: a segment that comes back after a power
	// loss is covered by acks.log or, at worst, re-sent.
	if err := s.fs.Remove(g.path); err != nil {
		s.log.Warn("delete segment", "segment", filepath.Base(g.path), "err", err)
	}
}

// removeLocked marks record i of g as gone (acked if reason is "", else
// dropped) and queues it for acks.log. Caller holds s.mu.
func (s *Spool) removeLocked(g *segment, i int, reason DropReason) {
	n := g.recLen(i)
	g.setRemoved(i)
	g.live--
	g.dead += n
	if i == g.lo {
		if g.lo = g.nextLive(i); g.lo < 0 {
			g.lo = g.count()
		}
	}
	s.live--
	s.liveBytes -= n - recOverhead
	if reason == "" {
		s.acked++
	} else {
		s.dropped[reason]++
	}
	why, lane := removalOf(reason), g.lanes[i]
	s.tally[lane][why]++
	s.liveLane[lane]--
	id := g.base + ID(i)
	s.coverRemovedLocked(id)
	if k := len(s.acks); k > 0 && s.acks[k-1].last+1 == id && s.acks[k-1].why == why && s.acks[k-1].lane == lane {
		s.acks[k-1].last = id
	} else {
		s.acks = append(s.acks, ackRange{id, id, why, lane})
	}
	if g.sealed {
		s.pinned += n
		if g.live == 0 {
			s.deleteSegmentLocked(g)
		}
	}
	s.kickFlusher()
}

// locateLocked finds record id. Caller holds s.mu.
func (s *Spool) locateLocked(id ID) (*segment, int) {
	i := sort.Search(len(s.segs), func(i int) bool { return s.segs[i].base > id }) - 1
	if i < 0 {
		return nil, 0
	}
	g := s.segs[i]
	if j := int(id - g.base); j < g.count() {
		return g, j
	}
	return nil, 0
}

// Ack removes an upstream-acknowledged message. Acks may come in any order;
// acking a message that is already gone (acked twice, or dropped) is a
// no-op. The ack reaches disk within one SyncInterval.
func (s *Spool) Ack(id ID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if id == 0 || id >= s.nextID {
		return fmt.Errorf("spool: ack of unknown id %d", id)
	}
	if g, i := s.locateLocked(id); g != nil && !g.isRemoved(i) && s.flushPendingFor(g, i) {
		s.removeLocked(g, i, "")
	}
	return nil
}

// Drop removes a message without an upstream ack, counted under reason
// (DropRefused: the upstream refused it). Dropping a message that is
// already gone is a no-op.
func (s *Spool) Drop(id ID, reason DropReason) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if id == 0 || id >= s.nextID {
		return fmt.Errorf("spool: drop of unknown id %d", id)
	}
	if g, i := s.locateLocked(id); g != nil && !g.isRemoved(i) && s.flushPendingFor(g, i) {
		s.removeLocked(g, i, reason)
	}
	return nil
}

// drop is Drop for a record the spool just read.
func (s *Spool) drop(id ID, reason DropReason) {
	if err := s.Drop(id, reason); err != nil && !errors.Is(err, ErrClosed) {
		s.log.Error("drop", "id", uint64(id), "reason", reason, "err", err)
	}
}

// expired reports whether m's expiry has passed: it is dropped, never
// returned.
func (s *Spool) expired(m *Message) bool {
	return !m.Expiry.IsZero() && !s.opts.Now().Before(m.Expiry)
}
