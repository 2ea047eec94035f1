package spool

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/edgegw/edgegw/internal/testutil"
)

// qosMsg is testMsg(i) at qos.
func qosMsg(i int, qos byte) Message {
	m := testMsg(i)
	m.QoS = qos
	return m
}

// segBytes returns the size of the only segment file in dir.
func segBytes(t *testing.T, dir string) int64 {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*"+segSuffix))
	if err != nil || len(m) != 1 {
		t.Fatalf("segments %v, %v", m, err)
	}
	fi, err := os.Stat(m[0])
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// dones collects AppendAsync completions.
type dones struct {
	mu  sync.Mutex
	ids []ID
	err []error
}

func (d *dones) done(id ID, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ids = append(d.ids, id)
	d.err = append(d.err, err)
}

// TestCommitWritesItsRecords (issue 16): with sync batch the QoS 1/2
// records of a window reach the segment file in the flush that commits
// them, not one write per append: the file has not grown when AppendAsync
// returns. A QoS 0 record is written by its append, behind what is
// pending (kill -9 keeps it, as before), and a reader sees a pending
// record at once (it writes the buffer first). The window is an hour: only
// the reader, the QoS 0 append and Close write anything.
func TestCommitWritesItsRecords(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, Options{Dir: dir, Sync: SyncBatch, SyncInterval: time.Hour})
	var d dones
	size := func(i int) int64 { m := qosMsg(i, 1); return msgSize(&m) + recOverhead }

	s.AppendAsync(qosMsg(1, 1), d.done)
	header := segBytes(t, dir) // created by the first append, header written at once
	s.AppendAsync(qosMsg(2, 2), d.done)
	s.AppendAsync(qosMsg(3, 1), d.done)
	if got := segBytes(t, dir); got != header {
		t.Fatalf("segment holds %d bytes after 3 QoS 1/2 appends, want the header's %d (pending)", got, header)
	}
	s.AppendAsync(qosMsg(4, 0), d.done)
	want := header + size(1) + size(2) + size(3) + size(4)
	if got := segBytes(t, dir); got != want {
		t.Fatalf("segment holds %d bytes after a QoS 0 append, want %d (everything)", got, want)
	}
	s.AppendAsync(qosMsg(5, 1), d.done)
	if got := segBytes(t, dir); got != want {
		t.Fatalf("segment holds %d bytes, want %d (record 5 pending)", got, want)
	}
	es, err := s.Peek(0, 10)
	if err != nil || len(es) != 5 || !equalMsg(es[4].Message, qosMsg(5, 1)) {
		t.Fatalf("Peek = %d entries, %v", len(es), err)
	}
	want += size(5)
	if got := segBytes(t, dir); got != want {
		t.Fatalf("segment holds %d bytes after Peek reached a pending record, want %d", got, want)
	}
	s.AppendAsync(qosMsg(6, 1), d.done)
	if len(d.ids) != 0 {
		t.Fatalf("dones before the commit: %v", d.ids)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for i, id := range d.ids {
		if id != ID(i+1) || d.err[i] != nil {
			t.Fatalf("dones %v %v", d.ids, d.err)
		}
	}
	if len(d.ids) != 6 {
		t.Fatalf("dones %v", d.ids)
	}
	s = openT(t, Options{Dir: dir})
	es = all(t, s)
	if len(es) != 6 {
		t.Fatalf("%d entries after reopen", len(es))
	}
	for i, e := range es {
		if m := qosMsg(i+1, e.Message.QoS); e.ID != ID(i+1) || !equalMsg(e.Message, m) {
			t.Fatalf("entry %d: %d %+v", i, e.ID, e.Message)
		}
	}
}

// TestFailedCommitWriteRefusesItsRecords: when the write of a window's
// records fails (a full disk), those records are refused as their appends
// would have been: their dones get ErrNoSpace and ID 0, they are cut off
// the file and taken out of the spool (not served, not counted, their
// IDs given to the next records), Stats.NoSpace counts each, and the
// spool is not failed: appends work once there is space.
func TestFailedCommitWriteRefusesItsRecords(t *testing.T) {
	dir := filepath.Join(testutil.MountTmpfs(t, "256k", 0), "spool")
	opts := Options{Dir: dir, Sync: SyncBatch, SyncInterval: time.Hour, SegmentSize: 64 << 10}
	s := openT(t, opts)
	var d dones
	for i := 1; i <= 3; i++ {
		s.AppendAsync(testMsg(i), d.done)
	}
	checkEntries(t, all(t, s), idRange(1, 3)) // written: the reader reached them
	filler := testutil.FillDisk(t, filepath.Dir(dir))
	written := segBytes(t, dir)

	big := Message{Topic: "big", Payload: make([]byte, 3000), QoS: 1}
	for range 5 {
		s.AppendAsync(big, d.done) // 4..8, pending
	}
	checkEntries(t, all(t, s), idRange(1, 3)) // the write failed: refused
	if got := segBytes(t, dir); got != written {
		t.Fatalf("segment holds %d bytes after the failed write, want %d (cut back)", got, written)
	}
	if st := s.Stats(); st.Messages != 3 || st.NoSpace != 5 || st.Appended != 3 {
		t.Fatalf("stats after the failed write: %+v", st)
	}

	os.Remove(filler)
	s.AppendAsync(testMsg(4), d.done) // gets ID 4 again
	checkEntries(t, all(t, s), idRange(1, 4))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Close's flush delivered everything: 1..3 and the new 4 kept, the
	// five refused (in order, after the refusal).
	var ok []ID
	refused := 0
	for i, id := range d.ids {
		switch err := d.err[i]; {
		case err == nil:
			ok = append(ok, id)
		case errors.Is(err, ErrNoSpace) && errors.Is(err, syscall.ENOSPC) && id == 0:
			refused++
		default:
			t.Fatalf("done %d: %v", id, err)
		}
	}
	if refused != 5 || len(ok) != 4 {
		t.Fatalf("dones %v %v", d.ids, d.err)
	}
	checkEntries(t, entriesOf(ok), idRange(1, 4))
	s = openT(t, opts)
	checkEntries(t, all(t, s), idRange(1, 4))
	if st := s.Stats(); st.CorruptTail != 0 || st.IDGap != 0 {
		t.Fatalf("reopen: %+v", st)
	}
}

// entriesOf makes entries of ids with their testMsg, for checkEntries.
func entriesOf(ids []ID) []Entry {
	es := make([]Entry, len(ids))
	for i, id := range ids {
		es[i] = Entry{ID: id, Message: testMsg(int(id))}
	}
	return es
}

// TestQoS0RefusedBehindFailedCommitWriteIsCounted: a QoS 0 append writes
// what is pending first (the file keeps ID order); when that write fails
// on a full disk, the QoS 0 append is refused with ErrNoSpace too, and
// Stats.NoSpace ("appends refused with ErrNoSpace") counts it along with
// the pending records the write refused.
func TestQoS0RefusedBehindFailedCommitWriteIsCounted(t *testing.T) {
	dir := filepath.Join(testutil.MountTmpfs(t, "256k", 0), "spool")
	s := openT(t, Options{Dir: dir, Sync: SyncBatch, SyncInterval: time.Hour, SegmentSize: 64 << 10})
	var d dones
	s.AppendAsync(qosMsg(1, 1), d.done)
	checkEntries(t, all(t, s), idRange(1, 1)) // written: the reader reached it
	testutil.FillDisk(t, filepath.Dir(dir))
	big := Message{Topic: "big", Payload: make([]byte, 3000), QoS: 1}
	for range 5 {
		s.AppendAsync(big, d.done) // 2..6, pending
	}
	var err error
	s.AppendAsync(Message{Topic: "q0", Payload: []byte("x")}, func(_ ID, e error) { err = e })
	if !errors.Is(err, ErrNoSpace) {
		t.Fatalf("QoS 0 append behind a failed pending write: %v, want ErrNoSpace", err)
	}
	if st := s.Stats(); st.NoSpace != 6 {
		t.Fatalf("NoSpace = %d, want 6 (5 pending records and the QoS 0 append refused)", st.NoSpace)
	}
}

// TestFailedCommitWriteReleasesHugeBuffer: a huge message refused by a
// failed pending write does not leave its buffer pinned for as long as
// the disk stays full (a successful write releases a buffer over 1 MiB;
// a failed one must too).
func TestFailedCommitWriteReleasesHugeBuffer(t *testing.T) {
	dir := filepath.Join(testutil.MountTmpfs(t, "256k", 0), "spool")
	s := openT(t, Options{Dir: dir, Sync: SyncBatch, SyncInterval: time.Hour})
	var d dones
	s.AppendAsync(Message{Topic: "huge", Payload: make([]byte, 4<<20), QoS: 1}, d.done)
	if es, err := s.Peek(0, 1); err != nil || len(es) != 0 {
		t.Fatalf("Peek = %d entries, %v; want the huge record refused (4 MiB on a 256 KiB disk)", len(es), err)
	}
	s.mu.Lock()
	c := cap(s.pend.buf)
	s.mu.Unlock()
	if c > 1<<20 {
		t.Fatalf("pending buffer keeps %d bytes of capacity after the failed write", c)
	}
}

// TestPendingBoundedBySegment: the records waiting for their commit write
// are held in memory, but never more than one segment's worth however
// many arrive in one window: a segment that fills is written (and sealed)
// before the next record starts the next one (doc.go, "Memory").
func TestPendingBoundedBySegment(t *testing.T) {
	dir := t.TempDir()
	const seg = 256 << 10
	s := openT(t, Options{Dir: dir, Sync: SyncBatch, SyncInterval: time.Hour, SegmentSize: seg})
	var d dones
	m := Message{Topic: "bulk", Payload: make([]byte, 10<<10), QoS: 1}
	for range 200 { // ~2 MiB in one window
		s.AppendAsync(m, d.done)
		s.mu.Lock()
		n := len(s.pend.buf)
		s.mu.Unlock()
		if n > seg {
			t.Fatalf("%d bytes pending, more than a segment (%d)", n, seg)
		}
	}
	if st := s.Stats(); st.Segments < 8 {
		t.Fatalf("%d segments for ~2 MiB of 256 KiB segments", st.Segments)
	}
}

// TestLastIDNotRewoundByRefusedWrite: the bridge's live-first picker
// takes LastID()+1 as the
// first ID of records accepted during a connection. A failed pending
// write gives the refused records' IDs to the next appends; if LastID
// counted those pending IDs, it would go back, and records accepted after
// the connect would carry IDs below the picker's boundary (treated as
// backlog). LastID must never decrease.
func TestLastIDNotRewoundByRefusedWrite(t *testing.T) {
	dir := filepath.Join(testutil.MountTmpfs(t, "256k", 0), "spool")
	s := openT(t, Options{Dir: dir, Sync: SyncBatch, SyncInterval: time.Hour, SegmentSize: 64 << 10})
	var d dones
	s.AppendAsync(qosMsg(1, 1), d.done)
	checkEntries(t, all(t, s), idRange(1, 1))
	testutil.FillDisk(t, filepath.Dir(dir))
	big := Message{Topic: "big", Payload: make([]byte, 3000), QoS: 1}
	for range 5 {
		s.AppendAsync(big, d.done) // 2..6, pending
	}
	before := s.LastID()
	if l := s.Stats().Ledger; l.Accepted != 6 || l.Live != 6 || l.Sum() != l.Accepted {
		t.Fatalf("ledger with 5 pending: %+v", l) // docs/bridge.md: counted from when taken
	}
	checkEntries(t, all(t, s), idRange(1, 1)) // the write fails: 2..6 refused
	if after := s.LastID(); after < before {
		t.Fatalf("LastID went back from %d to %d after a refused pending write", before, after)
	}
	if l := s.Stats().Ledger; l.Accepted != 1 || l.Live != 1 || l.Sum() != l.Accepted {
		t.Fatalf("ledger after the refusal: %+v", l) // they leave accepted and queued
	}
}
