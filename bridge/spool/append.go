package spool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// Append stores m and returns its ID once it is durable as Options.Sync
// says. If ctx ends while waiting for the fsync, Append returns the ID with
// ctx's error: the record is in the spool and will most likely be
// delivered, but the caller must not treat it as durable (with SyncBatch
// and SyncAlways it may not even be written yet, and a failed commit write
// refuses it and gives its ID to a later record, pending.go).
//
// If the spool is full the oldest messages are dropped to make room (see
// the package documentation); a message whose topic+payload exceeds
// MaxBytes fails with ErrTooLarge.
//
// Append is AppendAsync plus a wait: one goroutine gets at most one
// message per group commit through it.
func (s *Spool) Append(ctx context.Context, m Message) (ID, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	// Its own result, not the batch's: a failed commit write refuses the
	// records in it (pending.go) and fails no other.
	type result struct {
		id  ID
		err error
	}
	res := make(chan result, 1)
	id, b, err := s.write(&m, func(id ID, err error) { res <- result{id, err} })
	if err != nil || b == nil {
		return id, err
	}
	select {
	case r := <-res:
		return r.id, r.err
	case <-ctx.Done():
		return id, ctx.Err()
	}
}

// AppendAsync stores m like Append but does not wait for the fsync: the
// record is appended (under the spool's lock, with the same overflow
// policy and checks as Append) before AppendAsync returns, so it is
// visible to Next and Peek, and IDs follow the order of the calls. It is
// written (pwrite) by then with SyncNone and at QoS 0, else by the flush
// that commits it, before done (pending.go): it survives kill -9 from
// the moment anyone is told it is kept. m.Payload is not retained.
//
// done is called exactly once, without any spool lock held:
//
//   - with the record's ID and nil once it is durable as Options.Sync says:
//     after the group commit that covers it (SyncBatch, SyncAlways), or at
//     once after the write (SyncNone);
//   - with (0, err) if the message was not stored (ErrTooLarge, an invalid
//     QoS, a write error, a failed spool, or ErrClosed after Close);
//   - with (id, err) if the record was written but the fsync covering it
//     failed (the spool is then failed).
//
// Close completes every pending done: its final fsync covers every record
// written before it, so they get nil (or the fsync's error). No done is
// left pending after Close returns, and none gets ErrClosed for a record
// that was written.
//
// done may run before AppendAsync returns, on the calling goroutine (an
// immediate failure, SyncNone), or later on the spool's flusher goroutine,
// which calls the dones of one group commit in ID order. It must be cheap
// and must not block: the next group commit waits for it. It may call the
// spool's methods.
func (s *Spool) AppendAsync(m Message, done func(ID, error)) {
	id, b, err := s.write(&m, done)
	if err != nil || b == nil {
		done(id, err)
	}
}

// write validates m, makes room, appends its record to the active segment
// and, unless the mode is SyncNone, joins the next group commit: it
// returns that batch, with done (if not nil) registered on it. A nil batch
// and nil error means the record needs no fsync wait (SyncNone). On error
// nothing was stored and done is not registered.
func (s *Spool) write(m *Message, done func(ID, error)) (ID, *batch, error) {
	size := msgSize(m)
	switch {
	case size > s.opts.MaxBytes || size > maxMessageBytes:
		return 0, nil, fmt.Errorf("%w: %d bytes, max_bytes %d", ErrTooLarge, size, min(s.opts.MaxBytes, maxMessageBytes))
	case len(m.Topic) > maxTopicLen:
		return 0, nil, fmt.Errorf("%w: topic of %d bytes", ErrTooLarge, len(m.Topic))
	case m.QoS > 2:
		return 0, nil, fmt.Errorf("spool: invalid qos %d", m.QoS)
	case m.Lane >= NumLanes:
		return 0, nil, fmt.Errorf("spool: invalid lane %d", m.Lane)
	}
	recLen := size + recOverhead

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return 0, nil, ErrClosed
	}
	if s.failed != nil {
		err := s.failed
		s.mu.Unlock()
		return 0, nil, err
	}
	s.makeRoomLocked(size)
	g, err := s.activeLocked(recLen)
	if err != nil {
		// Nothing was written: not a reason to fail the spool.
		err = s.writeErrLocked("new segment", err)
		s.mu.Unlock()
		return 0, nil, err
	}
	id := s.nextID
	if !s.writeNow(m.QoS) {
		s.addPendingLocked(g, g.size, id, m) // written by the flush (pending.go)
	} else {
		// Behind what is pending: the file keeps the order of the IDs.
		if err := s.writePendingLocked(); err != nil {
			if errors.Is(err, ErrNoSpace) {
				s.noSpace++ // this append, refused with the pending ones
			}
			s.mu.Unlock()
			return 0, nil, err
		}
		s.wbuf = appendRecord(s.wbuf[:0], id, m)
		if _, err := g.f.WriteAt(s.wbuf, g.size); err != nil {
			// Cut off whatever part was written so the next record does not
			// land behind garbage.
			if terr := g.f.Truncate(g.size); terr != nil {
				s.failLocked(fmt.Errorf("spool: write: %w (truncate: %v)", err, terr))
			}
			err = s.writeErrLocked("write", err)
			s.mu.Unlock()
			return 0, nil, err
		}
		s.written.Add(uint64(len(s.wbuf)))
		s.ahead.seed(g.f, g.size, s.wbuf)
		if cap(s.wbuf) > 1<<20 {
			s.wbuf = nil // do not pin a huge buffer after a huge message
		}
	}
	g.add(g.size, recLen, m.Lane)
	s.laneQ[m.Lane].push(id)
	s.liveLane[m.Lane]++
	s.markUnsyncedLocked(g)
	s.nextID++
	s.raiseCeilingLocked()
	s.live++
	s.liveBytes += size
	s.diskBytes += recLen
	s.appended++
	if s.opts.Sync == SyncNone {
		s.notifyLocked()
		s.mu.Unlock()
		return id, nil, nil
	}
	// The reader (Changed, Next) learns of the record from the flusher,
	// once per group commit, not per append: see notifyLocked.
	s.unnotified = true
	b := s.joinBatchLocked()
	if done != nil {
		b.cbs = append(b.cbs, callback{id, done})
	}
	s.kickFlusher()
	s.mu.Unlock()
	return id, b, nil
}

// joinBatchLocked returns the batch of the next flush, starting it if
// there is none: the one of the spool's two batches the flusher is not
// completing. Caller holds s.mu.
func (s *Spool) joinBatchLocked() *batch {
	if s.batch == nil {
		s.batch = &s.batches[0]
		if s.flushing == s.batch {
			s.batch = &s.batches[1]
		}
	}
	return s.batch
}

// writeErrLocked wraps an error of the append path; a full disk becomes
// ErrNoSpace (counted). Caller holds s.mu.
func (s *Spool) writeErrLocked(op string, err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		s.noSpace++
		return fmt.Errorf("%w: %s: %w", ErrNoSpace, op, err)
	}
	return fmt.Errorf("spool: %s: %w", op, err)
}

// makeRoomLocked drops the oldest live records until size more bytes fit.
// Caller holds s.mu.
func (s *Spool) makeRoomLocked(size int64) {
	n := 0
	for s.live > 0 && (s.liveBytes+size > s.opts.MaxBytes || s.pinned > s.pinnedMax) {
		// Over MaxBytes, the lowest lane pays first; too many pinned
		// bytes are freed by the oldest record, whatever its lane.
		g, i := s.oldestLocked()
		if s.liveBytes+size > s.opts.MaxBytes {
			g, i = s.victimLocked()
		}
		if !s.flushPendingFor(g, i) {
			continue // the pending records were refused and taken back
		}
		s.removeLocked(g, i, DropSpoolFull)
		n++
	}
	if n == 0 {
		return
	}
	// A full spool drops on every append: log at most every dropLogEvery.
	s.dropsUnlogged += n
	if now := time.Now(); now.Sub(s.dropLoggedAt) >= dropLogEvery {
		s.log.Warn("spool full, dropping oldest messages", "reason", DropSpoolFull,
			"count", s.dropsUnlogged, "bytes", s.liveBytes, "max_bytes", s.opts.MaxBytes)
		s.dropLoggedAt, s.dropsUnlogged = now, 0
	}
}

// oldestLocked returns the oldest live record. Caller holds s.mu and
// s.live > 0.
func (s *Spool) oldestLocked() (*segment, int) {
	for _, g := range s.segs {
		if g.live > 0 {
			i := g.nextLive(g.lo)
			g.lo = i
			return g, i
		}
	}
	panic("spool: live count out of sync")
}

// activeLocked returns the segment to append recLen bytes to, sealing the
// current one and starting a new one when it is full. Caller holds s.mu.
func (s *Spool) activeLocked(recLen int64) (*segment, error) {
	if n := len(s.segs); n > 0 && !s.segs[n-1].sealed {
		g := s.segs[n-1]
		if g.count() == 0 || g.size+recLen <= s.opts.SegmentSize {
			return g, nil
		}
		if err := s.writePendingLocked(); err != nil {
			return nil, err
		}
		s.sealLocked(g)
	}
	return s.createSegmentLocked(s.nextID)
}

// sealLocked ends appends to g. Its unsynced tail is still queued for the
// flusher, so no fsync happens under the lock. Caller holds s.mu.
func (s *Spool) sealLocked(g *segment) {
	g.sealed = true
	s.pinned += g.dead
	if g.live == 0 {
		s.deleteSegmentLocked(g)
	}
}

// createSegmentLocked starts a segment; the flusher fsyncs it and the
// directory before any Append waiting on a record in it returns. Caller
// holds s.mu.
func (s *Spool) createSegmentLocked(base ID) (*segment, error) {
	path := segPath(s.opts.Dir, base)
	f, err := s.fs.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	if _, err = f.Write(segHeader(base)); err != nil {
		f.Close()
		s.fs.Remove(path)
		return nil, err
	}
	s.written.Add(segHeaderSize)
	g := &segment{base: base, path: path, f: f, size: segHeaderSize, dead: segHeaderSize, newFile: true}
	s.segs = append(s.segs, g)
	s.diskBytes += segHeaderSize
	s.markUnsyncedLocked(g)
	return g, nil
}

// markUnsyncedLocked queues g for the flusher's next fsync (in SyncNone
// only Close syncs, and it finds g by its flag). Caller holds s.mu.
func (s *Spool) markUnsyncedLocked(g *segment) {
	if !g.unsynced && s.opts.Sync != SyncNone {
		s.unsynced = append(s.unsynced, g)
	}
	g.unsynced = true
}
