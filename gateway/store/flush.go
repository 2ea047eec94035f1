package store

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// The flusher (durable.Flusher, started by Open) is the group-commit
// goroutine: it sleeps until kicked (no timer ticks while idle), holds the
// window open (SyncAlways: until someone waits; SyncBatch: SyncInterval;
// SyncNone: no window, a record must reach the file quickly to survive
// kill -9), then calls flush, which writes (and fsyncs) what was appended
// and completes the waiters it covers.

// takeRoom takes one record's room in the pending bound, waiting or
// refused (durable.ErrStalled) as Options.Stall says.
func (s *Store) takeRoom() error {
	return s.bound.Admit(1, s.opts.Stall)
}

func (s *Store) hasWaiters() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waiters) > 0
}

// flush writes the pending records, or a snapshot when the log has grown
// CompactRatio times the live state (or a write failed and the file lacks
// records) or, when final, when the log holds dead records. Flusher only.
func (s *Store) flush(final bool) {
	s.mu.Lock()
	if s.dirty && s.grp != nil {
		// Only a snapshot may follow a failed write, and the model holds
		// the open group's records, which are not to be written before
		// the group is whole: its Commit wakes the flusher again.
		s.mu.Unlock()
		return
	}
	buf := s.pending
	s.pending, s.spare = s.spare[:0], nil
	upTo := s.pendingPos
	// Released once written (or given up), before the waiters are
	// called: an appender waiting for room must not wait for them.
	taken := s.taken
	s.taken = 0
	limit := max(s.opts.CompactMin, int64(s.opts.CompactRatio)*s.md.live)
	size := s.fileSize + int64(len(buf))
	var snap []byte
	behind := s.dirty // the file lacks records an earlier failed write dropped
	now := time.Now()
	// Behind, a snapshot is the only way on, and on a full disk each try
	// writes the whole live state into the last free blocks: tried again
	// after a backoff, or at once when the reserve's room would take it.
	wait := behind && !final && now.Before(s.compactNext) &&
		!(s.reserveOK && s.md.live+headerSize+reserveSlack <= reserveSize)
	if s.failed == nil && s.grp == nil && !wait && (s.dirty || size > limit || (final && size > s.md.live+headerSize)) {
		snap = s.md.snapshot() // covers buf: the model has every appended record
	}
	s.mu.Unlock()

	var err error
	switch {
	case wait && s.failed == nil:
		// Appending buf would put later records in the file without the
		// dropped ones: nothing up to upTo is kept.
		err = fmt.Errorf("state store: the file lacks records a full disk refused; next snapshot attempt in %v",
			s.compactNext.Sub(now).Round(time.Millisecond))
	case snap != nil:
		if err = s.compact(snap); err != nil && behind {
			s.compactFailed(now, err)
		} else if err != nil {
			s.log.Error("state compaction failed; appending instead", "err", err)
			err = s.write(buf, final)
		} else {
			s.compacted()
			s.mu.Lock()
			s.dirty = false
			s.mu.Unlock()
		}
	case len(buf) > 0 || final:
		err = s.write(buf, final)
		if err != nil && noSpace(err) && s.failed == nil { // not a failed fsync: that one is final
			// The disk is full, perhaps of the log's own dead records: a
			// snapshot of the live state may fit where the records did
			// not (compact can use the reserve). It covers every record
			// appended so far, so it takes them off pending and this
			// flush answers their waiters too. Not while a group is open:
			// the model holds its records (the flush after its Commit
			// writes the snapshot).
			s.mu.Lock()
			if s.grp == nil {
				s.pending = s.pending[:0]
				taken += s.taken
				s.taken = 0
				upTo = s.pendingPos
				snap = s.md.snapshot()
			}
			s.mu.Unlock()
			// Without a snapshot err stands: the waiters up to upTo get it.
			if snap == nil {
				break
			}
			if cerr := s.compact(snap); cerr != nil {
				s.compactFailed(time.Now(), cerr)
			} else {
				s.compacted()
				s.mu.Lock()
				s.dirty = false
				s.mu.Unlock()
				err = nil
			}
		}
	}
	s.bound.Release(taken)
	if !s.reserveOK && s.failed == nil && (err == nil && snap != nil || time.Now().After(s.reserveNext)) {
		s.ensureReserve()
	}

	s.mu.Lock()
	if cap(buf) <= 1<<20 {
		s.spare = buf[:0]
	}
	if err == nil && s.failed == nil {
		s.durable.Store(upTo)
	}
	if s.failed != nil {
		err = s.failed
	}
	var done []waiter
	keep := s.waiters[:0]
	for _, w := range s.waiters {
		if w.pos <= upTo || err != nil {
			done = append(done, w)
		} else {
			keep = append(keep, w)
		}
	}
	clear(s.waiters[len(keep):])
	s.waiters = keep
	s.mu.Unlock()
	for _, w := range done {
		w.fn(err)
	}
}

// write appends buf to the file and fsyncs per the mode. A failed write
// is cut off again and leaves the file behind the model (dirty): the next
// flush writes a snapshot. A failed fsync fails the store for good (the
// kernel may have dropped the dirty pages; retrying it would lie).
func (s *Store) write(buf []byte, final bool) error {
	if len(buf) > 0 {
		n, err := s.file.WriteAt(buf, s.fileSize)
		s.bytesWritten.Add(int64(n))
		if err != nil {
			s.writeErrors.Add(1)
			s.file.Truncate(s.fileSize)
			s.mu.Lock()
			s.dirty = true
			s.mu.Unlock()
			err = s.fileErr(err)
			s.quiet.log(s.log, slog.LevelError, time.Now(), "state write failed; the change is kept in memory and written by the next compaction", "err", err)
			return fmt.Errorf("state store: write: %w", err)
		}
		s.mu.Lock()
		s.fileSize += int64(n)
		s.mu.Unlock()
	}
	if s.opts.Sync == SyncNone && !final {
		return nil
	}
	s.fsyncs.Add(1)
	if err := s.file.Sync(); err != nil {
		err = fmt.Errorf("state store: fsync: %w", s.fileErr(err))
		s.log.Error("state fsync failed; broker state is no longer durable", "err", err)
		s.mu.Lock()
		s.failed = err
		s.mu.Unlock()
		return err
	}
	return nil
}

const (
	// compactBackoffMin and compactBackoffMax bound the wait between
	// snapshot attempts while the file lacks records (a full disk):
	// doubling from the first, so space freed is used within the last.
	compactBackoffMin = 100 * time.Millisecond
	compactBackoffMax = 5 * time.Second
)

// compactFailed records a failed snapshot while the file lacks records:
// the next attempt backs off. Flusher only.
func (s *Store) compactFailed(now time.Time, err error) {
	s.compactionsFailed.Add(1)
	s.compactBackoff = min(max(2*s.compactBackoff, compactBackoffMin), compactBackoffMax)
	s.compactNext = now.Add(s.compactBackoff)
	s.quiet.log(s.log, slog.LevelError, now, "state compaction failed; the file still lacks earlier records, new ones are refused",
		"err", err, "retry_in", s.compactBackoff)
}

// compacted ends a full disk's backoff. Flusher only.
func (s *Store) compacted() {
	if s.compactBackoff > 0 {
		s.log.Info("state compaction succeeded; records are kept again", "failed_attempts", s.compactionsFailed.Load())
	}
	s.compactBackoff, s.compactNext = 0, time.Time{}
}

// logLimiter lets a repeated log line through at most once per
// logQuietFor for each message, with the count of those it held back: a
// full disk repeats its failures for as long as it stays full, and one
// line per failure would bury the cause (and, on a shared disk, add to
// it). Flusher only.
type logLimiter struct {
	next map[string]time.Time
	held map[string]int
}

const logQuietFor = 30 * time.Second

func (l *logLimiter) log(lg *slog.Logger, level slog.Level, now time.Time, msg string, args ...any) {
	if l.next == nil {
		l.next, l.held = make(map[string]time.Time), make(map[string]int)
	}
	if now.Before(l.next[msg]) {
		l.held[msg]++
		return
	}
	if n := l.held[msg]; n > 0 {
		args = append(args, "repeated", n)
	}
	l.held[msg] = 0
	l.next[msg] = now.Add(logQuietFor)
	lg.Log(context.Background(), level, msg, args...)
}
