package spool

// Design note: a ledger that adds up across crashes. Every ID below the
// next one is in exactly one of three places: a live record in a segment,
// a removal in acks.log (with its reason), or nowhere (never handed out,
// or lost to damage). So the spool counts removals where it records them:
// each acks.log entry both removes its IDs and counts them under its
// reason, in one 24-byte write with one CRC. A crash keeps an entry whole
// or not at all (a torn or damaged entry is skipped), so it either removes
// and counts its IDs, or neither: a lost ack brings the record back as
// live (it is sent again) and it is not counted as delivered. Nothing is
// ever counted twice or lost from the sum.
//
// A checkpoint replaces acks.log by the removed ranges (written with
// reason "tallied": they remove, they do not count) plus one tally entry
// per reason holding the count of every removal so far. Entries appended
// after it count as before. Open sums tallies and counted ranges (each
// reason's ranges merged first, so the duplicated checkpoint entries and
// coalesced runs count once), then accounts for what is missing:
//
//   - the IDs skipped after an unclean stop (ids.go) are written as a gap
//     range: never handed out, not accepted;
//   - every other ID below the next one that is neither live nor counted
//     was handed out and lost to damage (a quarantined segment, a cut tail
//     in the middle of the spool): counted as lost, or as unknown if
//     acks.log itself was damaged, missing or from format 1 (which did not
//     record reasons), since then the IDs may just as well have been acked.
//
// The invariant, at every moment and after every Open:
//
//	next ID - 1 = live + sum of all counts (gap included)
//	accepted    = next ID - 1 - gap
//	            = delivered + live + dropped (every reason) + unknown
//
// What a crash does to each term: kill -9 loses no record (pwrite) and at
// most the acks of the last SyncInterval, which move from delivered back
// to live (the messages are sent again: at least once). A power loss with
// SyncBatch may also lose records written in the last window, never
// confirmed to a QoS 1/2 publisher: their IDs are above the highest found
// and become part of the gap (not accepted). A QoS 0 message in that
// window was accepted and is not counted, bounded by one window. So are
// the records of covered commits (covered.go) since the last full one, at
// most coverMaxAge: confirmed to their publishers on the upstream's acks,
// they may vanish with their acks; those whose acks vanish too are above
// the highest found (gap). These are the cases where what the gateway
// took and what the ledger says differ.

import (
	"encoding/binary"
	"hash/crc32"
)

// removal is the reason byte of an acks.log entry (format 2).
type removal uint8

const (
	remUnknown   removal = 0 // format 1 entries; damage when acks.log was damaged
	remDelivered removal = 1
	remSpoolFull removal = 2
	remCorrupt   removal = 3
	remExpired   removal = 4
	remRefused   removal = 5
	remLost      removal = 6
	remGap       removal = 7
	nRemovals            = 8

	// remTallied marks the ranges of a checkpoint: they remove their IDs,
	// the checkpoint's tally entries count them.
	remTallied removal = 0xff
)

// Drop reasons added with the ledger.
const (
	// DropExpired: the message's expiry (MQTT 5 message expiry interval
	// or the rule's max_age) passed before it was delivered.
	DropExpired DropReason = "expired"
	// DropRefused: the upstream broker refused the message (an MQTT 5
	// PUBACK/PUBREC reason code of 0x80 or more).
	DropRefused DropReason = "refused"
	// DropLost: records found missing at Open (damage: a quarantined
	// segment, a cut tail before the newest segment).
	DropLost DropReason = "lost"
)

// removalOf maps a drop reason ("" = delivered) to its code.
func removalOf(r DropReason) removal {
	switch r {
	case "":
		return remDelivered
	case DropSpoolFull:
		return remSpoolFull
	case DropCorrupt:
		return remCorrupt
	case DropExpired:
		return remExpired
	case DropRefused:
		return remRefused
	case DropLost:
		return remLost
	}
	return remUnknown
}

// dropReasons are the removal codes that are drops, with their names.
var dropReasons = [...]struct {
	code removal
	name DropReason
}{
	{remSpoolFull, DropSpoolFull},
	{remCorrupt, DropCorrupt},
	{remExpired, DropExpired},
	{remRefused, DropRefused},
	{remLost, DropLost},
}

// Ledger is where every message the spool ever accepted went. It is
// persisted with the spool (see the design note in ledger.go) and adds up
// exactly, at every moment and across restarts and crashes:
//
//	Accepted = Delivered + Live + sum(Dropped) + Unknown - Mismatch
//
// and the same holds for each lane in Lanes (whose Mismatch is 0; IDs
// lost to damage, of unknown lane, are counted in the normal lane).
type Ledger struct {
	Accepted  uint64                // records ever written (IDs handed out minus gaps)
	Delivered uint64                // acknowledged upstream (Ack)
	Live      uint64                // still in the spool: queued or in flight
	Dropped   map[DropReason]uint64 // left without an upstream ack, by reason
	Unknown   uint64                // removed by a format-1 spool, or whose acks.log entry was damaged
	Gap       uint64                // IDs never handed out (skipped after unclean stops)
	// Mismatch is counted IDs minus IDs handed out when Open found more
	// removals counted than IDs (both copies of a checkpoint entry
	// damaged); 0 otherwise.
	Mismatch uint64
	Lanes    [NumLanes]LaneLedger // by Lane
}

// LaneLedger is one lane's part of the Ledger:
// Accepted = Delivered + Live + sum(Dropped) + Unknown.
type LaneLedger struct {
	Accepted, Delivered, Live, Unknown uint64
	Dropped                            map[DropReason]uint64
}

// ledgerLocked builds the Ledger from the counts. Caller holds s.mu.
func (s *Spool) ledgerLocked() Ledger {
	l := Ledger{Dropped: make(map[DropReason]uint64, len(dropReasons)), Mismatch: s.mismatch}
	for lane := range s.tally {
		t := &s.tally[lane]
		ll := LaneLedger{
			Delivered: t[remDelivered],
			Live:      uint64(s.liveLane[lane]),
			Unknown:   t[remUnknown],
			Dropped:   make(map[DropReason]uint64, len(dropReasons)),
		}
		ll.Accepted = ll.Delivered + ll.Live + ll.Unknown
		for _, d := range dropReasons {
			ll.Dropped[d.name] = t[d.code]
			l.Dropped[d.name] += t[d.code]
			ll.Accepted += t[d.code]
		}
		l.Lanes[lane] = ll
		l.Delivered += ll.Delivered
		l.Live += ll.Live
		l.Unknown += ll.Unknown
		l.Gap += t[remGap]
	}
	l.Accepted = uint64(s.nextID-1) - l.Gap
	return l
}

// Sum returns Delivered + Live + every drop + Unknown - Mismatch, which
// equals Accepted.
func (l Ledger) Sum() uint64 {
	n := l.Delivered + l.Live + l.Unknown
	for _, v := range l.Dropped {
		n += v
	}
	return n - l.Mismatch
}

// appendTallyRecord encodes a checkpoint's count of removals of lane for
// why.
func appendTallyRecord(dst []byte, lane Lane, why removal, n uint64) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, ackKindTally, byte(why), byte(lane), 0)
	dst = binary.LittleEndian.AppendUint64(dst, n)
	dst = binary.LittleEndian.AppendUint64(dst, 0)
	binary.LittleEndian.PutUint32(dst[start:], crc32.Checksum(dst[start+4:], castagnoli))
	return dst
}

// countRanges returns, per lane and reason, the number of distinct IDs in
// the counted ranges rs (tallied ranges excluded).
func countRanges(rs []ackRange) (n [NumLanes][nRemovals]uint64) {
	var by [NumLanes][nRemovals][]ackRange
	for _, r := range rs {
		if int(r.why) < nRemovals && r.lane < NumLanes {
			by[r.lane][r.why] = append(by[r.lane][r.why], r)
		}
	}
	for lane := range by {
		for why, rs := range by[lane] {
			for _, r := range mergeRanges(rs) {
				n[lane][why] += uint64(r.last - r.first + 1)
			}
		}
	}
	return n
}

// settleLedgerLocked accounts, at the end of recover, for the IDs below
// s.nextID that neither a live record nor a counted removal covers: the
// gap (dataNext..nextID-1, written to acks.log) and the rest (lost, or
// unknown if acks.log could not be trusted), in the normal lane. Caller is
// recover.
func (s *Spool) settleLedgerLocked(dataNext ID, acksTrusted bool) {
	var counted uint64
	for lane := range s.tally {
		for _, n := range s.tally[lane] {
			counted += n
		}
	}
	ids := uint64(s.nextID - 1)
	have := counted + uint64(s.live)
	if have > ids {
		s.mismatch = have - ids
		s.log.Error("spool ledger: more removals counted than ids (acks.log damage)", "excess", s.mismatch)
		return
	}
	missing := ids - have
	// The IDs skipped above the highest found are the gap, unless an
	// earlier Open counted them already (a clean stop right after it).
	if s.nextID > dataNext {
		gap := min(missing, uint64(s.nextID-dataNext))
		if gap > 0 {
			s.acks = append(s.acks, ackRange{s.nextID - ID(gap), s.nextID - 1, remGap, LaneNormal})
			s.tally[LaneNormal][remGap] += gap
			missing -= gap
		}
	}
	if missing > 0 {
		why := remLost
		if !acksTrusted {
			why = remUnknown
		}
		s.tally[LaneNormal][why] += missing
		s.log.Warn("spool ledger: ids neither live nor counted", "count", missing, "counted_as", why.String())
	}
}

// String names a removal code as in metric labels.
func (r removal) String() string {
	switch r {
	case remDelivered:
		return "delivered"
	case remGap:
		return "gap"
	case remUnknown:
		return "unknown"
	case remTallied:
		return "tallied"
	}
	for _, d := range dropReasons {
		if d.code == r {
			return string(d.name)
		}
	}
	return "invalid"
}
