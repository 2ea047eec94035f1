package spool

// Design note: a commit the upstream already covered (issue 16). With
// SyncBatch the flusher fsyncs a window's records so that their publishers
// can be told they are kept. But the bridge's sender is woken as the flush
// starts, and over a link that keeps up the upstream broker acknowledges
// the whole window within a millisecond or two: from then on the
// upstream's PUBACK/PUBCOMP is the promise about those messages, and the
// local fsync protects nothing. So when the last window was acknowledged
// in time, the flusher waits up to coverGrace for this window's
// acknowledgements before its fsync; if every record of the window has
// left the spool by then, the commit is covered: the records and the acks
// are written (pwrite) but not fsynced, and the dones are called.
//
// What this keeps:
//   - acknowledged means kept: a done is called with nil only after an
//     fsync covering its record, or once every record of its window has
//     left the spool (acked upstream, or dropped as it would have been
//     after the fsync: expired, refused, overflow);
//   - a durable ack never refers to a record that was not fsynced first:
//     a covered commit leaves its segments marked unsynced and writes its
//     acks without fsync, so the next fsync of acks.log comes after the
//     segments' (flush keeps that order);
//   - bounded duplicates after a power cut: a covered commit is taken only
//     within coverMaxAge of the last full one, and one owes a full commit
//     by then (the flusher wakes for it if no message comes: flushLoop),
//     so acks reach the disk at most coverMaxAge after they are written
//     (after a power cut at most that much more is sent again; at least
//     once, as before). kill -9 loses nothing the page cache holds.
//
// What it costs: when the guess is wrong (the link slowed down) the
// window's publishers wait up to coverGrace longer; the next window then
// fsyncs at once, until a window is acknowledged within coverGrace again
// (measured on every window, waited for or not).
//
// Measured (make bench, sensors: 1,000 sensors at 500 msg/s, a bridge to a
// local mosquitto, the spool on disk): see bench/README.md, "Issue 16,
// session 6".

import "time"

// coverMaxAge bounds the time between full commits (fsync of segments and
// acks.log) while covered commits skip theirs.
const coverMaxAge = time.Second

// coverGraceMax caps how long a commit waits for the upstream's acks.
const coverGraceMax = 5 * time.Millisecond

// coverGrace is how long a commit waits for the upstream to acknowledge
// its window: a quarter of the commit interval, at most coverGraceMax.
func coverGrace(interval time.Duration) time.Duration {
	return min(interval/4, coverGraceMax)
}

// coverWatch follows one window's records to the upstream's acks.
// Guarded by Spool.mu.
type coverWatch struct {
	first, last ID    // the window's IDs (first > last: none)
	left        int64 // those still in the spool
	start       time.Time
	// inTime: the last window watched was acknowledged within the grace,
	// so the next commit waits for its acks.
	inTime bool
	// covered is signalled when left reaches 0 (capacity 1).
	covered chan struct{}
	// next is the first ID of the next window.
	next ID
	// commits counts the covered commits (Stats.CoveredCommits).
	commits uint64
}

// watchWindowLocked starts watching the records appended since the last
// flush started. Caller holds s.mu; flusher only.
func (s *Spool) watchWindowLocked() {
	w := &s.cover
	if w.left > 0 {
		w.inTime = false // the last window is still not acknowledged
	}
	w.first, w.last = w.next, s.nextID-1
	w.next = s.nextID
	w.left = s.liveInLocked(w.first, w.last)
	if w.left == 0 && w.first <= w.last {
		w.inTime = true // acked before its commit even started
	}
	w.start = time.Now()
	select {
	case <-w.covered: // a stale signal from the last window
	default:
	}
}

// liveInLocked counts the live records with IDs first..last. Caller holds
// s.mu.
func (s *Spool) liveInLocked(first, last ID) int64 {
	var n int64
	for _, g := range s.segs {
		if g.last() < first || g.base > last {
			continue
		}
		from := int(max(first, g.base) - g.base)
		to := int(min(last, g.last()) - g.base)
		for i := from; i <= to; i++ {
			if !g.isRemoved(i) {
				n++
			}
		}
	}
	return n
}

// coverRemovedLocked notes that record id left the spool. Caller holds
// s.mu.
func (s *Spool) coverRemovedLocked(id ID) {
	w := &s.cover
	if w.left == 0 || id < w.first || id > w.last {
		return
	}
	if w.left--; w.left > 0 {
		return
	}
	w.inTime = time.Since(w.start) <= s.opts.coverGrace
	select {
	case w.covered <- struct{}{}:
	default:
	}
}

// waitCovered waits until the watched window has left the spool, the
// grace has passed or the spool closes. Flusher only, without s.mu.
func (s *Spool) waitCovered(t *time.Timer) {
	t.Reset(s.opts.coverGrace)
	defer t.Stop()
	select {
	case <-s.cover.covered:
	case <-t.C:
	case <-s.quit:
	}
}
