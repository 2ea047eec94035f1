package spool

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
)

// recover rebuilds the index from the directory. It only reads, truncates,
// renames and removes: nothing in it needs free disk space, so a spool on a
// full file system opens and serves what it holds. The acks checkpoint
// that drops torn or damaged acks.log entries is written later by the
// flusher, when space allows. Called by Open only.
func (s *Spool) recover() error {
	dir := s.opts.Dir
	fail := func(op, path string, err error) error {
		return &OpenError{Dir: dir, Op: op, Path: path, Err: err}
	}
	s.fs.Remove(filepath.Join(dir, ackTmpName))

	ackPath := filepath.Join(dir, ackFileName)
	ackData, err := s.fs.ReadFile(ackPath)
	ackExists := err == nil
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fail("read", ackPath, err)
	}
	var acks ackLog
	if ackExists {
		if acks, err = parseAckLog(ackData); err != nil {
			return fail("read", ackPath, err)
		}
	}
	idsPath := filepath.Join(dir, idsFileName)
	ids, idsOK, idsExists, err := readIDs(s.fs, idsPath)
	if err != nil {
		return fail("read", idsPath, err)
	}

	ents, err := s.fs.ReadDir(dir)
	if err != nil {
		return fail("read directory", "", err)
	}
	var bases []ID
	for _, e := range ents {
		if b, ok := parseSegName(e.Name()); ok {
			if !e.Type().IsRegular() {
				return fail("open segment", filepath.Join(dir, e.Name()), errors.New("not a regular file"))
			}
			bases = append(bases, b)
		}
	}
	sort.Slice(bases, func(i, j int) bool { return bases[i] < bases[j] })

	removed := acks.ranges
	s.tally = acks.counts
	dataMax := removed.max()
	damaged := false // something that held IDs was lost or unreadable
	for i, base := range bases {
		path := segPath(dir, base)
		newest := i == len(bases)-1
		limit := ^ID(0)
		if !newest {
			limit = bases[i+1]
			if removed.covers(base, limit-1) {
				// Every ID it can hold is acked: no need to read it.
				if err := s.fs.Remove(path); err != nil {
					return fail("remove", path, err)
				}
				continue
			}
		}
		res, err := loadSegment(s.fs, path, base, limit, removed)
		if err != nil {
			return fail("load segment", path, err)
		}
		s.damagedBytes += res.truncated + res.skipBytes
		switch {
		case res.quarantine != "":
			damaged = true
			s.quarantined++
			s.log.Error("unreadable spool segment moved aside; its messages are lost",
				"path", path, "quarantine", res.quarantine, "bytes", res.truncated)
		case res.emptied:
			damaged = true
			s.corrupt++
			s.emptied++
			s.log.Warn("empty spool segment removed; its messages are lost (emptied by a power cut?)",
				"path", path, "first_id", uint64(base), "newest", newest)
		case res.truncated > 0:
			damaged = true
			s.corrupt++
			s.log.Warn("cut corrupt segment tail", "path", path, "bytes", res.truncated, "newest", newest)
		}
		g := res.seg
		if g == nil {
			continue
		}
		if res.badHeader {
			s.log.Warn("damaged segment header rewritten", "path", path)
		}
		if res.ioErr != nil {
			damaged = true
			g.readErr = true
			s.log.Error("read error in spool segment; records after it are unreachable",
				"path", path, "records", g.count(), "err", res.ioErr)
		}
		s.skippedLocked(path, res, removed)
		dataMax = max(dataMax, g.last())
		s.segs = append(s.segs, g)
		s.live += int64(g.live)
		s.diskBytes += g.size
		for j := range g.count() {
			if !g.isRemoved(j) {
				s.liveBytes += g.recLen(j) - recOverhead
			}
		}
	}

	// acks.log: damage costs the damaged entries; their messages are sent
	// again, at most every live one.
	switch {
	case ackExists && acks.damaged():
		damaged = true
		s.ackDamage = int64(acks.bad)
		if acks.badHeader || acks.torn > 0 {
			s.ackDamage++
		}
		if acks.good == 0 && len(ackData) > ackHeaderSize {
			q := quarantineName(s.fs, ackPath)
			if err := s.fs.Rename(ackPath, q); err != nil {
				return fail("quarantine", ackPath, err)
			}
			ackExists = false
			s.quarantined++
			s.log.Error("unreadable acks.log moved aside", "path", ackPath, "quarantine", q)
		}
		s.log.Warn("acks.log damaged; acked messages may be sent again", "path", ackPath,
			"bad_entries", acks.bad, "torn_bytes", acks.torn, "bad_header", acks.badHeader,
			"may_resend", s.live)
	case !ackExists && len(bases) > 0:
		damaged = true
		s.ackDamage++
		s.log.Warn("acks.log missing; acked messages may be sent again", "path", ackPath, "may_resend", s.live)
	}
	if ackExists && !acks.badHeader {
		// Appends continue behind the last whole entry; a torn one is cut.
		f, err := s.fs.OpenFile(ackPath, os.O_RDWR, 0)
		if err != nil {
			return fail("open", ackPath, err)
		}
		s.ackFile, s.ackSize = f, int64(len(ackData))-acks.torn
		if acks.torn > 0 {
			if err := f.Truncate(s.ackSize); err != nil {
				return fail("truncate", ackPath, err)
			}
		}
	}
	s.ckptDue = true // written by the flusher, when space allows

	// IDs: never below what was handed out before (see ids.go).
	dataNext := dataMax + 1
	next := dataNext
	switch {
	case !idsOK && idsExists:
		s.log.Warn("ids file unreadable; ids continue after the highest found in the spool", "path", idsPath)
	case !idsOK:
	case ids.clean:
		next = max(next, ids.next)
	default:
		next = max(next, ids.ceiling)
	}
	s.idsSeq = ids.seq
	s.nextID = next
	s.indexLanesLocked()
	acksTrusted := (ackExists && !acks.damaged() && acks.version == ackVersion) || (!ackExists && len(bases) == 0)
	s.settleLedgerLocked(dataNext, acksTrusted)
	if next > dataNext {
		s.idGap = uint64(next - dataNext)
		if ids.clean || damaged {
			s.log.Warn("spool lost records; ids continue above every id handed out",
				"next_id", uint64(next), "highest_found", uint64(dataMax))
		} else {
			s.log.Info("unclean stop; ids continue above the high-water mark",
				"next_id", uint64(next), "highest_found", uint64(dataMax))
		}
	}
	// Mark the spool open (not clean) and reserve IDs ahead. In place once
	// the file exists; if it cannot be created (full disk) appends retry.
	if err := s.writeIDsLocked(idsState{next: next, ceiling: next + idsReserve}); err != nil {
		s.log.Warn("cannot write the id high-water mark; will retry", "path", idsPath, "err", err)
	}

	// Only the last segment may stay active, and only if the next ID
	// continues it. Seal the rest; delete the sealed ones with nothing live.
	for i, g := range s.segs {
		last := i == len(s.segs)-1
		g.sealed = !last || g.last()+1 != s.nextID || g.size >= s.opts.SegmentSize || g.readErr || g.oldVer
		if g.sealed {
			s.pinned += g.dead
		}
	}
	for _, g := range append([]*segment(nil), s.segs...) {
		if g.sealed && g.live == 0 {
			s.deleteSegmentLocked(g)
		}
	}
	s.recovered = s.live
	return nil
}

// skippedLocked accounts for the damaged records loadSegment skipped: those
// acks.log did not already remove are lost, counted as dropped (corrupt)
// and written to acks.log so that a later Open does not count them again.
// Caller is recover.
func (s *Spool) skippedLocked(path string, res loadResult, removed rangeSet) {
	var lost int64
	for _, r := range res.skipped {
		// Only the IDs not removed before: each is counted once.
		run := ackRange{why: remCorrupt, lane: LaneNormal}
		for id := r.first; id <= r.last; id++ {
			if removed.contains(id) {
				continue
			}
			lost++
			if run.first != 0 && run.last+1 == id {
				run.last = id
				continue
			}
			if run.first != 0 {
				s.acks = append(s.acks, run)
			}
			run.first, run.last = id, id
		}
		if run.first != 0 {
			s.acks = append(s.acks, run)
		}
	}
	if len(res.skipped) == 0 {
		return
	}
	if lost == 0 {
		s.log.Info("damaged records skipped, all acked before", "path", path, "bytes", res.skipBytes)
		return
	}
	s.skipped += lost
	s.dropped[DropCorrupt] += uint64(lost)
	s.tally[LaneNormal][remCorrupt] += uint64(lost) // a damaged record's lane is unknown
	s.log.Error("damaged records skipped; their messages are lost", "reason", DropCorrupt,
		"path", path, "lost", lost, "first_id", uint64(res.skipped[0].first),
		"last_id", uint64(res.skipped[len(res.skipped)-1].last), "bytes", res.skipBytes)
}
