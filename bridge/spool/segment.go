package spool

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"os"

	"github.com/edgegw/edgegw/internal/durable"
)

// segment is the in-memory index of one segment file. All fields are
// guarded by Spool.mu; f itself may be used outside the lock for ReadAt and
// Sync (a concurrent Close makes those fail with os.ErrClosed).
type segment struct {
	base ID
	path string
	f    durable.File
	size int64 // bytes of valid data in the file, header included

	offs    []uint32 // offs[i] is the file offset of record base+i
	lanes   []Lane   // lanes[i] is the lane of record base+i
	removed []uint64 // bitmap: record i is acked or dropped

	live     int   // records not removed
	dead     int64 // header + bytes of removed records
	lo       int   // every record below lo is removed (scan hint)
	sealed   bool  // no longer appended to
	readErr  bool  // Open could not read all of it; never appended to
	unsynced bool  // written since the last fsync; listed in Spool.unsynced
	newFile  bool  // its directory entry is not fsynced yet
	oldVer   bool  // a version 1 header: never appended to (Open seals it)
}

func (g *segment) count() int { return len(g.offs) }

// last is the ID of the last record; base-1 if there is none.
func (g *segment) last() ID { return g.base + ID(len(g.offs)) - 1 }

func (g *segment) recLen(i int) int64 {
	end := g.size
	if i+1 < len(g.offs) {
		end = int64(g.offs[i+1])
	}
	return end - int64(g.offs[i])
}

func (g *segment) isRemoved(i int) bool { return g.removed[i>>6]&(1<<(i&63)) != 0 }

func (g *segment) setRemoved(i int) { g.removed[i>>6] |= 1 << (i & 63) }

// add indexes a record of lane, n bytes written at offset off.
func (g *segment) add(off, n int64, lane Lane) {
	if len(g.offs)>>6 >= len(g.removed) {
		g.removed = append(g.removed, 0)
	}
	g.offs = append(g.offs, uint32(off))
	g.lanes = append(g.lanes, lane)
	g.size = off + n
	g.live++
}

// nextLive returns the index of the first live record at or after from, or -1.
func (g *segment) nextLive(from int) int {
	from = max(from, g.lo)
	n := len(g.offs)
	for from < n {
		w := ^g.removed[from>>6] >> (from & 63)
		if w == 0 {
			from = (from | 63) + 1
			continue
		}
		i := from + bits.TrailingZeros64(w)
		if i >= n {
			break
		}
		return i
	}
	return -1
}

// addSkipped indexes a record that could not be read (damaged): it is
// removed from the start and spans n bytes at off (0 for all but the first
// of a damaged run).
func (g *segment) addSkipped(off, n int64) {
	if len(g.offs)>>6 >= len(g.removed) {
		g.removed = append(g.removed, 0)
	}
	g.offs = append(g.offs, uint32(off))
	g.lanes = append(g.lanes, LaneNormal)
	g.size = off + n
	g.setRemoved(len(g.offs) - 1)
	g.dead += n
}

// loadResult says what loadSegment found.
type loadResult struct {
	seg        *segment   // nil if the file was removed or quarantined
	emptied    bool       // the file held no record at all and was removed
	quarantine string     // the file was unreadable and renamed to this path
	badHeader  bool       // the header was damaged (and rewritten)
	truncated  int64      // bytes cut off a torn or corrupt tail
	skipped    []ackRange // IDs of damaged records skipped inside the file
	skipBytes  int64      // bytes of those records
	ioErr      error      // a read error ended the scan early (the segment is sealed)
}

// winSize is the read window of loadSegment.
const winSize = 256 << 10

// segReader reads a segment through a window of its bytes (ReadAt), so that
// the resync scan can look at every offset without a syscall per byte.
type segReader struct {
	f     durable.File
	size  int64
	start int64
	buf   []byte
}

// at returns n bytes at off; io.ErrUnexpectedEOF past the end.
func (r *segReader) at(off int64, n int) ([]byte, error) {
	if off >= r.start && off+int64(n) <= r.start+int64(len(r.buf)) {
		return r.buf[off-r.start : off-r.start+int64(n)], nil
	}
	if off+int64(n) > r.size {
		return nil, io.ErrUnexpectedEOF
	}
	size := int(min(int64(max(n, winSize)), r.size-off))
	if cap(r.buf) < size || cap(r.buf) > 4*winSize && size <= winSize {
		r.buf = make([]byte, size)
	}
	r.buf = r.buf[:size]
	if _, err := r.f.ReadAt(r.buf, off); err != nil {
		r.buf = r.buf[:0]
		return nil, err
	}
	r.start = off
	return r.buf[:n], nil
}

// record checks for a valid record at off whose ID is in lo..hi-1; it
// returns its length and ID, n == 0 if there is none. The cheap checks
// (length, ID range, flags) come before the CRC, so the resync scan over
// garbage costs little more than reading it.
func (r *segReader) record(off int64, lo, hi ID) (int64, ID, error) {
	if r.size-off < recOverhead {
		return 0, 0, nil
	}
	h, err := r.at(off, recOverhead)
	if err != nil {
		return 0, 0, err
	}
	n := int64(binary.LittleEndian.Uint32(h)) + recHeaderSize
	id := ID(binary.LittleEndian.Uint64(h[recHeaderSize:]))
	flags := h[recHeaderSize+8]
	if n < recOverhead || n > r.size-off || id < lo || id >= hi || !validFlags(flags) {
		return 0, 0, nil
	}
	rec, err := r.at(off, int(n))
	if err != nil {
		return 0, 0, err
	}
	if _, _, _, err := checkRecord(rec); err != nil {
		return 0, 0, nil
	}
	return n, id, nil
}

// laneAt returns the lane of the valid record at off.
func (r *segReader) laneAt(off int64) Lane {
	b, err := r.at(off+recHeaderSize+8, 1)
	if err != nil {
		return LaneNormal
	}
	return laneOfFlags(b[0])
}

// resync looks for the first valid record after a bad one at bad, whose ID
// was to be want: a record at p can only hold IDs want+1 .. want+k where k
// records of at least recOverhead bytes fit in p-bad. found is false if
// there is none up to the end (a torn or corrupt tail).
func (r *segReader) resync(bad int64, want, limit ID) (p, n int64, id ID, err error) {
	for p = bad + 1; r.size-p >= recOverhead; p++ {
		hi := min(want+1+ID((p-bad)/recOverhead), limit)
		if n, id, err = r.record(p, want+1, hi); err != nil || n > 0 {
			return p, n, id, err
		}
	}
	return 0, 0, 0, nil
}

// loadSegment opens and verifies one segment file, whose first ID (from its
// name) is base. A damaged record is skipped: reading resynchronises on the
// next valid record, and the IDs in between are indexed as removed (the
// caller counts them and writes them to acks.log as dropped). Records after
// the last valid one (a torn or corrupt tail), and at or after limit (the
// next segment's first ID), are truncated away. A damaged header is
// rewritten if records follow it; one naming a higher version with no
// valid record behind it is a newer format: ErrUnknownVersion, untouched. A file with no valid record is removed if
// it holds nothing but zeros (emptied, or torn while being created) and
// quarantined (renamed, kept for inspection) otherwise. removed marks the
// IDs acks.log says are gone.
func loadSegment(fs durable.FS, path string, base, limit ID, removed rangeSet) (loadResult, error) {
	f, err := fs.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return loadResult{}, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return loadResult{}, err
	}
	r := &segReader{f: f, size: fi.Size()}
	var res loadResult
	var newer byte // the version a header with our magic names, if higher than ours
	hdr, herr := r.at(0, segHeaderSize)
	switch {
	case herr == io.ErrUnexpectedEOF:
		res.badHeader = true // torn while being created, or emptied
	case herr != nil:
		res.ioErr = herr
	case string(hdr[:4]) == segMagic && hdr[4] > segVersion && isZero(hdr[5:8]):
		// A newer format, or a damaged version byte: the records decide
		// (below). Version 0 was never written: damage.
		newer = hdr[4]
		res.badHeader = true
	case string(hdr[:4]) != segMagic || (hdr[4] != 1 && hdr[4] != segVersion) || !isZero(hdr[5:8]) ||
		ID(binary.LittleEndian.Uint64(hdr[8:])) != base:
		res.badHeader = true
	}

	g := &segment{base: base, path: path, f: f, size: segHeaderSize, dead: segHeaderSize,
		oldVer: herr == nil && !res.badHeader && hdr[4] == 1}
	good := 0 // valid records read
	off := int64(segHeaderSize)
	for res.ioErr == nil && off < r.size {
		want := base + ID(g.count())
		n, id, err := r.record(off, want, min(want+1, limit))
		if err == nil && n == 0 {
			var p int64
			p, n, id, err = r.resync(off, want, limit)
			if err == nil && n > 0 {
				// Records want..id-1 are damaged: index them as removed.
				res.skipped = append(res.skipped, ackRange{first: want, last: id - 1})
				res.skipBytes += p - off
				g.addSkipped(off, p-off)
				for range id - want - 1 {
					g.addSkipped(p, 0)
				}
				off = p
			}
		}
		if err != nil {
			res.ioErr = err
			break
		}
		if n == 0 {
			break // nothing valid up to the end: a torn or corrupt tail
		}
		g.add(off, n, r.laneAt(off))
		good++
		if removed.contains(id) {
			g.setRemoved(g.count() - 1)
			g.live--
			g.dead += n
		}
		off += n
	}

	if good == 0 && newer != 0 && res.ioErr == nil && r.size > segHeaderSize {
		// Nothing reads as our format behind a header naming a newer one:
		// a newer edgegw's file. Not guessed at, not touched. A header
		// alone holds no message of any version: damage.
		f.Close()
		return loadResult{}, fmt.Errorf("%w %d", ErrUnknownVersion, newer)
	}
	if good == 0 && (res.badHeader || res.ioErr != nil) {
		// Not ours, or nothing readable in it.
		f.Close()
		if empty, err := holdsNothing(fs, path, base); res.ioErr == nil && err == nil && empty {
			res.emptied, res.truncated = true, r.size
			return res, fs.Remove(path)
		}
		res.quarantine = quarantineName(fs, path)
		res.truncated = r.size
		return res, fs.Rename(path, res.quarantine)
	}
	if res.ioErr == nil && g.size < r.size {
		res.truncated = r.size - g.size
		if err := f.Truncate(g.size); err != nil {
			f.Close()
			return loadResult{}, fmt.Errorf("truncate: %w", err)
		}
	}
	if res.badHeader {
		// In place: needs no free space.
		if _, err := f.WriteAt(segHeader(base), 0); err != nil {
			f.Close()
			return loadResult{}, fmt.Errorf("rewrite header: %w", err)
		}
	}
	g.lo = max(g.nextLive(0), 0)
	if g.live == 0 {
		g.lo = g.count()
	}
	res.seg = g
	return res, nil
}

// holdsNothing reports whether the file holds only zero bytes (or none),
// or a prefix of its own header: emptied by a power cut, or torn while
// being created.
func holdsNothing(fs durable.FS, path string, base ID) (bool, error) {
	f, err := fs.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return false, err
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for first := true; ; first = false {
		n, err := io.ReadFull(f, buf)
		if first && n < segHeaderSize && bytes.HasPrefix(segHeader(base), buf[:n]) {
			return true, nil
		}
		if !isZero(buf[:n]) {
			return false, nil
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return true, nil
		}
		if err != nil {
			return false, err
		}
	}
}

// quarantineName is where an unreadable file is moved: its name plus
// ".quarantine", and a number if that exists already. The name no longer
// ends in ".seg", so Open ignores it from then on.
func quarantineName(fs durable.FS, path string) string {
	q := path + ".quarantine"
	for i := 1; ; i++ {
		if _, err := fs.Lstat(q); errors.Is(err, os.ErrNotExist) {
			return q
		}
		q = fmt.Sprintf("%s.quarantine.%d", path, i)
	}
}

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
