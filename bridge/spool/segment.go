package spool

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math/bits"
	"os"
)

// segment is the in-memory index of one segment file. All fields are
// guarded by Spool.mu; f itself may be used outside the lock for ReadAt and
// Sync (a concurrent Close makes those fail with os.ErrClosed).
type segment struct {
	base ID
	path string
	f    *os.File
	size int64 // bytes of valid data in the file, header included

	offs    []uint32 // offs[i] is the file offset of record base+i
	removed []uint64 // bitmap: record i is acked or dropped

	live     int   // records not removed
	dead     int64 // header + bytes of removed records
	lo       int   // every record below lo is removed (scan hint)
	sealed   bool  // no longer appended to
	unsynced bool  // written since the last fsync; listed in Spool.unsynced
	newFile  bool  // its directory entry is not fsynced yet
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

// add indexes a record of n bytes written at offset off.
func (g *segment) add(off, n int64) {
	if len(g.offs)>>6 >= len(g.removed) {
		g.removed = append(g.removed, 0)
	}
	g.offs = append(g.offs, uint32(off))
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

// loadResult says what loadSegment found.
type loadResult struct {
	seg       *segment // nil if the file was removed or quarantined
	truncated int64    // bytes cut off a corrupt tail
	reason    string   // why, for the log
}

// loadSegment opens and verifies one segment file: records after the first
// bad one (or at/after limit, the next segment's first ID) are truncated
// away. removed marks the IDs acks.log says are gone.
func loadSegment(path string, base, limit ID, removed rangeSet) (loadResult, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return loadResult{}, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return loadResult{}, err
	}
	size := fi.Size()
	hdr := make([]byte, segHeaderSize)
	n, _ := io.ReadFull(f, hdr)
	switch {
	case n < segHeaderSize || isZero(hdr):
		// Torn while being created: it holds no record.
		f.Close()
		return loadResult{truncated: size, reason: "torn segment header"}, os.Remove(path)
	case string(hdr[:4]) != segMagic || ID(binary.LittleEndian.Uint64(hdr[8:])) != base:
		f.Close()
		return loadResult{truncated: size, reason: "bad segment header, renamed to .corrupt"},
			os.Rename(path, path+".corrupt")
	case hdr[4] != formatVersion:
		f.Close()
		return loadResult{}, fmt.Errorf("%s: unsupported format version %d", path, hdr[4])
	}

	g := &segment{base: base, path: path, f: f, size: segHeaderSize, dead: segHeaderSize}
	r := bufio.NewReaderSize(io.NewSectionReader(f, segHeaderSize, size-segHeaderSize), 64<<10)
	var buf []byte
	var res loadResult
	for off := int64(segHeaderSize); off < size; {
		if size-off < recOverhead {
			res.reason = "torn record"
			break
		}
		buf = append(buf[:0], make([]byte, recHeaderSize)...)
		if _, err := io.ReadFull(r, buf); err != nil {
			res.reason = "read: " + err.Error()
			break
		}
		n := int64(binary.LittleEndian.Uint32(buf)) + recHeaderSize
		if n < recOverhead || n > size-off {
			res.reason = "torn record"
			break
		}
		buf = append(buf, make([]byte, n-recHeaderSize)...)
		if _, err := io.ReadFull(r, buf[recHeaderSize:]); err != nil {
			res.reason = "read: " + err.Error()
			break
		}
		id, _, _, err := checkRecord(buf)
		want := base + ID(g.count())
		if err != nil || id != want || id >= limit {
			res.reason = "bad record"
			if err == nil {
				res.reason = fmt.Sprintf("unexpected id %d, want %d", id, want)
			}
			break
		}
		g.add(off, n)
		if removed.contains(id) {
			g.setRemoved(g.count() - 1)
			g.live--
			g.dead += n
		}
		off += n
	}
	if g.size < size {
		res.truncated = size - g.size
		if err := f.Truncate(g.size); err != nil {
			f.Close()
			return loadResult{}, fmt.Errorf("truncate %s: %w", path, err)
		}
	}
	g.lo = max(g.nextLive(0), 0)
	if g.live == 0 {
		g.lo = g.count()
	}
	res.seg = g
	return res, nil
}

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
