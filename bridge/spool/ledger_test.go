package spool

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// checkLedger fails t unless l adds up and matches want (Dropped only for
// the reasons given; the rest must be 0).
func checkLedger(t *testing.T, l Ledger, want Ledger) {
	t.Helper()
	if l.Sum() != l.Accepted {
		t.Fatalf("ledger does not add up: %+v, sum %d", l, l.Sum())
	}
	ok := l.Accepted == want.Accepted && l.Delivered == want.Delivered && l.Live == want.Live &&
		l.Unknown == want.Unknown && l.Gap == want.Gap && l.Mismatch == 0
	for r, n := range l.Dropped {
		ok = ok && n == want.Dropped[r]
	}
	if !ok {
		t.Fatalf("ledger %+v, want %+v", l, want)
	}
}

// TestLedgerSurvivesCloseAndCheckpoint: acks and overflow drops are
// counted, and the counts come back the same after a clean reopen (the
// checkpoint's tallies) and after a second one (tallies plus entries
// appended after them).
func TestLedgerSurvivesCloseAndCheckpoint(t *testing.T) {
	dir := t.TempDir()
	// 40 messages of testMsg size; MaxBytes holds about 25.
	s := openT(t, Options{Dir: dir, SegmentSize: 1024})
	ids := appendN(t, s, 1, 10)
	for _, id := range ids[:4] {
		s.Ack(id)
	}
	s.Ack(ids[7]) // out of order: a range above the checkpoint's W
	want := Ledger{Accepted: 10, Delivered: 5, Live: 5, Dropped: map[DropReason]uint64{}}
	checkLedger(t, s.Stats().Ledger, want)
	s.Close()

	s = openT(t, Options{Dir: dir, SegmentSize: 1024})
	checkLedger(t, s.Stats().Ledger, want)
	es := all(t, s)
	s.Ack(es[0].ID)
	s.Close()
	want.Delivered, want.Live = 6, 4

	s = openT(t, Options{Dir: dir, SegmentSize: 1024})
	defer s.Close()
	checkLedger(t, s.Stats().Ledger, want)
}

// TestLedgerOverflowAndCorrupt: drops by the overflow policy and records
// skipped as damaged are counted under their reasons, once, across opens.
func TestLedgerOverflowAndCorrupt(t *testing.T) {
	dir := t.TempDir()
	m := testMsg(1)
	size := int64(len(m.Topic) + len(m.Payload))
	s := openT(t, Options{Dir: dir, MaxBytes: 10 * size, SegmentSize: 1 << 20})
	for i := range 30 {
		if _, err := s.Append(context.Background(), testMsg(i)); err != nil {
			t.Fatal(err)
		}
	}
	l := s.Stats().Ledger
	if l.Dropped[DropSpoolFull] == 0 || l.Sum() != l.Accepted || l.Accepted != 30 {
		t.Fatalf("ledger %+v", l)
	}
	s.Close()
	want := l

	// Flip a byte in the middle of a live record: skipped as corrupt.
	seg := lastSegment(t, dir)
	es := func() []Entry {
		s := openT(t, Options{Dir: dir, MaxBytes: 10 * size, SegmentSize: 1 << 20})
		defer s.Close()
		checkLedger(t, s.Stats().Ledger, want)
		return all(t, s)
	}()
	off, n := recordOffset(t, seg, 1, es[3].ID)
	flip(t, seg, off+n/2)
	s = openT(t, Options{Dir: dir, MaxBytes: 10 * size, SegmentSize: 1 << 20})
	want.Live--
	want.Dropped = map[DropReason]uint64{DropSpoolFull: want.Dropped[DropSpoolFull], DropCorrupt: 1}
	checkLedger(t, s.Stats().Ledger, want)
	s.Close()
	s = openT(t, Options{Dir: dir, MaxBytes: 10 * size, SegmentSize: 1 << 20})
	defer s.Close()
	checkLedger(t, s.Stats().Ledger, want)
}

// TestLedgerLostSegment: a quarantined segment in the middle of the spool
// costs its records, counted as lost exactly once.
func TestLedgerLostSegment(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, Options{Dir: dir, SegmentSize: 512})
	appendN(t, s, 1, 40)
	s.Close()
	var segs []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if filepath.Ext(e.Name()) == segSuffix {
			segs = append(segs, filepath.Join(dir, e.Name()))
		}
	}
	if len(segs) < 3 {
		t.Fatalf("%d segments", len(segs))
	}
	// Garbage instead of the second segment: quarantined at Open.
	if err := os.WriteFile(segs[1], []byte("this is not a segment at all, not even a header"), 0o600); err != nil {
		t.Fatal(err)
	}
	s = openT(t, Options{Dir: dir, SegmentSize: 512})
	l := s.Stats().Ledger
	s.Close()
	if l.Dropped[DropLost] == 0 || l.Sum() != l.Accepted || l.Accepted != 40 || l.Live+l.Dropped[DropLost] != 40 {
		t.Fatalf("ledger %+v", l)
	}
	s = openT(t, Options{Dir: dir, SegmentSize: 512})
	defer s.Close()
	checkLedger(t, s.Stats().Ledger, l)
}

// TestLedgerReadsFormat1: a spool from before the ledger counts its
// removals as unknown, and adds up.
func TestLedgerReadsFormat1(t *testing.T) {
	dir := copyDir(t, "testdata/v1-main")
	s := openT(t, Options{Dir: dir, SegmentSize: 512})
	defer s.Close()
	checkLedger(t, s.Stats().Ledger, Ledger{Accepted: 40, Live: 31, Unknown: 9})
	// Everything is in the normal lane.
	if ids, _ := headAll(t, s, LaneNormal); len(ids) != 31 {
		t.Fatalf("normal lane holds %d", len(ids))
	}
	for _, l := range []Lane{LaneHigh, LaneBulk} {
		if ids, _ := headAll(t, s, l); len(ids) != 0 {
			t.Fatalf("lane %s holds %d", l, len(ids))
		}
	}
}
