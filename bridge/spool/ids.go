package spool

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"time"

	"github.com/edgegw/edgegw/internal/durable"
)

// The ids file keeps the ID high-water mark where losing a segment cannot
// take it: record IDs are the upstream packet ids (bridge.wireID), so an ID
// handed out before a crash must never be handed out again, even when the
// segment that held it is emptied by a power cut, cut short, quarantined or
// lost, and even when the record was sent upstream before its fsync.
//
// It holds two slots of idsSlotSize bytes, at offsets 0 and idsSlotStride
// (different 512-byte sectors, so a torn write spoils at most one):
//
//	"EGID" | version (1 byte, =1) | flags (bit 0: clean) | 2 reserved |
//	seq uint64 | next uint64 | ceiling uint64 | crc32c(bytes 0..31) uint32 | 4 reserved
//
// The slot with the higher seq among those with a good CRC is current;
// writes go to the other slot, in place (pwrite over existing blocks, so
// they need no free space once the file exists).
//
//   - ceiling: every ID handed out is below it. While the spool is open it
//     is kept idsReserve ahead of the next ID: the spool raises it (pwrite,
//     then the flusher's fsync) when the next ID comes within idsReserve/2,
//     so it is durable long before an ID gets near it.
//   - clean, next: written by Close after its final fsync. Open trusts a
//     clean next (IDs continue there, or above what the files hold); after
//     an unclean stop (kill -9, power cut: the flag is cleared by Open) it
//     continues at the ceiling, skipping at most idsReserve IDs, because
//     records written but not yet durable may have gone upstream and then
//     been lost with the segment's tail.
//
// A spool written before this file existed has none: Open then continues
// after the highest ID in the files, as that version did, and creates it.
const (
	idsFileName   = "ids"
	idsMagic      = "EGID"
	idsSlotSize   = 40
	idsSlotStride = 512
	idsReserve    = 1 << 20
	idsFlagClean  = 1
)

// idsState is the content of one ids slot.
type idsState struct {
	seq     uint64
	next    ID
	ceiling ID
	clean   bool
}

func encodeIDs(st idsState) []byte {
	b := make([]byte, idsSlotSize)
	copy(b, idsMagic)
	b[4] = formatVersion
	if st.clean {
		b[5] = idsFlagClean
	}
	binary.LittleEndian.PutUint64(b[8:], st.seq)
	binary.LittleEndian.PutUint64(b[16:], uint64(st.next))
	binary.LittleEndian.PutUint64(b[24:], uint64(st.ceiling))
	binary.LittleEndian.PutUint32(b[32:], crc32.Checksum(b[:32], castagnoli))
	return b
}

// parseIDs returns the current slot of an ids file; ok is false if no slot
// is readable (a missing, emptied or damaged file).
func parseIDs(b []byte) (st idsState, ok bool, err error) {
	for off := 0; off+idsSlotSize <= len(b) && off <= idsSlotStride; off += idsSlotStride {
		s := b[off : off+idsSlotSize]
		if string(s[:4]) != idsMagic || binary.LittleEndian.Uint32(s[32:]) != crc32.Checksum(s[:32], castagnoli) {
			continue
		}
		if s[4] != formatVersion {
			return idsState{}, false, fmt.Errorf("%w %d in %s", ErrUnknownVersion, s[4], idsFileName)
		}
		c := idsState{
			seq:     binary.LittleEndian.Uint64(s[8:]),
			clean:   s[5]&idsFlagClean != 0,
			next:    ID(binary.LittleEndian.Uint64(s[16:])),
			ceiling: ID(binary.LittleEndian.Uint64(s[24:])),
		}
		if !ok || c.seq > st.seq {
			st, ok = c, true
		}
	}
	return st, ok, nil
}

// readIDs reads the ids file; a missing file is not an error (exists is
// false).
func readIDs(fs durable.FS, path string) (st idsState, ok, exists bool, err error) {
	b, err := fs.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return idsState{}, false, false, nil
	}
	if err != nil {
		return idsState{}, false, true, err
	}
	st, ok, err = parseIDs(b)
	return st, ok, true, err
}

// writeIDsLocked writes st (with the next seq) to the ids file's other
// slot, creating the file if needed; the flusher (or Close) fsyncs it.
// Caller holds s.mu, or is Open or Close with the flusher stopped.
func (s *Spool) writeIDsLocked(st idsState) error {
	if s.idsFile == nil {
		f, err := s.fs.OpenFile(filepath.Join(s.opts.Dir, idsFileName), os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return fmt.Errorf("ids: %w", err)
		}
		// Both slots allocated at once: later writes are in place.
		if fi, err := f.Stat(); err == nil && fi.Size() < idsSlotStride+idsSlotSize {
			pad := make([]byte, idsSlotStride+idsSlotSize)
			if _, err := f.WriteAt(pad[fi.Size():], fi.Size()); err != nil {
				f.Close()
				return fmt.Errorf("ids: %w", err)
			}
			s.written.Add(uint64(len(pad)) - uint64(fi.Size()))
		}
		s.idsFile = f
		s.idsDirNew = true
	}
	s.idsSeq++
	st.seq = s.idsSeq
	off := int64(st.seq%2) * idsSlotStride
	if _, err := s.idsFile.WriteAt(encodeIDs(st), off); err != nil {
		return fmt.Errorf("ids: %w", err)
	}
	s.written.Add(idsSlotSize)
	s.ceiling = st.ceiling
	s.idsUnsynced = true
	return nil
}

// raiseCeilingLocked keeps the ceiling idsReserve ahead of the next ID.
// Caller holds s.mu.
func (s *Spool) raiseCeilingLocked() {
	if s.nextID+idsReserve/2 < s.ceiling {
		return
	}
	now := time.Now()
	if now.Before(s.idsRetryAt) {
		return
	}
	if err := s.writeIDsLocked(idsState{next: s.nextID, ceiling: s.nextID + idsReserve}); err != nil {
		s.idsRetryAt = now.Add(time.Second)
		if now.Sub(s.idsLoggedAt) >= dropLogEvery {
			s.idsLoggedAt = now
			s.log.Warn("cannot raise the id high-water mark; ids may repeat after a power cut",
				"path", filepath.Join(s.opts.Dir, idsFileName), "err", err)
		}
		return
	}
	s.kickFlusher()
}

// syncIDs fsyncs the ids file (and the directory once after creating it).
// Flusher only, or Close.
func (s *Spool) syncIDs() error {
	s.mu.Lock()
	f, dirty, dirNew := s.idsFile, s.idsUnsynced, s.idsDirNew
	s.idsUnsynced, s.idsDirNew = false, false
	s.mu.Unlock()
	if f == nil || !dirty {
		return nil
	}
	s.syncs.Add(1)
	err := s.fsync(filepath.Join(s.opts.Dir, idsFileName), f)
	if err == nil && dirNew {
		s.syncs.Add(1)
		err = s.fs.SyncDir(s.opts.Dir)
	}
	if err != nil {
		s.mu.Lock()
		s.idsUnsynced, s.idsDirNew = true, dirNew
		s.mu.Unlock()
	}
	return err
}
