package spool

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/edgegw/edgegw/internal/durable"
)

// The flusher (durable.Flusher, started by Open) is the group-commit
// goroutine: it sleeps until kicked (no timer ticks while idle), holds the
// commit window open (SyncAlways: until an Append waits), then calls
// flush: the pending records' write, the fsync of the segments, acks to
// acks.log, and the completion of the waiting Appends and AppendAsyncs.
// In SyncNone it holds the window too: only acks.log is written then.
//
// After a covered commit (covered.go) it also wakes when the full commit
// it owes is due, coverMaxAge after the last one, if no flush came first
// (fullCommitDue): the covered windows' records and acks must not wait
// unsynced for the next message, which may be hours away.

// fullCommitDue is when a full commit is owed without a kick (zero:
// none). Flusher only.
func (s *Spool) fullCommitDue() time.Time {
	if !s.coverOwed {
		return time.Time{}
	}
	return s.fullCommitAt.Add(s.opts.coverMaxAge)
}

// drainKickLocked takes a pending kick: the flush starting now covers
// every write, ack and ids change made before it (kicks are sent under
// s.mu), so a later flush is due only for what comes after. Caller holds
// s.mu.
func (s *Spool) drainKickLocked() { s.flusher.DrainKick() }

func (s *Spool) hasWaiters() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.batch != nil
}

// flush makes everything written so far durable and completes the current
// batch. final (from Close) syncs even in SyncNone mode. Only called by the
// flusher goroutine.
func (s *Spool) flush(final bool) {
	doSync := final || s.opts.Sync != SyncNone

	s.mu.Lock()
	s.drainKickLocked()
	// The window's records in one write (pending.go), before the reader
	// is told of them and before the fsync. If it fails they are taken
	// back, and their dones are among the failed below.
	s.writePendingLocked()
	if s.unnotified {
		s.notifyLocked()
	}
	b := s.batch
	s.batch, s.flushing = nil, b
	failed := s.pend.failed
	s.pend.failed = nil
	// A window the upstream acknowledges before the fsync needs none
	// (covered.go).
	covered := false
	if s.opts.Sync == SyncBatch && !final && b != nil {
		s.watchWindowLocked()
		if time.Since(s.fullCommitAt) < s.opts.coverMaxAge {
			if s.cover.left > 0 && s.cover.inTime {
				s.mu.Unlock()
				s.waitCovered(s.flushTimer())
				s.mu.Lock()
				if s.batch == nil && len(s.pend.failed) == 0 {
					// The acks that kicked meanwhile are this flush's:
					// no flush is due for them (it would fsync).
					s.drainKickLocked()
				}
			}
			covered = s.cover.left == 0
		}
	}
	// The ID ceiling is fsynced even so: an ack that reaches the disk
	// must never name an ID that could be handed out again.
	//
	// In every sync mode, SyncNone too: record IDs are the upstream's
	// packet ids, and one handed out again after a power cut collides
	// with a message the upstream has seen. It costs one fsync per
	// idsReserve/2 IDs (syncIDs does nothing when the file is clean).
	idsSync := true
	if covered {
		// The segments stay unsynced for the next full commit: its fsync
		// of acks.log comes after theirs.
		s.cover.commits++
		s.coverOwed = true
		doSync = false
	}
	var toSync []*segment
	switch {
	case covered:
	case s.opts.Sync != SyncNone:
		toSync, s.unsynced, s.unsyncedSpare = s.unsynced, s.unsyncedSpare[:0], nil
	case final:
		for _, g := range s.segs {
			if g.unsynced {
				toSync = append(toSync, g)
			}
		}
	}
	for _, g := range toSync {
		g.unsynced = false
	}
	acks := s.acks
	s.acks, s.acksSpare = s.acksSpare[:0], nil
	var ckpt []byte
	if !covered && (s.ckptDue || len(acks) > 0 && s.ackSize+int64(len(acks))*ackRecSize > s.compactAt) &&
		!time.Now().Before(s.ckptRetryAt) {
		// The checkpoint holds every removal, acks included. Not in a
		// covered commit: it replaces acks.log, so it is fsynced before
		// its rename.
		ckpt = s.checkpointLocked()
	}
	s.mu.Unlock()

	var idsErr error
	if idsSync {
		// The ID ceiling before the records it covers.
		idsErr = s.syncIDs()
	}
	err := s.syncSegments(toSync)

	var ackErr error
	switch {
	case ckpt != nil:
		var installed bool
		if installed, ackErr = s.writeCheckpoint(ckpt, doSync); ackErr != nil {
			// Retried later (a full disk frees up as segments are acked);
			// meanwhile the acks go to the old file, if there is one. If
			// the checkpoint was renamed in place it holds (and counts)
			// them already.
			s.ckptDue = true
			s.ckptRetryAt = time.Now().Add(ckptRetry)
			if len(acks) > 0 && !installed {
				ackErr = errors.Join(ackErr, s.appendAcks(acks, doSync))
			}
		} else {
			s.ckptDue = false
		}
	case len(acks) > 0:
		ackErr = s.appendAcks(acks, doSync)
	case doSync && s.ackUnsynced:
		s.syncs.Add(1)
		ackErr = s.fsync(s.ackPath(), s.ackFile)
	}
	if ackErr != nil || idsErr != nil {
		// Not fatal: a lost ack means a duplicate upstream after a restart.
		// A full disk fails every flush: warn at most every dropLogEvery.
		if now := time.Now(); now.Sub(s.ackWarnAt) >= dropLogEvery {
			s.ackWarnAt = now
			s.log.Warn("writing acks failed; acked messages may be sent again", "err", errors.Join(ackErr, idsErr))
		}
	}

	if doSync && err == nil {
		s.fullCommitAt = time.Now()
		s.coverOwed = false
	}
	s.mu.Lock()
	s.acksSpare = acks[:0]
	if toSync != nil {
		clear(toSync) // no closed segment pinned
		s.unsyncedSpare = toSync[:0]
	}
	if err != nil {
		s.failLocked(err)
	}
	err = s.failed
	s.mu.Unlock()
	// Outside the lock: a callback may call back into the spool.
	for _, c := range failed {
		c.fn(0, c.err) // not stored
	}
	if b != nil {
		for i, c := range b.cbs {
			c.fn(c.id, err)
			b.cbs[i] = callback{}
		}
		s.mu.Lock()
		b.cbs = b.cbs[:0]
		if cap(b.cbs) > 1<<16 { // reuse the slice, unless a burst made it huge
			b.cbs = nil
		}
		s.flushing = nil
		s.mu.Unlock()
	}
}

// flushTimer is the flusher's timer for waitCovered. Flusher only.
func (s *Spool) flushTimer() *time.Timer {
	if s.graceTimer == nil {
		s.graceTimer = time.NewTimer(time.Hour)
		s.graceTimer.Stop()
	}
	return s.graceTimer
}

// syncSegments fsyncs segments, and the directory if one of them is new.
// Flusher only.
func (s *Spool) syncSegments(segs []*segment) error {
	var err error
	dir := false
	for _, g := range segs {
		s.syncs.Add(1)
		// os.ErrClosed: deleted meanwhile, all its records are gone.
		if e := s.fsync(g.path, g.f); e != nil && !errors.Is(e, os.ErrClosed) && err == nil {
			err = fmt.Errorf("spool: sync %s: %w", filepath.Base(g.path), e)
		}
		dir = dir || g.newFile
	}
	if dir && err == nil {
		s.syncs.Add(1)
		if err = s.fs.SyncDir(s.opts.Dir); err != nil {
			err = fmt.Errorf("spool: sync directory: %w", err)
		} else {
			s.mu.Lock()
			for _, g := range segs {
				g.newFile = false
			}
			s.mu.Unlock()
		}
	}
	return err
}

// appendAcks writes removal ranges to acks.log. Flusher only.
func (s *Spool) appendAcks(acks []ackRange, doSync bool) error {
	if s.ackFile == nil {
		return errors.New("acks.log not written yet (checkpoint pending)")
	}
	buf := s.ackBuf[:0]
	for _, r := range acks {
		buf = appendAckRecord(buf, r)
	}
	s.ackBuf = buf
	if _, err := s.ackFile.WriteAt(buf, s.ackSize); err != nil {
		// Keep the file a sequence of whole records.
		return errors.Join(err, s.ackFile.Truncate(s.ackSize))
	}
	s.written.Add(uint64(len(buf)))
	s.ackSize += int64(len(buf))
	s.ackUnsynced = !doSync
	if !doSync {
		return nil
	}
	s.syncs.Add(1)
	return s.fsync(s.ackPath(), s.ackFile)
}

// checkpointLocked encodes a complete acks.log: 1..W removed, where W is
// just below the oldest live record, plus the removed runs above W, all
// as tallied ranges, and one tally entry per reason counting every
// removal so far (ledger.go). Every entry is written twice: a checkpoint
// is small and holds the whole ack state, so one damaged entry must not
// bring its messages back or lose its count. Caller holds s.mu.
func (s *Spool) checkpointLocked() []byte {
	buf := ackHeader()
	put := func(r ackRange) {
		r.why = remTallied
		buf = appendAckRecord(buf, r)
		buf = appendAckRecord(buf, r)
	}
	for lane := range s.tally {
		for why, n := range s.tally[lane] {
			if n > 0 {
				buf = appendTallyRecord(buf, Lane(lane), removal(why), n)
				buf = appendTallyRecord(buf, Lane(lane), removal(why), n)
			}
		}
	}
	w := s.nextID - 1
	if s.live > 0 {
		g, i := s.oldestLocked()
		w = g.base + ID(i) - 1
	}
	if w >= 1 {
		put(ackRange{first: 1, last: w})
	}
	for _, g := range s.segs {
		if g.dead == segHeaderSize || g.last() <= w {
			continue // nothing removed, or all below w
		}
		var run ackRange
		for i := max(int(int64(w)-int64(g.base))+1, 0); i < g.count(); i++ {
			if i&63 == 0 && g.removed[i>>6] == 0 {
				i += 63
				continue
			}
			if !g.isRemoved(i) {
				continue
			}
			id := g.base + ID(i)
			if run.first != 0 && run.last+1 == id {
				run.last = id
				continue
			}
			if run.first != 0 {
				put(run)
			}
			run = ackRange{first: id, last: id}
		}
		if run.first != 0 {
			put(run)
		}
	}
	return buf
}

// writeCheckpoint replaces acks.log with data (write to a temporary file,
// fsync, rename, fsync the directory). Flusher only (or Open).
// installed reports whether data is acks.log now (even if an error
// followed).
func (s *Spool) writeCheckpoint(data []byte, doSync bool) (installed bool, _ error) {
	var m durable.Meter
	f, installed, err := durable.Replace(s.fs, filepath.Join(s.opts.Dir, ackTmpName), s.ackPath(), data, doSync, &m)
	s.written.Add(uint64(m.Bytes()))
	s.syncs.Add(uint64(m.Syncs()))
	if !installed {
		return false, fmt.Errorf("write acks checkpoint: %w", err)
	}
	// Renamed: f is acks.log now, whatever happens next.
	if s.ackFile != nil {
		s.ackFile.Close()
	}
	s.ackFile = f
	s.ackSize = int64(len(data))
	s.ackUnsynced = !doSync
	s.compactAt = max(s.opts.ackCompactMin, 4*s.ackSize)
	if err != nil {
		return true, fmt.Errorf("write acks checkpoint: %w", err)
	}
	if doSync && s.opts.synced != nil {
		s.opts.synced(s.ackPath(), int64(len(data))) // durable under its new name now
	}
	return true, nil
}

// ackPath is acks.log's path.
func (s *Spool) ackPath() string { return s.ackPathName }

// fsync fsyncs f (at path) and tells the test hook (Options.synced).
func (s *Spool) fsync(path string, f durable.File) error {
	size := s.sizeForHook(f)
	err := f.Sync()
	if err == nil && s.opts.synced != nil {
		s.opts.synced(path, size)
	}
	return err
}

// sizeForHook is f's size before an fsync, for the test hook: what the
// fsync covers at least. -1 without a hook.
func (s *Spool) sizeForHook(f durable.File) int64 {
	if s.opts.synced == nil {
		return -1
	}
	fi, err := f.Stat()
	if err != nil {
		return -1
	}
	return fi.Size()
}
