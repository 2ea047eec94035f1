package store

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"syscall"
	"time"

	"github.com/edgegw/edgegw/internal/durable"
)

// The reserve holds back room in the state directory's file system for the
// one write that gets it back: when state.log has filled the disk, a
// snapshot of the live state (small once the sessions are drained) cannot
// be written beside it, so no record is kept and no removal of the dead
// ones either. compact then deletes the reserve, writes the snapshot into
// its room, and the rename over state.log frees the dead records.
// state.reserve holds no state: versions that do not know it ignore it,
// and deleting it by hand loses nothing.
const (
	reserveName    = "state.reserve"
	reserveTmpName = "state.reserve.tmp"
	reserveSize    = 64 << 10
	// reserveSlack: what a file system may need beyond a file's length
	// (block rounding, an extent block); a snapshot uses the reserve only
	// if it fits with this to spare.
	reserveSlack = 8 << 10
	// reserveRetry: how often a flush tries again to recreate a reserve
	// that did not fit; after a compaction (which frees dead records) it
	// is tried at once.
	reserveRetry = time.Minute
)

// noSpace reports a full file system.
func noSpace(err error) bool { return errors.Is(err, syscall.ENOSPC) }

// ensureReserve creates state.reserve (reserveSize bytes of real blocks:
// written, not a sparse hole or a bare truncate) unless it is there. It is
// written to state.reserve.tmp and renamed, so a crash never leaves a
// short reserve that looks whole. With no room it removes what it wrote
// and leaves the reserve missing for a later flush. Flusher only (or Open).
func (s *Store) ensureReserve() {
	path := filepath.Join(s.opts.Dir, reserveName)
	if fi, err := s.fs.Stat(path); err == nil && fi.Size() >= reserveSize {
		s.fs.Remove(filepath.Join(s.opts.Dir, reserveTmpName)) // one a crash interrupted
		s.reserveOK = true
		return
	}
	var m durable.Meter // its bytes are not counted: see Stats.BytesWritten
	err := writeReserve(s.fs, s.opts.Dir, &m)
	s.fsyncs.Add(m.Syncs())
	if err != nil {
		s.reserveOK = false
		s.reserveNext = time.Now().Add(reserveRetry)
		s.quiet.log(s.log, slog.LevelWarn, time.Now(), "state reserve could not be created; a full disk may keep new messages refused until there is room", "err", err)
		return
	}
	s.reserveOK = true
}

func writeReserve(fs durable.FS, dir string, m *durable.Meter) error {
	f, _, err := durable.Replace(fs, filepath.Join(dir, reserveTmpName), filepath.Join(dir, reserveName), make([]byte, reserveSize), true, m)
	if f != nil {
		f.Close()
	}
	if err != nil {
		return fmt.Errorf("create reserve: %w", err)
	}
	return nil
}

// releaseReserve deletes state.reserve if a snapshot of size bytes fits in
// its room, and reports whether it did. Flusher only (or Open).
func (s *Store) releaseReserve(size int) bool {
	path := filepath.Join(s.opts.Dir, reserveName)
	fi, err := s.fs.Stat(path)
	if err != nil || int64(size)+reserveSlack > fi.Size() {
		return false
	}
	if err := s.fs.Remove(path); err != nil {
		return false
	}
	s.reserveOK = false
	s.reserveNext = time.Time{} // recreate it as soon as the snapshot has freed the dead records
	return true
}
