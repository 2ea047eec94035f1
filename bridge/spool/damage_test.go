package spool

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/edgegw/edgegw/internal/testutil"
)

// logBuf collects a spool's log lines for assertions.
type logBuf struct {
	testutil.LogBuffer
}

// line returns the first log line at level that contains every part.
func (l *logBuf) line(level string, parts ...string) string {
	for _, ln := range strings.Split(l.String(), "\n") {
		if !strings.Contains(ln, "level="+level) {
			continue
		}
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(ln, p)
		}
		if ok {
			return ln
		}
	}
	return ""
}

// openLog opens dir with a captured log; the caller closes.
func openLog(t *testing.T, opts Options) (*Spool, *logBuf) {
	t.Helper()
	lb := &logBuf{}
	opts.Logger = lb.Logger()
	if opts.SyncInterval == 0 {
		opts.SyncInterval = 1e6
	}
	s, err := Open(opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s, lb
}

func flip(t *testing.T, path string, off int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[off] ^= 0x5a
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// checkEntries verifies that the spool holds exactly the messages want
// (IDs as in testMsg) and that each is intact.
func checkEntries(t *testing.T, es []Entry, want []ID) {
	t.Helper()
	if !slices.Equal(entryIDs(es), want) {
		t.Fatalf("entries %v\nwant %v", entryIDs(es), want)
	}
	for _, e := range es {
		if !equalMsg(e.Message, testMsg(int(e.ID))) {
			t.Fatalf("entry %d damaged", e.ID)
		}
	}
}

func idRange(first, last ID, except ...ID) []ID {
	var out []ID
	for id := first; id <= last; id++ {
		if !containsID(except, id) {
			out = append(out, id)
		}
	}
	return out
}

func containsID(ids []ID, id ID) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// recordOffset returns the offset and length of record id in a segment
// file that starts at base.
func recordOffset(t *testing.T, path string, base, id ID) (int64, int64) {
	t.Helper()
	off := int64(segHeaderSize)
	for i := base; i < id; i++ {
		m := testMsg(int(i))
		off += int64(recOverhead + len(m.Topic) + len(m.Payload))
	}
	m := testMsg(int(id))
	return off, int64(recOverhead + len(m.Topic) + len(m.Payload))
}

// TestFlippedByteMidSegment is issue 12 point 2: 1,000 records in one
// segment, one byte flipped halfway. Only the damaged record may be lost;
// it is counted, logged at ERROR with the path, and stays gone (not counted
// again) at the next Open; IDs go on above 1,000.
func TestFlippedByteMidSegment(t *testing.T) {
	const n = 1000
	dir := t.TempDir()
	s := openT(t, Options{Dir: dir, Sync: SyncNone}) // Close fsyncs
	appendN(t, s, 1, n)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	seg := lastSegment(t, dir)
	fi, _ := os.Stat(seg)
	flip(t, seg, fi.Size()/2)

	s, lb := openLog(t, Options{Dir: dir})
	es := all(t, s)
	st := s.Stats()
	id, err := s.Append(context.Background(), testMsg(n+1))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d spooled, one byte flipped at %d of %d: %d left; stats %+v", n, fi.Size()/2, fi.Size(), len(es), st)
	if len(es) != n-1 || st.Skipped != 1 || st.Dropped[DropCorrupt] != 1 || st.CorruptTail != 0 {
		t.Fatalf("%d left, stats %+v; want %d left, 1 skipped", len(es), st, n-1)
	}
	lost := ID(0)
	for i, e := range es {
		if e.ID != ID(i+1) {
			lost = ID(i + 1)
			break
		}
	}
	checkEntries(t, es, idRange(1, n, lost))
	if l := lb.line("ERROR", "damaged records skipped", seg, "lost=1"); l == "" {
		t.Fatalf("no ERROR line with the path; log:\n%s", lb)
	}
	if id != n+1 {
		t.Fatalf("new id %d, want %d", id, n+1)
	}

	// The damage is recorded: a second Open neither counts nor loses more.
	s, lb = openLog(t, Options{Dir: dir})
	es = all(t, s)
	st = s.Stats()
	s.Close()
	if len(es) != n || st.Skipped != 0 || st.IDGap != 0 || lb.line("ERROR") != "" {
		t.Fatalf("second open: %d entries, stats %+v, log:\n%s", len(es), st, lb)
	}
}

// TestFlipEveryByteOfMiddleRecord flips, one at a time, every byte of a
// record in the middle of a segment (header, ID, flags, topic, payload):
// exactly that record is lost, every other one is intact, and the spool
// appends after it.
func TestFlipEveryByteOfMiddleRecord(t *testing.T) {
	const n, victim = 30, 15
	src := t.TempDir()
	s := openT(t, Options{Dir: src})
	appendN(t, s, 1, n)
	s.Close()
	seg := lastSegment(t, src)
	off, size := recordOffset(t, seg, 1, victim)
	for i := off; i < off+size; i++ {
		dir := copyDir(t, src)
		flip(t, filepath.Join(dir, filepath.Base(seg)), i)
		s, err := Open(Options{Dir: dir, Sync: SyncNone})
		if err != nil {
			t.Fatalf("byte %d: %v", i-off, err)
		}
		es := all(t, s)
		st := s.Stats()
		id, aerr := s.Append(context.Background(), testMsg(n+1))
		s.Close()
		checkEntries(t, es, idRange(1, n, victim))
		if st.Skipped != 1 || aerr != nil || id != n+1 {
			t.Fatalf("byte %d: stats %+v, append %d %v", i-off, st, id, aerr)
		}
	}
}

// TestDamagedRun zeroes three consecutive records and garbles the segment
// header: the three are lost, everything else is read, and the header is
// repaired.
func TestDamagedRun(t *testing.T) {
	const n = 40
	dir := t.TempDir()
	s := openT(t, Options{Dir: dir})
	appendN(t, s, 1, n)
	s.Close()
	seg := lastSegment(t, dir)
	from, _ := recordOffset(t, seg, 1, 10)
	to, l := recordOffset(t, seg, 1, 12)
	b, _ := os.ReadFile(seg)
	clear(b[from : to+l])
	copy(b, "XXXX")
	os.WriteFile(seg, b, 0o600)

	s, lb := openLog(t, Options{Dir: dir})
	es := all(t, s)
	st := s.Stats()
	s.Close()
	checkEntries(t, es, idRange(1, n, 10, 11, 12))
	if st.Skipped != 3 || st.DamagedBytes != to+l-from {
		t.Fatalf("stats %+v", st)
	}
	if lb.line("WARN", "damaged segment header rewritten") == "" {
		t.Fatalf("log:\n%s", lb)
	}
	s = openT(t, Options{Dir: dir})
	if st := s.Stats(); st.Skipped != 0 || st.Messages != n-3 {
		t.Fatalf("second open: %+v", st)
	}
}

// TestQuarantineUnreadableSegment: a segment that is all garbage (header
// included) is moved aside, logged at ERROR with its path, counted; the
// other segments are served and IDs do not go back.
func TestQuarantineUnreadableSegment(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, Options{Dir: dir, SegmentSize: 512})
	appendN(t, s, 1, 30)
	s.Close()
	m, _ := filepath.Glob(filepath.Join(dir, "*"+segSuffix))
	if len(m) < 3 {
		t.Fatalf("%d segments", len(m))
	}
	victim := m[1] // a middle one
	fi, _ := os.Stat(victim)
	os.WriteFile(victim, bytes.Repeat([]byte{0xa5}, int(fi.Size())), 0o600)
	base, _ := parseSegName(filepath.Base(victim))
	next, _ := parseSegName(filepath.Base(m[2]))

	s, lb := openLog(t, Options{Dir: dir, SegmentSize: 512})
	es := all(t, s)
	st := s.Stats()
	id, err := s.Append(context.Background(), testMsg(31))
	s.Close()
	var want []ID
	for i := ID(1); i <= 30; i++ {
		if i < base || i >= next {
			want = append(want, i)
		}
	}
	checkEntries(t, es, want)
	if st.Quarantined != 1 || err != nil || id != 31 {
		t.Fatalf("stats %+v, append %d %v", st, id, err)
	}
	if lb.line("ERROR", "moved aside", victim) == "" {
		t.Fatalf("log:\n%s", lb)
	}
	if _, err := os.Stat(victim + ".quarantine"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(victim); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("victim still there: %v", err)
	}
}

// TestEmptiedNewestSegment is issue 12 point 4: the newest segment is found
// empty (a power cut after it was created) or missing. IDs never go back:
// after a clean stop they continue where they were, after a crash above
// the high-water mark; an empty segment is logged at WARN.
func TestEmptiedNewestSegment(t *testing.T) {
	for _, tc := range []struct {
		name     string
		segSize  int64
		crash    bool // copy the files of the open spool: kill -9
		missing  bool // remove the file instead of emptying it
		wantLeft int
	}{
		{"only-segment", 0, false, false, 0},
		{"only-segment-crash", 0, true, false, 0},
		{"only-segment-missing", 0, false, true, 0},
		{"newest-of-many", 256, false, false, -1},
		{"newest-of-many-crash", 256, true, false, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 10
			dir := t.TempDir()
			s := openT(t, Options{Dir: dir, SegmentSize: tc.segSize})
			appendN(t, s, 1, n)
			if tc.crash {
				flushNow(s)
				dir = copyDir(t, dir)
			}
			s.Close()
			seg := lastSegment(t, dir)
			base, _ := parseSegName(filepath.Base(seg))
			if tc.missing {
				os.Remove(seg)
			} else {
				os.Truncate(seg, 0)
			}
			s, lb := openLog(t, Options{Dir: dir, SegmentSize: tc.segSize})
			es := all(t, s)
			st := s.Stats()
			id, err := s.Append(context.Background(), testMsg(99))
			s.Close()
			if err != nil || id <= n {
				t.Fatalf("new id %d (%v) reuses an id of the lost segment (1..%d)", id, err, n)
			}
			if len(es) != int(base)-1 {
				t.Fatalf("%d entries left, want %d", len(es), base-1)
			}
			if !tc.missing && (st.EmptySegments != 1 || lb.line("WARN", "empty spool segment removed", seg) == "") {
				t.Fatalf("stats %+v, log:\n%s", st, lb)
			}
			if st.IDGap == 0 || lb.line("", "ids continue") == "" && lb.line("WARN", "ids continue") == "" {
				t.Fatalf("no id gap logged: stats %+v, log:\n%s", st, lb)
			}
			t.Logf("new id %d, gap %d", id, st.IDGap)
		})
	}
}

// TestIDsAfterCrash: after an unclean stop, IDs continue above the
// high-water mark even when nothing looks damaged (records written but not
// yet durable may be in flight upstream and lost with the page cache).
func TestIDsAfterCrash(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, Options{Dir: dir})
	appendN(t, s, 1, 5)
	flushNow(s)
	crashed := copyDir(t, dir)
	s.Close()

	s = openT(t, Options{Dir: crashed})
	checkEntries(t, all(t, s), idRange(1, 5))
	id, err := s.Append(context.Background(), testMsg(6))
	if err != nil || id <= 5 || id > 5+idsReserve+1 {
		t.Fatalf("id after crash %d (%v)", id, err)
	}
	s.Close()
	// A clean stop: the next ID follows on.
	s = openT(t, Options{Dir: crashed})
	if id2, _ := s.Append(context.Background(), testMsg(7)); id2 != id+1 {
		t.Fatalf("after a clean stop id %d, want %d", id2, id+1)
	}
}

// ackSetup spools 3,001 messages and acks 2..3001 (one live message keeps
// the segment), closes, and reopens and closes once more so that acks.log
// is a checkpoint. It returns the directory.
func ackSetup(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	s := openT(t, Options{Dir: dir, Sync: SyncNone}) // Close fsyncs
	appendN(t, s, 1, 3001)
	for id := ID(2); id <= 3001; id++ {
		s.Ack(id)
	}
	s.Close()
	openT(t, Options{Dir: dir}).Close()
	return dir
}

// TestAckLogDamage is issue 12 point 7: 3,000 acked messages, acks.log
// damaged. Every single-byte flip (the version byte too) costs nothing,
// because checkpoint entries are written twice; an emptied acks.log brings
// the 3,000 back, with a WARN that says how many.
func TestAckLogDamage(t *testing.T) {
	src := ackSetup(t)
	path := filepath.Join(src, ackFileName)
	b, _ := os.ReadFile(path)
	t.Logf("acks.log: %d bytes", len(b))
	for off := range int64(len(b)) {
		dir := copyDir(t, src)
		flip(t, filepath.Join(dir, ackFileName), off)
		s, lb := openLog(t, Options{Dir: dir, Sync: SyncNone})
		es := all(t, s)
		st := s.Stats()
		s.Close()
		if len(es) != 1 || st.AckDamage == 0 || lb.line("WARN", "acks.log damaged", "may_resend=1") == "" {
			t.Fatalf("flip at %d: %d entries, stats %+v, log:\n%s", off, len(es), st, lb)
		}
		// The checkpoint rewrote it: the next Open finds nothing wrong.
		s = openT(t, Options{Dir: dir, Sync: SyncNone})
		if st := s.Stats(); st.AckDamage != 0 || st.Messages != 1 {
			t.Fatalf("flip at %d, second open: %+v", off, st)
		}
		s.Close()
	}

	t.Run("emptied", func(t *testing.T) {
		dir := copyDir(t, src)
		os.Truncate(filepath.Join(dir, ackFileName), 0)
		s, lb := openLog(t, Options{Dir: dir})
		es := all(t, s)
		id, _ := s.Append(context.Background(), testMsg(1))
		s.Close()
		t.Logf("acks.log emptied: %d messages will be re-sent", len(es))
		if len(es) != 3001 || lb.line("WARN", "acks.log damaged", "may_resend=3001") == "" {
			t.Fatalf("%d entries, log:\n%s", len(es), lb)
		}
		if id != 3002 {
			t.Fatalf("new id %d, want 3002", id)
		}
	})
	t.Run("garbage", func(t *testing.T) {
		dir := copyDir(t, src)
		path := filepath.Join(dir, ackFileName)
		os.WriteFile(path, bytes.Repeat([]byte{0xa5}, 56), 0o600)
		s, lb := openLog(t, Options{Dir: dir})
		es := all(t, s)
		st := s.Stats()
		s.Close()
		if len(es) != 3001 || st.Quarantined != 1 || lb.line("ERROR", "moved aside", path) == "" {
			t.Fatalf("%d entries, stats %+v, log:\n%s", len(es), st, lb)
		}
		if _, err := os.Stat(path + ".quarantine"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("missing", func(t *testing.T) {
		dir := copyDir(t, src)
		os.Remove(filepath.Join(dir, ackFileName))
		s, lb := openLog(t, Options{Dir: dir})
		es := all(t, s)
		s.Close()
		if len(es) != 3001 || lb.line("WARN", "acks.log missing", "may_resend=3001") == "" {
			t.Fatalf("%d entries, log:\n%s", len(es), lb)
		}
	})
}

// TestAckLogAppendedEntryDamage: acks appended after the checkpoint, one
// entry per flush; a flipped byte in one of them brings back only the
// messages of that entry.
func TestAckLogAppendedEntryDamage(t *testing.T) {
	dir := ackSetup(t)
	s := openT(t, Options{Dir: dir})
	appendN(t, s, 3002, 30) // 3002..3031
	flushNow(s)
	for first := ID(3002); first < 3032; first += 10 {
		for id := first; id < first+10; id++ {
			s.Ack(id)
		}
		flushNow(s)
	}
	// Close would write a checkpoint (owed since Open): look at the file
	// before that, as a crash would leave it.
	crashed := copyDir(t, dir)
	s.Close()
	path := filepath.Join(crashed, ackFileName)
	b, _ := os.ReadFile(path)
	// The last three entries are 3002..3011, 3012..3021, 3022..3031.
	middle := int64(len(b) - 2*ackRecSize + 12)
	flip(t, path, middle)
	s, lb := openLog(t, Options{Dir: crashed})
	es := all(t, s)
	s.Close()
	checkEntries(t, es, append([]ID{1}, idRange(3012, 3021)...))
	if lb.line("WARN", "acks.log damaged", "bad_entries=1") == "" {
		t.Fatalf("log:\n%s", lb)
	}
}

// TestAckLogUnknownVersion: a higher version byte with no entry that reads
// under this version (a newer format) makes Open fail with a typed error,
// touching nothing. (With entries that read, it is a damaged header:
// TestAckLogHeaderDamageLosesNoEntry.)
func TestAckLogUnknownVersion(t *testing.T) {
	dir := ackSetup(t)
	path := filepath.Join(dir, ackFileName)
	b, _ := os.ReadFile(path)
	b[4] = ackVersion + 1
	for i := ackHeaderSize; i < len(b); i++ {
		b[i] ^= 0xa5 // entries of another format: none validates
	}
	os.WriteFile(path, b, 0o600)
	s, err := Open(Options{Dir: dir})
	if err == nil {
		s.Close()
		t.Fatal("Open accepted an unknown acks.log version")
	}
	var oe *OpenError
	if !errors.As(err, &oe) || !errors.Is(err, ErrUnknownVersion) || !strings.Contains(err.Error(), ackFileName) {
		t.Fatalf("err = %v", err)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, b) {
		t.Fatal("the newer acks.log was changed")
	}
}

// TestReadsMainFormat opens a spool written by the code before the ids
// file existed (testdata/v1-main, generated from main at 8fc1cb0: 40
// messages in 512-byte segments, acks of 1-5, 9, 20, 21, 33): every
// unacked message is there, IDs continue at 41, and the ids file is added.
func TestReadsMainFormat(t *testing.T) {
	dir := copyDir(t, "testdata/v1-main")
	s, lb := openLog(t, Options{Dir: dir, SegmentSize: 512})
	es := all(t, s)
	st := s.Stats()
	id, err := s.Append(context.Background(), testMsg(41))
	s.Close()
	checkEntries(t, es, idRange(6, 40, 9, 20, 21, 33))
	if err != nil || id != 41 {
		t.Fatalf("append %d %v", id, err)
	}
	if st.CorruptTail+st.Skipped+st.Quarantined+st.AckDamage != 0 || lb.line("WARN") != "" {
		t.Fatalf("stats %+v, log:\n%s", st, lb)
	}
	if _, err := os.Stat(filepath.Join(dir, idsFileName)); err != nil {
		t.Fatal(err)
	}
}
