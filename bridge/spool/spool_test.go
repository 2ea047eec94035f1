package spool

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/edgegw/edgegw/internal/testutil"
)

func TestMain(m *testing.M) {
	if v := os.Getenv(crashChildEnv); v != "" {
		crashChild(v) // never returns
	}
	goleak.VerifyTestMain(m)
}

func openT(t testing.TB, opts Options) *Spool {
	t.Helper()
	if opts.SyncInterval == 0 {
		opts.SyncInterval = time.Millisecond
	}
	s, err := Open(opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func testMsg(i int) Message {
	return Message{
		Topic:   fmt.Sprintf("sensors/%d", i),
		Payload: bytes.Repeat([]byte{byte(i)}, 20+i%7),
		QoS:     byte(i % 3),
		Retain:  i%2 == 0,
	}
}

func appendN(t testing.TB, s *Spool, from, n int) []ID {
	t.Helper()
	ids := make([]ID, 0, n)
	for i := from; i < from+n; i++ {
		id, err := s.Append(context.Background(), testMsg(i))
		if err != nil {
			t.Fatalf("Append %d: %v", i, err)
		}
		ids = append(ids, id)
	}
	return ids
}

// all reads every unacked entry through Peek.
func all(t testing.TB, s *Spool) []Entry {
	t.Helper()
	var out []Entry
	var after ID
	for {
		es, err := s.Peek(after, 7)
		if err != nil {
			t.Fatalf("Peek: %v", err)
		}
		if len(es) == 0 {
			return out
		}
		out = append(out, es...)
		after = es[len(es)-1].ID
	}
}

func entryIDs(es []Entry) []ID {
	ids := make([]ID, len(es))
	for i, e := range es {
		ids[i] = e.ID
	}
	return ids
}

func segFiles(t testing.TB, dir string) int {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*"+segSuffix))
	if err != nil {
		t.Fatal(err)
	}
	return len(m)
}

func equalMsg(a, b Message) bool {
	return a.Topic == b.Topic && bytes.Equal(a.Payload, b.Payload) && a.QoS == b.QoS && a.Retain == b.Retain
}

func TestRoundTrip(t *testing.T) {
	ctx := context.Background()
	s := openT(t, Options{Dir: t.TempDir()})
	ids := appendN(t, s, 1, 10)
	for i, id := range ids {
		if id != ID(i+1) {
			t.Fatalf("ids = %v, want 1..10", ids)
		}
	}
	var after ID
	for i := 1; i <= 10; i++ {
		id, m, err := s.Next(ctx, after)
		if err != nil {
			t.Fatal(err)
		}
		if id != ID(i) || !equalMsg(m, testMsg(i)) {
			t.Fatalf("Next(%d) = %d %+v, want %d %+v", after, id, m, i, testMsg(i))
		}
		after = id
	}

	// Out of order acks; the restart cursor skips acked ones.
	for _, id := range []ID{3, 1, 2, 7} {
		if err := s.Ack(id); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Ack(3); err != nil {
		t.Fatalf("second ack: %v", err)
	}
	if err := s.Ack(11); err == nil {
		t.Fatal("ack of an unknown id succeeded")
	}
	if id, _, err := s.Next(ctx, 0); err != nil || id != 4 {
		t.Fatalf("Next(0) = %d, %v; want 4", id, err)
	}
	if id, _, err := s.Next(ctx, 6); err != nil || id != 8 {
		t.Fatalf("Next(6) = %d, %v; want 8", id, err)
	}
	if got := entryIDs(all(t, s)); fmt.Sprint(got) != "[4 5 6 8 9 10]" {
		t.Fatalf("unacked = %v", got)
	}
	st := s.Stats()
	if st.Messages != 6 || st.Acked != 4 || st.Appended != 10 {
		t.Fatalf("stats = %+v", st)
	}
	var wantBytes int64
	for _, i := range []int{4, 5, 6, 8, 9, 10} {
		m := testMsg(i)
		wantBytes += int64(len(m.Topic) + len(m.Payload))
	}
	if st.Bytes != wantBytes {
		t.Fatalf("Bytes = %d, want %d", st.Bytes, wantBytes)
	}
}

func TestNextWaits(t *testing.T) {
	s := openT(t, Options{Dir: t.TempDir()})
	type res struct {
		id  ID
		err error
	}
	got := make(chan res, 1)
	go func() {
		id, _, err := s.Next(context.Background(), 0)
		got <- res{id, err}
	}()
	appendN(t, s, 1, 1)
	if r := <-got; r.err != nil || r.id != 1 {
		t.Fatalf("Next = %+v", r)
	}

	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		_, _, err := s.Next(ctx, 1)
		got <- res{0, err}
	}()
	cancel()
	if r := <-got; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("Next after cancel: %v", r.err)
	}

	go func() {
		_, _, err := s.Next(context.Background(), 1)
		got <- res{0, err}
	}()
	testutil.Eventually(t, 10*time.Second, "Next waiting", func() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.notify != nil })
	s.Close()
	if r := <-got; !errors.Is(r.err, ErrClosed) {
		t.Fatalf("Next after Close: %v", r.err)
	}
	if _, err := s.Append(context.Background(), testMsg(1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Append after Close: %v", err)
	}
}

func TestRestart(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, SegmentSize: 512}
	s := openT(t, opts)
	appendN(t, s, 1, 40)
	var want []ID
	for id := ID(1); id <= 40; id++ {
		if id%2 == 1 || id%5 == 0 {
			if err := s.Ack(id); err != nil {
				t.Fatal(err)
			}
		} else {
			want = append(want, id)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openT(t, opts)
	es := all(t, s)
	if fmt.Sprint(entryIDs(es)) != fmt.Sprint(want) {
		t.Fatalf("after restart: %v, want %v", entryIDs(es), want)
	}
	for _, e := range es {
		if !equalMsg(e.Message, testMsg(int(e.ID))) {
			t.Fatalf("entry %d = %+v", e.ID, e.Message)
		}
	}
	if st := s.Stats(); st.Recovered != int64(len(want)) || st.CorruptTail != 0 {
		t.Fatalf("stats = %+v", st)
	}
	if ids := appendN(t, s, 41, 1); ids[0] != 41 {
		t.Fatalf("id after restart = %d, want 41", ids[0])
	}
}

func TestIDsSurviveEmptySpool(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, SegmentSize: 256}
	for round := range 3 {
		s := openT(t, opts)
		ids := appendN(t, s, 1, 10)
		if want := ID(round*10 + 1); ids[0] != want {
			t.Fatalf("round %d: first id %d, want %d", round, ids[0], want)
		}
		for _, id := range ids {
			if err := s.Ack(id); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSegmentRolloverAndDeletion(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, Options{Dir: dir, SegmentSize: 1024, Sync: SyncNone})
	appendN(t, s, 1, 100)
	files := segFiles(t, dir)
	if files < 5 || s.Stats().Segments != files {
		t.Fatalf("%d segment files, Stats.Segments %d", files, s.Stats().Segments)
	}

	// Ack the whole second segment first: it goes, the first stays.
	g := s.segs[1]
	for id := g.base; id <= g.last(); id++ {
		s.Ack(id)
	}
	if n := segFiles(t, dir); n != files-1 {
		t.Fatalf("after acking segment 2: %d files, want %d", n, files-1)
	}
	if _, err := os.Stat(s.segs[0].path); err != nil {
		t.Fatalf("segment 1 is gone: %v", err)
	}
	for id := ID(1); id < 100; id++ {
		s.Ack(id)
	}
	if n := segFiles(t, dir); n != 1 {
		t.Fatalf("after acking all but the last: %d files, want 1", n)
	}
	if got := entryIDs(all(t, s)); fmt.Sprint(got) != "[100]" {
		t.Fatalf("unacked = %v", got)
	}
	st := s.Stats()
	if st.Segments != 1 || st.Messages != 1 {
		t.Fatalf("stats = %+v", st)
	}
	fi, _ := os.Stat(s.segs[0].path)
	if st.DiskBytes != fi.Size() {
		t.Fatalf("DiskBytes = %d, file = %d", st.DiskBytes, fi.Size())
	}
}

func TestOverflowDropsOldest(t *testing.T) {
	dir := t.TempDir()
	m := func(i int) Message { return Message{Topic: "t", Payload: []byte(fmt.Sprintf("%09d", i))} }
	opts := Options{Dir: dir, MaxBytes: 100, SegmentSize: 200} // 10 messages of 10 bytes
	s := openT(t, opts)
	for i := 1; i <= 25; i++ {
		if _, err := s.Append(context.Background(), m(i)); err != nil {
			t.Fatal(err)
		}
	}
	st := s.Stats()
	if st.Dropped[DropSpoolFull] != 15 || st.Messages != 10 || st.Bytes != 100 {
		t.Fatalf("stats = %+v", st)
	}
	es := all(t, s)
	if es[0].ID != 16 || string(es[0].Message.Payload) != fmt.Sprintf("%09d", 16) || len(es) != 10 {
		t.Fatalf("entries start at %d (%d of them)", es[0].ID, len(es))
	}
	if err := s.Ack(3); err != nil { // dropped while in flight: no-op
		t.Fatal(err)
	}

	_, err := s.Append(context.Background(), Message{Topic: "t", Payload: make([]byte, 100)})
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Append of 101 bytes: %v, want ErrTooLarge", err)
	}
	t.Logf("too large: %v", err)
	if st := s.Stats(); st.Messages != 10 || st.Dropped[DropSpoolFull] != 15 {
		t.Fatalf("a rejected message changed the spool: %+v", st)
	}

	s.Close()
	s = openT(t, opts)
	if got := entryIDs(all(t, s)); got[0] != 16 || len(got) != 10 {
		t.Fatalf("after restart: %v", got)
	}
}

// An unacked record at the head of each segment pins the acked rest; the
// pinned bytes are bounded too.
func TestPinnedSegmentsBounded(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, MaxBytes: 4096, SegmentSize: 1024, Sync: SyncNone}
	s := openT(t, opts)
	for i := range 400 {
		id := appendN(t, s, i, 1)[0]
		if i%10 != 0 {
			s.Ack(id)
		}
	}
	st := s.Stats()
	limit := opts.MaxBytes + max(opts.MaxBytes/2, 2*opts.SegmentSize) + 2*opts.SegmentSize
	if st.Dropped[DropSpoolFull] == 0 || st.DiskBytes > limit {
		t.Fatalf("disk %d (limit %d), stats %+v", st.DiskBytes, limit, st)
	}
	t.Logf("disk %d bytes in %d segments, %d live messages, dropped %d",
		st.DiskBytes, st.Segments, st.Messages, st.Dropped[DropSpoolFull])
}

func TestGroupCommit(t *testing.T) {
	for _, mode := range []SyncMode{SyncBatch, SyncAlways} {
		t.Run(mode.String(), func(t *testing.T) {
			s := openT(t, Options{Dir: t.TempDir(), Sync: mode, SyncInterval: 5 * time.Millisecond})
			const workers, per = 50, 40
			before := s.Stats().Syncs
			var wg sync.WaitGroup
			errs := make(chan error, workers)
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range per {
						if _, err := s.Append(context.Background(), testMsg(w*per+i)); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			syncs := s.Stats().Syncs - before
			t.Logf("%s: %d appends, %d fsyncs", mode, workers*per, syncs)
			if mode == SyncBatch && syncs*10 > workers*per {
				t.Fatalf("%d fsyncs for %d appends: no group commit", syncs, workers*per)
			}
			if n := len(all(t, s)); n != workers*per {
				t.Fatalf("%d entries, want %d", n, workers*per)
			}
		})
	}
}

// Many acks out of order make acks.log grow; it is replaced by a checkpoint
// and stays small, and a restart still sees the right set.
func TestAckLogCompaction(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, Sync: SyncNone, SegmentSize: 64 << 20}
	s := openT(t, opts)
	const n = 24000 // 24000 uncoalesced ack records = 576 KB > ackCompactMin
	msg := Message{Topic: "t", Payload: []byte("x")}
	for range n {
		if _, err := s.Append(context.Background(), msg); err != nil {
			t.Fatal(err)
		}
	}
	// Descending inside each block of 10, so consecutive acks never
	// coalesce; every 1000th message stays unacked.
	acks := 0
	for b := ID(1); b <= n; b += 10 {
		for id := b + 9; id >= b; id-- {
			if id%1000 != 0 {
				s.Ack(id)
				if acks++; acks%500 == 0 {
					flushNow(s)
				}
			}
		}
	}
	s.Close()
	fi, err := os.Stat(filepath.Join(dir, ackFileName))
	if err != nil {
		t.Fatal(err)
	}
	if max := int64(ackCompactMin + 501*ackRecSize); fi.Size() > max {
		t.Fatalf("acks.log is %d bytes, want <= %d", fi.Size(), max)
	}
	s = openT(t, opts)
	es := all(t, s)
	if len(es) != n/1000 {
		t.Fatalf("%d entries after restart, want %d", len(es), n/1000)
	}
	for i, e := range es {
		if e.ID != ID(i+1)*1000 {
			t.Fatalf("entry %d has id %d", i, e.ID)
		}
	}
}

// flushNow lets the flusher run a round, as the SyncInterval would: it
// waits in the next batch, behind the last record appended (if that
// record's write fails, its callback is called with the failed ones).
func flushNow(s *Spool) {
	done := make(chan struct{})
	s.mu.Lock()
	b := s.joinBatchLocked()
	b.cbs = append(b.cbs, callback{s.nextID - 1, func(ID, error) { close(done) }})
	s.kickFlusher()
	s.mu.Unlock()
	<-done
}

func TestSecondOpenFails(t *testing.T) {
	dir := t.TempDir()
	openT(t, Options{Dir: dir})
	if s, err := Open(Options{Dir: dir}); err == nil {
		s.Close()
		t.Fatal("second Open of the same directory succeeded")
	} else if !strings.Contains(err.Error(), "in use") {
		t.Fatalf("err = %v", err)
	}
}

func TestParseSyncMode(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want SyncMode
		err  bool
	}{
		{"always", SyncAlways, false},
		{"batch", SyncBatch, false},
		{"none", SyncNone, false},
		{"Batch", 0, true},
		{"", 0, true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseSyncMode(tc.in)
			if (err != nil) != tc.err || got != tc.want {
				t.Fatalf("ParseSyncMode(%q) = %v, %v", tc.in, got, err)
			}
			if err == nil && got.String() != tc.in {
				t.Fatalf("String() = %q", got.String())
			}
		})
	}
}

func TestAppendValidates(t *testing.T) {
	s := openT(t, Options{Dir: t.TempDir()})
	ctx := context.Background()
	if _, err := s.Append(ctx, Message{Topic: "t", QoS: 3}); err == nil {
		t.Fatal("qos 3 accepted")
	}
	if _, err := s.Append(ctx, Message{Topic: strings.Repeat("a", maxTopicLen+1)}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("long topic: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Append(cctx, Message{Topic: "t"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled ctx: %v", err)
	}
	// Empty topic and payload round-trip.
	id, err := s.Append(ctx, Message{})
	if err != nil {
		t.Fatal(err)
	}
	if got, m, err := s.Next(ctx, 0); err != nil || got != id || m.Topic != "" || len(m.Payload) != 0 {
		t.Fatalf("Next = %d %+v %v", got, m, err)
	}
}

// A failed write leaves no partial record behind and fails the spool: no
// later Append may claim durability.
func TestWriteFailureIsSticky(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, Options{Dir: dir})
	appendN(t, s, 1, 3)
	s.mu.Lock()
	s.segs[len(s.segs)-1].f.Close() // the next write fails, and so does the truncate
	s.mu.Unlock()
	if _, err := s.Append(context.Background(), testMsg(4)); err == nil {
		t.Fatal("Append on a closed file succeeded")
	}
	_, err := s.Append(context.Background(), testMsg(5))
	if err == nil {
		t.Fatal("Append after a failure succeeded")
	}
	t.Logf("sticky: %v", err)
	if err := s.Close(); err == nil {
		t.Fatal("Close hid the failure")
	}
	s = openT(t, Options{Dir: dir})
	if got := entryIDs(all(t, s)); fmt.Sprint(got) != "[1 2 3]" {
		t.Fatalf("after reopen: %v", got)
	}
}

// TestFlashAccounting: Stats.BytesWritten counts every byte the spool
// writes (records, segment headers, acks.log, the ids file) and Syncs every
// fsync, for an operator sizing SD-card wear.
func TestFlashAccounting(t *testing.T) {
	for _, mode := range []SyncMode{SyncAlways, SyncNone} {
		t.Run(mode.String(), func(t *testing.T) {
			dir := t.TempDir()
			s := openT(t, Options{Dir: dir, Sync: mode})
			flushNow(s) // the checkpoint owed since Open
			st0 := s.Stats()
			const n = 100
			var want uint64 = segHeaderSize
			for i := 1; i <= n; i++ {
				m := testMsg(i)
				want += uint64(recOverhead + len(m.Topic) + len(m.Payload))
			}
			appendN(t, s, 1, n)
			st := s.Stats()
			if got := st.BytesWritten - st0.BytesWritten; got != want {
				t.Fatalf("%d bytes written for %d records, want %d", got, n, want)
			}
			if mode == SyncAlways && st.Syncs-st0.Syncs < 1 || mode == SyncNone && st.Syncs != st0.Syncs {
				t.Fatalf("%s: %d fsyncs", mode, st.Syncs-st0.Syncs)
			}
			for id := ID(1); id <= n; id++ {
				s.Ack(id)
			}
			flushNow(s)
			// One entry per flush that carried acks (in-order acks coalesce).
			if got := s.Stats().BytesWritten - st.BytesWritten; got == 0 || got%ackRecSize != 0 {
				t.Fatalf("%d bytes written for acks, want whole %d-byte entries", got, ackRecSize)
			}
			t.Logf("%s: %.1f bytes written per %d-byte message, %d fsyncs for %d appends",
				mode, float64(want)/n, len(testMsg(1).Payload), st.Syncs-st0.Syncs, n)
		})
	}
}

// Reading in order while records are appended: read's block (read ahead)
// never serves bytes of a record that was not complete when it was
// located, records larger than the block and records spanning the end of
// a block are read whole, and a returned payload is the caller's own (the
// block is reused).
func TestReadAheadWhileAppending(t *testing.T) {
	s := openT(t, Options{Dir: t.TempDir(), Sync: SyncBatch, SegmentSize: 256 << 10})
	msgOf := func(i int) Message {
		n := 10 + (i*37)%300
		if i%50 == 7 {
			n = readAhead + 1000 // larger than a block
		}
		return Message{Topic: fmt.Sprintf("t/%d", i), Payload: bytes.Repeat([]byte{byte(i)}, n), QoS: 1}
	}
	const total = 2000
	errc := make(chan error, 1)
	go func() {
		for i := 1; i <= total; i++ {
			if _, err := s.Append(context.Background(), msgOf(i)); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var after ID
	for i := 1; i <= total; i++ {
		id, m, err := s.Next(ctx, after)
		if err != nil {
			t.Fatalf("Next after %d: %v", after, err)
		}
		if want := msgOf(i); id != ID(i) || !equalMsg(m, want) {
			t.Fatalf("record %d: got id %d topic %q %d bytes, want %q %d bytes", i, id, m.Topic, len(m.Payload), want.Topic, len(want.Payload))
		}
		if len(m.Payload) > 0 {
			m.Payload[0] ^= 0xff // the caller's copy: the next read must not see it
		}
		after = id
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	for _, e := range all(t, s) {
		if !equalMsg(e.Message, msgOf(int(e.ID))) {
			t.Fatalf("record %d changed by a caller's write to its payload", e.ID)
		}
	}
	if st := s.Stats(); st.Dropped[DropCorrupt] != 0 {
		t.Fatalf("%d records dropped as corrupt", st.Dropped[DropCorrupt])
	}
}

// read's block holds only bytes below the segment's valid size when the
// record was located: bytes beyond it (a write in progress, or the
// remains of a failed one, which the next record overwrites) are never
// served for a later record.
func TestReadAheadStopsAtValidSize(t *testing.T) {
	s := openT(t, Options{Dir: t.TempDir(), Sync: SyncNone})
	first, err := s.Append(context.Background(), Message{Topic: "t/1", Payload: []byte("one"), QoS: 1})
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	g := s.segs[len(s.segs)-1]
	_, werr := g.f.WriteAt(bytes.Repeat([]byte{0xa5}, 512), g.size) // not a record: beyond the valid size
	s.mu.Unlock()
	if werr != nil {
		t.Fatal(werr)
	}
	if id, m, ok, err := s.Head(LaneNormal, 0); err != nil || !ok || id != first || string(m.Payload) != "one" {
		t.Fatalf("Head: %d %q %v %v", id, m.Payload, ok, err)
	}
	want := Message{Topic: "t/2", Payload: []byte("two"), QoS: 1}
	second, err := s.Append(context.Background(), want) // written over the garbage
	if err != nil {
		t.Fatal(err)
	}
	id, m, ok, err := s.Head(LaneNormal, first)
	if err != nil || !ok || id != second || !equalMsg(m, want) {
		t.Fatalf("Head after %d: id %d %+v ok %v err %v; want %d %+v", first, id, m, ok, err, second, want)
	}
}

// The window a commit just wrote is read back from memory (readBlock.seed),
// not with a pread: the sender reads it as the commit starts, and at sensor
// rates that pread was an ordinary system call per commit waking the
// runtime's sysmon (issue 16). Shown with the bytes on disk flipped after
// the commit: the last window still reads whole. A record that left the
// block (more than readAhead bytes were written after it) is read from
// the disk again, and its damage found.
func TestCommittedWindowReadFromMemory(t *testing.T) {
	s := openT(t, Options{Dir: t.TempDir(), Sync: SyncBatch})
	msg := func(i int) Message {
		return Message{Topic: fmt.Sprintf("t/%d", i), Payload: bytes.Repeat([]byte{byte(i)}, 4<<10), QoS: 1}
	}
	n := readAhead/(4<<10) + 3
	var ids []ID
	for i := range n { // a window each: Append waits for its commit
		id, err := s.Append(context.Background(), msg(i))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	flip := func(id ID) {
		s.mu.Lock()
		defer s.mu.Unlock()
		g := s.segs[len(s.segs)-1]
		i := int(id - g.base)
		off, n := int64(g.offs[i]), g.recLen(i)
		b := make([]byte, n)
		if _, err := g.f.ReadAt(b, off); err != nil {
			t.Fatal(err)
		}
		for j := range b {
			b[j] ^= 0x5a
		}
		if _, err := g.f.WriteAt(b, off); err != nil {
			t.Fatal(err)
		}
	}
	last := ids[n-1]
	flip(last)
	flip(ids[0])
	id, m, ok, err := s.Head(LaneNormal, last-1)
	if err != nil || !ok || id != last || !equalMsg(m, msg(n-1)) {
		t.Fatalf("the window just committed: id %d ok %v err %v; want %d intact", id, ok, err, last)
	}
	id, _, ok, err = s.Head(LaneNormal, 0)
	if err != nil || !ok || id != ids[1] {
		t.Fatalf("the first record, its bytes flipped, read as record %d (ok %v, err %v): want it dropped, then %d", id, ok, err, ids[1])
	}
	if st := s.Stats(); st.Dropped[DropCorrupt] != 1 {
		t.Fatalf("%d records dropped as corrupt, want the flipped first one", st.Dropped[DropCorrupt])
	}
}

// The seed never waits for the read-ahead block: its caller holds the
// spool's lock, and read holds the block's across a pread, which on a
// cold backlog on a slow SD card takes long. Shown with the block held
// for good: an append (QoS 0 is written, and seeded, at once) and a
// group commit still complete.
func TestSeedDoesNotWaitForTheReader(t *testing.T) {
	s := openT(t, Options{Dir: t.TempDir(), Sync: SyncBatch})
	s.ahead.mu.Lock() // a reader in its pread
	defer s.ahead.mu.Unlock()
	done := make(chan error, 2)
	go func() {
		_, err := s.Append(context.Background(), Message{Topic: "t/0", Payload: []byte("zero"), QoS: 0})
		done <- err
		_, err = s.Append(context.Background(), Message{Topic: "t/1", Payload: []byte("one"), QoS: 1})
		done <- err
	}()
	for range 2 {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("an append waited for the read-ahead block held by a reader")
		}
	}
}
