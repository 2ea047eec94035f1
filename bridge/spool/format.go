package spool

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
	"unsafe"
)

// On-disk format; see the package documentation.
const (
	formatVersion = 1 // the ids file
	// segVersion 2 added the expiry (flag bit 3 and 8 bytes); it reads
	// version 1 segments, which have neither.
	segVersion = 2
	// ackVersion 2 added the reason byte and tally entries (ledger.go); it
	// reads version 1 files, whose removals count as unknown.
	ackVersion = 2

	segMagic      = "EGSP"
	segSuffix     = ".seg"
	segHeaderSize = 16

	recHeaderSize = 8  // length + crc
	recFixedBody  = 11 // id + flags + topic length
	recOverhead   = recHeaderSize + recFixedBody
	recExpirySize = 8 // expiry, unix nanoseconds, if flagExpiry

	flagRetain = 4
	flagExpiry = 8
	flagsValid = 3 | flagRetain | flagExpiry | flagLaneMask

	ackMagic      = "EGAK"
	ackFileName   = "acks.log"
	ackTmpName    = "acks.log.tmp"
	ackHeaderSize = 8
	ackRecSize    = 24
	ackKindRemove = 1
	ackKindTally  = 2

	lockFileName = "LOCK"

	// maxMessageBytes caps topic+payload of one record whatever MaxBytes
	// says (MQTT's own maximum packet size is 256 MiB). Together with the
	// 1 GiB cap on SegmentSize it keeps record offsets inside a uint32.
	maxMessageBytes = 256 << 20
	maxTopicLen     = 1<<16 - 1
	maxSegmentSize  = 1 << 30
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errCorrupt marks a record that fails its length, CRC or ID check.
var errCorrupt = errors.New("corrupt record")

// appendRecord encodes m as record id at the end of dst.
func appendRecord(dst []byte, id ID, m *Message) []byte {
	start := len(dst)
	body := recFixedBody + len(m.Topic) + len(m.Payload)
	flags := m.QoS & 3
	if m.Retain {
		flags |= flagRetain
	}
	if !m.Expiry.IsZero() {
		flags |= flagExpiry
		body += recExpirySize
	}
	flags |= byte(m.Lane) << flagLaneShift
	dst = binary.LittleEndian.AppendUint32(dst, uint32(body))
	dst = append(dst, 0, 0, 0, 0) // CRC, filled in below
	dst = binary.LittleEndian.AppendUint64(dst, uint64(id))
	dst = append(dst, flags)
	dst = binary.LittleEndian.AppendUint16(dst, uint16(len(m.Topic)))
	if flags&flagExpiry != 0 {
		dst = binary.LittleEndian.AppendUint64(dst, uint64(m.Expiry.UnixNano()))
	}
	dst = append(dst, m.Topic...)
	dst = append(dst, m.Payload...)
	binary.LittleEndian.PutUint32(dst[start+4:], crc32.Checksum(dst[start+recHeaderSize:], castagnoli))
	return dst
}

// checkRecord verifies a record header+body read from disk and returns its
// ID, topic length and flags.
func checkRecord(rec []byte) (id ID, topicLen int, flags byte, err error) {
	if len(rec) < recOverhead {
		return 0, 0, 0, errCorrupt
	}
	body := rec[recHeaderSize:]
	if int(binary.LittleEndian.Uint32(rec)) != len(body) ||
		binary.LittleEndian.Uint32(rec[4:]) != crc32.Checksum(body, castagnoli) {
		return 0, 0, 0, errCorrupt
	}
	id = ID(binary.LittleEndian.Uint64(body))
	flags = body[8]
	topicLen = int(binary.LittleEndian.Uint16(body[9:]))
	fixed := recFixedBody
	if flags&flagExpiry != 0 {
		fixed += recExpirySize
	}
	if topicLen > len(body)-fixed || !validFlags(flags) {
		return 0, 0, 0, errCorrupt
	}
	return id, topicLen, flags, nil
}

// decodeRecord checks rec and returns its message, which is made of rec:
// its topic and payload are views of rec's bytes, so rec must be the
// message's own (never written again, nor reused), or the message is
// given bytes of its own (ownBytes) before rec changes.
func decodeRecord(rec []byte, want ID) (Message, error) {
	id, tl, flags, err := checkRecord(rec)
	if err != nil {
		return Message{}, err
	}
	if id != want {
		return Message{}, fmt.Errorf("%w: id %d, want %d", errCorrupt, id, want)
	}
	p := rec[recOverhead:]
	var expiry time.Time
	if flags&flagExpiry != 0 {
		expiry = time.Unix(0, int64(binary.LittleEndian.Uint64(p)))
		p = p[recExpirySize:]
	}
	return Message{
		Topic:   unsafe.String(unsafe.SliceData(p), tl), // p[:tl] is never written again
		Payload: p[tl:len(p):len(p)],
		QoS:     flags & 3,
		Retain:  flags&flagRetain != 0,
		Expiry:  expiry,
		Lane:    laneOfFlags(flags),
	}, nil
}

// ownBytes gives m's topic and payload one allocation of their own, one
// read of a record (read), not two (a topic string and a payload copy).
// The topic is a view of its first bytes, which nothing writes again:
// the payload is a view of the rest, capped at its end.
func (m *Message) ownBytes() {
	tl := len(m.Topic)
	b := make([]byte, tl+len(m.Payload))
	copy(b, m.Topic)
	copy(b[tl:], m.Payload)
	m.Topic = unsafe.String(unsafe.SliceData(b), tl)
	m.Payload = b[tl:len(b):len(b)]
}

// validFlags reports whether a record's flags byte can be ours.
func validFlags(flags byte) bool {
	return flags&^flagsValid == 0 && flags&3 != 3 && laneOfFlags(flags) < NumLanes
}

// msgSize is what a message counts against MaxBytes: topic and payload,
// and its expiry if it has one (record bytes beyond the fixed overhead).
func msgSize(m *Message) int64 {
	n := int64(len(m.Topic) + len(m.Payload))
	if !m.Expiry.IsZero() {
		n += recExpirySize
	}
	return n
}

func segHeader(base ID) []byte {
	h := make([]byte, segHeaderSize)
	copy(h, segMagic)
	h[4] = segVersion
	binary.LittleEndian.PutUint64(h[8:], uint64(base))
	return h
}

func segName(base ID) string { return fmt.Sprintf("%016x%s", uint64(base), segSuffix) }

// parseSegName returns the first ID encoded in a segment file name.
func parseSegName(name string) (ID, bool) {
	hex, ok := strings.CutSuffix(name, segSuffix)
	if !ok || len(hex) != 16 {
		return 0, false
	}
	v, err := strconv.ParseUint(hex, 16, 64)
	return ID(v), err == nil && v > 0
}

// ackRange marks IDs first..last (inclusive) as removed, for reason why.
type ackRange struct {
	first, last ID
	why         removal
	lane        Lane
}

func appendAckRecord(dst []byte, r ackRange) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, ackKindRemove, byte(r.why), byte(r.lane), 0)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(r.first))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(r.last))
	binary.LittleEndian.PutUint32(dst[start:], crc32.Checksum(dst[start+4:], castagnoli))
	return dst
}

func ackHeader() []byte {
	h := make([]byte, ackHeaderSize, ackHeaderSize+ackRecSize)
	copy(h, ackMagic)
	h[4] = ackVersion
	return h
}

// rangeSet is a sorted list of disjoint, non-adjacent removed-ID ranges.
type rangeSet []ackRange

// ackLog is what parseAckLog could read of acks.log.
type ackLog struct {
	ranges    rangeSet
	counts    [NumLanes][nRemovals]uint64 // removals counted: tallies plus counted ranges
	version   byte
	good      int   // readable entries
	bad       int   // entries whose CRC failed (skipped)
	torn      int64 // bytes of a partial entry at the end (cut at Open)
	badHeader bool  // header damaged (the entries were read anyway)
}

// damaged reports whether anything in acks.log was unreadable.
func (a ackLog) damaged() bool { return a.bad > 0 || a.torn > 0 || a.badHeader }

// parseAckLog decodes acks.log content. Entries have a fixed size and
// their own CRC, so a bad one is skipped and reading goes on with the next:
// damage costs only the damaged entries. A header that is not ours is
// counted as damage and the entries behind it are read anyway; only a
// header that names a higher version with our magic, followed by no entry
// that reads, is refused (a newer format). Version 0 is damage.
func parseAckLog(b []byte) (ackLog, error) {
	var a ackLog
	var newer byte // the version a header with our magic names, if higher than ours
	switch {
	case len(b) < ackHeaderSize:
		a.badHeader = true // an emptied or torn file
		a.torn = int64(len(b))
		return a, nil
	case string(b[:4]) == ackMagic && b[4] > ackVersion && isZero(b[5:8]):
		// A newer format, or a damaged version byte: the entries decide
		// (below). Version 0 was never written: damage.
		newer = b[4]
		a.badHeader = true
	case string(b[:4]) != ackMagic || (b[4] != 1 && b[4] != ackVersion) || !isZero(b[5:8]):
		a.badHeader = true
	default:
		a.version = b[4]
	}
	var rs []ackRange
	var tally [NumLanes][nRemovals]uint64
	off := ackHeaderSize
	for ; off+ackRecSize <= len(b); off += ackRecSize {
		r := b[off : off+ackRecSize]
		if binary.LittleEndian.Uint32(r) != crc32.Checksum(r[4:], castagnoli) {
			a.bad++
			continue
		}
		why, lane := removal(r[5]), Lane(r[6])
		if r[4] == ackKindTally && int(why) < nRemovals && lane < NumLanes {
			// Written twice; both copies say the same.
			a.good++
			tally[lane][why] = binary.LittleEndian.Uint64(r[8:])
			continue
		}
		rg := ackRange{ID(binary.LittleEndian.Uint64(r[8:])), ID(binary.LittleEndian.Uint64(r[16:])), why, lane}
		if r[4] != ackKindRemove || rg.first == 0 || rg.first > rg.last || lane >= NumLanes ||
			(int(why) >= nRemovals && why != remTallied) {
			a.bad++
			continue
		}
		a.good++
		rs = append(rs, rg)
	}
	if newer != 0 && a.good == 0 && len(b) > ackHeaderSize {
		// Nothing reads as our format behind a header naming a newer one.
		// A header alone holds no acknowledgement to misread: damage.
		return ackLog{}, fmt.Errorf("%w %d in acks.log", ErrUnknownVersion, newer)
	}
	a.torn = int64(len(b) - off)
	a.counts = countRanges(rs)
	for lane := range tally {
		for why, n := range tally[lane] {
			a.counts[lane][why] += n
		}
	}
	a.ranges = mergeRanges(rs)
	return a, nil
}

func mergeRanges(rs []ackRange) rangeSet {
	if len(rs) == 0 {
		return nil
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].first < rs[j].first })
	out := rs[:1]
	for _, r := range rs[1:] {
		last := &out[len(out)-1]
		if r.first <= last.last+1 {
			last.last = max(last.last, r.last)
			continue
		}
		out = append(out, r)
	}
	return out
}

// find returns the range that could contain id (the last with first <= id).
func (rs rangeSet) find(id ID) (ackRange, bool) {
	i := sort.Search(len(rs), func(i int) bool { return rs[i].first > id })
	if i == 0 {
		return ackRange{}, false
	}
	return rs[i-1], true
}

func (rs rangeSet) contains(id ID) bool {
	r, ok := rs.find(id)
	return ok && id <= r.last
}

// covers reports whether every ID in first..last is removed.
func (rs rangeSet) covers(first, last ID) bool {
	r, ok := rs.find(first)
	return ok && last <= r.last
}

func (rs rangeSet) max() ID {
	if len(rs) == 0 {
		return 0
	}
	return rs[len(rs)-1].last
}

func segPath(dir string, base ID) string { return filepath.Join(dir, segName(base)) }
