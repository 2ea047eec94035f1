package store

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgegw/edgegw/internal/durable"
	"github.com/edgegw/edgegw/internal/testutil"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func open(t *testing.T, dir string, sync Sync) (*Store, *State) {
	t.Helper()
	s, st, err := Open(Options{Dir: dir, Sync: sync, SyncInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, st
}

// fill writes a representative state: retained messages, a session with
// subscriptions, queued and in-flight messages and inbound QoS 2 ids.
func fill(t *testing.T, s *Store, n int) uint64 {
	t.Helper()
	var pos uint64
	s.RetainSet(Msg{Topic: "r/1", Payload: []byte("one"), QoS: 1, Retain: true})
	s.RetainSet(Msg{Topic: "r/2", Payload: []byte("two"), Retain: true, Origin: "c"})
	s.RetainDel("r/2")
	s.SessionPut("act", SessionMeta{Expiry: time.Hour, DisconnectedAt: 1234, Owner: "alice"})
	s.SubPut("act", Sub{Filter: "cmd/#", QoS: 2, NoLocal: true, RetainHandling: 2, SubID: 7})
	s.SubPut("act", Sub{Filter: "$share/g/x", QoS: 1})
	for i := range n {
		_, pos = s.QAdd("act", Entry{Msg: Msg{Topic: "cmd/x", Payload: []byte(fmt.Sprint("m", i)), QoS: 2,
			Expiry: time.Unix(2000000000, 0), Props: []byte{1, 2}}, QoS: 1 + byte(i%2), SubIDs: []uint32{7}})
	}
	s.QDel("act", 1)
	s.QSent("act", 2, 42)
	s.QReleased("act", 2)
	s.QSent("act", 4, 43)
	s.InQoS2("act", 9)
	s.InQoS2("act", 10)
	s.InQoS2Del("act", 9)
	s.SessionPut("gone", SessionMeta{Expiry: time.Minute})
	s.SubPut("gone", Sub{Filter: "a"})
	return max(pos, s.SessionDel("gone")) // positions grow: the last record's covers all
}

func TestRoundTrip(t *testing.T) {
	for _, mode := range []Sync{SyncAlways, SyncBatch, SyncNone} {
		t.Run(mode.String(), func(t *testing.T) {
			dir := t.TempDir()
			s, st := open(t, dir, mode)
			if len(st.Retained)+len(st.Sessions) != 0 {
				t.Fatalf("fresh store has state %+v", st)
			}
			pos := fill(t, s, 10)
			if err := s.Wait(pos); err != nil {
				t.Fatal(err)
			}
			want := s.md.state()
			if mode == SyncNone {
				// kill -9: nothing more than what was written; no Close.
				b, _ := os.ReadFile(filepath.Join(dir, logName))
				md := newModel()
				scan(b[headerSize:], func(r rec) { md.apply(&r) })
				if got := md.state(); !reflect.DeepEqual(got, want) {
					t.Fatalf("after write, file replays to\n%+v\nwant\n%+v", got, want)
				}
			}
			s.Close()
			_, got := open(t, dir, mode)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("reopened\n%+v\nwant\n%+v", got, want)
			}
			if len(got.Retained) != 1 || len(got.Sessions) != 1 || len(got.Sessions[0].Queue) != 9 ||
				!got.Sessions[0].Queue[0].Released || got.Sessions[0].Queue[0].Msg.Payload != nil ||
				got.Sessions[0].Queue[2].PID != 43 || !reflect.DeepEqual(got.Sessions[0].InQoS2, []uint16{10}) {
				t.Fatalf("state %+v", got)
			}
		})
	}
}

// A cleaned session leaves no byte of itself in the file after Close.
func TestDeletedSessionLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir, SyncBatch)
	s.SessionPut("secret-client", SessionMeta{Expiry: time.Hour})
	s.SubPut("secret-client", Sub{Filter: "secret/topic"})
	s.QAdd("secret-client", Entry{Msg: Msg{Topic: "secret/topic", Payload: []byte("secret-payload")}, QoS: 1})
	s.Wait(s.SessionDel("secret-client"))
	s.Close()
	b, _ := os.ReadFile(filepath.Join(dir, logName))
	for _, w := range []string{"secret-client", "secret/topic", "secret-payload"} {
		if bytes.Contains(b, []byte(w)) {
			t.Errorf("%q still on disk after Close", w)
		}
	}
}

// What each sync mode promises when WhenDurable reports success: always
// and batch after an fsync that covers the record, none after the write
// only (no fsync).
func TestDurableMeansSynced(t *testing.T) {
	for _, mode := range []Sync{SyncAlways, SyncBatch, SyncNone} {
		t.Run(mode.String(), func(t *testing.T) {
			dir := t.TempDir()
			s, _ := open(t, dir, mode)
			before := s.fsyncs.Load()
			pos := s.RetainSet(Msg{Topic: "a", Payload: []byte("payload-on-disk")})
			synced := make(chan int64, 1)
			s.WhenDurable(pos, func(err error) {
				if err != nil {
					t.Error(err)
				}
				synced <- s.fsyncs.Load() - before
			})
			n := <-synced
			b, _ := os.ReadFile(filepath.Join(dir, logName))
			if !bytes.Contains(b, []byte("payload-on-disk")) {
				t.Fatal("durable but not in the file")
			}
			if (mode == SyncNone) != (n == 0) {
				t.Fatalf("%d fsyncs before the record was reported kept", n)
			}
		})
	}
}

// The log stays within CompactRatio times the live state (or CompactMin):
// a long add/delete churn does not grow the file.
func TestCompactionBoundsTheLog(t *testing.T) {
	dir := t.TempDir()
	s, _, err := Open(Options{Dir: dir, Sync: SyncNone, CompactMin: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.SessionPut("act", SessionMeta{Expiry: time.Hour})
	payload := bytes.Repeat([]byte("p"), 500)
	var maxLog int64
	for i := range 5000 {
		seq, _ := s.QAdd("act", Entry{Msg: Msg{Topic: "t", Payload: payload}, QoS: 1})
		if i%10 != 0 { // one in ten stays queued
			s.Wait(s.QDel("act", seq))
		}
		maxLog = max(maxLog, s.Stats().LogBytes)
	}
	st := s.Stats()
	t.Logf("records %d B, written %d B (%.2f x), live %d B, max log %d B, %d compactions",
		st.RecordBytes, st.BytesWritten, float64(st.BytesWritten)/float64(st.RecordBytes), st.LiveBytes, maxLog, st.Compactions)
	if st.Compactions < 2 || maxLog > 4*st.LiveBytes+64<<10+4<<10 {
		t.Fatalf("log grew to %d B for %d B live (%d compactions)", maxLog, st.LiveBytes, st.Compactions)
	}
	if st.BytesWritten > st.RecordBytes*2 {
		t.Fatalf("wrote %d B for %d B of records", st.BytesWritten, st.RecordBytes)
	}
}

// TestSessionOwnerRecord: a session record keeps its owner; a record
// written before owners were kept (no trailing owner field) still decodes,
// with OwnerKnown false, and is written again in that form (a compaction
// must not make a session nobody owns yet the anonymous user's).
func TestSessionOwnerRecord(t *testing.T) {
	unknown := rec{op: opSessionPut, client: "c", meta: SessionMeta{Expiry: time.Hour}}
	got, err := decodeBody(appendBody(nil, &unknown))
	if err != nil || got.meta.OwnerKnown || got.meta.Expiry != time.Hour {
		t.Fatalf("a session of unknown owner written again: %+v %v", got.meta, err)
	}
	if n := frameSize(len(appendBody(nil, &unknown))); n != metaSize("c", &unknown.meta) {
		t.Fatalf("metaSize %d, encoded %d (unknown owner)", metaSize("c", &unknown.meta), n)
	}
	for _, m := range []SessionMeta{
		{Expiry: time.Hour, Owner: "alice", OwnerKnown: true},
		{Expiry: time.Hour, Owner: "", OwnerKnown: true}, // anonymous: known, empty
		{Expiry: time.Hour, Owner: "bob", OwnerKnown: true, Will: &Msg{Topic: "w", Payload: []byte("x")}, WillAt: 5},
	} {
		r := rec{op: opSessionPut, client: "c", meta: m}
		body := appendBody(nil, &r)
		got, err := decodeBody(body)
		if err != nil || got.meta.Owner != m.Owner || !got.meta.OwnerKnown {
			t.Fatalf("decode %+v: %+v %v", m, got.meta, err)
		}
		if n := frameSize(len(body)); n != metaSize("c", &m) {
			t.Fatalf("metaSize %d, encoded %d", metaSize("c", &m), n)
		}
		old := body[:len(body)-2-len(m.Owner)] // as written before the owner field
		got, err = decodeBody(old)
		if err != nil || got.meta.OwnerKnown || got.meta.Owner != "" || got.meta.Expiry != time.Hour {
			t.Fatalf("old record of %+v: %+v %v", m, got.meta, err)
		}
	}
}

// A state file of format version 1 (before inbound ids of bridges were
// kept) reads as it was, and is rewritten under this version's header at
// Open, before a record only this version knows can be appended to it.
func TestOpenVersion1File(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir, SyncBatch)
	s.Wait(fill(t, s, 10))
	want := s.md.state()
	s.Close()
	b, _ := os.ReadFile(filepath.Join(dir, logName))
	var kinds []byte
	scan(b[headerSize:], func(r rec) { kinds = append(kinds, r.op) })
	if bytes.ContainsAny(kinds, string([]byte{opGroup, opOriginDel})) {
		t.Fatal("the version 1 file to test holds records of version 2")
	}
	b[4] = 1 // what version 1 wrote: the same records under its header
	os.WriteFile(filepath.Join(dir, logName), b, 0o600)
	s, got, lb := openLogged(t, dir)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("version 1 file read as\n%+v\nwant\n%+v", got, want)
	}
	if strings.Contains(lb.String(), "level=WARN") || strings.Contains(lb.String(), "level=ERROR") {
		t.Fatalf("a version 1 file taken for damage:\n%s", lb)
	}
	if st := s.Stats(); st.SkippedRecords != 0 || st.Quarantined != 0 {
		t.Fatalf("stats %+v", st)
	}
	b, _ = os.ReadFile(filepath.Join(dir, logName))
	if b[4] != formatVersion {
		t.Fatalf("header still names version %d", b[4])
	}
}

// stallFS is the real file system whose state.log writes and fsyncs
// block while the disk is stalled (a dying SD card, a saturated bus).
type stallFS struct {
	durable.OS
	mu      sync.Mutex
	stalled bool
	resume  chan struct{}
	blocked atomic.Int32 // operations waiting on the stall now
}

func newStallFS() *stallFS { return &stallFS{resume: make(chan struct{})} }

func (f *stallFS) stall() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stalled, f.resume = true, make(chan struct{})
}

func (f *stallFS) unstall() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stalled = false
	close(f.resume)
}

func (f *stallFS) wait() {
	f.mu.Lock()
	stalled, resume := f.stalled, f.resume
	f.mu.Unlock()
	if stalled {
		f.blocked.Add(1)
		<-resume
		f.blocked.Add(-1)
	}
}

func (f *stallFS) OpenFile(name string, flag int, perm os.FileMode) (durable.File, error) {
	file, err := f.OS.OpenFile(name, flag, perm)
	if err != nil || filepath.Base(name) != logName && filepath.Base(name) != tmpName {
		return file, err
	}
	return &stallFile{File: file, fs: f}, nil
}

type stallFile struct {
	durable.File
	fs *stallFS
}

func (f *stallFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.wait()
	return f.File.WriteAt(p, off)
}

func (f *stallFile) Sync() error {
	f.fs.wait()
	return f.File.Sync()
}

// With the disk stalled the records waiting to be written stay within
// PendingMax: with StallWait the publisher waits (and goes on once the
// disk does), with StallRefuse it is refused (WhenDurable reports
// durable.ErrStalled) and the refused records are neither kept nor
// written; the accepted ones are.
func TestStalledDiskBoundsPendingRecords(t *testing.T) {
	const max, n = 8, 20
	for _, policy := range []durable.Stall{durable.StallWait, durable.StallRefuse} {
		t.Run(policy.String(), func(t *testing.T) {
			dir := t.TempDir()
			fs := newStallFS()
			s, _, err := Open(Options{Dir: dir, Sync: SyncBatch, SyncInterval: time.Millisecond, FS: fs,
				PendingMax: max, Stall: policy})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			fs.stall()
			var appended atomic.Int32
			poss := make([]uint64, n)
			done := make(chan struct{})
			go func() {
				defer close(done)
				for i := range n {
					poss[i] = s.RetainSet(Msg{Topic: fmt.Sprintf("t/%d", i), Payload: []byte("x"), Retain: true})
					appended.Add(1)
				}
			}()
			if policy == durable.StallWait {
				// The flusher is stuck in its write; the publisher has
				// put max records in and waits for room.
				testutil.Eventually(t, 10*time.Second, "the bound full and the flusher stalled", func() bool {
					return appended.Load() == max && fs.blocked.Load() == 1
				})
				select {
				case <-done:
					t.Fatal("every append returned while the disk was stalled")
				default:
				}
				fs.unstall()
				<-done
				for i, pos := range poss {
					if err := s.Wait(pos); err != nil {
						t.Fatalf("record %d: %v", i, err)
					}
				}
			} else {
				<-done // refusals do not wait
				refused := 0
				for _, pos := range poss {
					if pos == Refused {
						refused++
					}
				}
				if refused != n-max {
					t.Fatalf("%d refused, want %d", refused, n-max)
				}
				if err := s.Wait(poss[n-1]); !errors.Is(err, durable.ErrStalled) {
					t.Fatalf("a refused record: %v, want ErrStalled", err)
				}
				if st := s.Stats(); st.Stalled != n-max {
					t.Fatalf("Stats.Stalled %d", st.Stalled)
				}
				fs.unstall()
				for i, pos := range poss[:max] {
					if err := s.Wait(pos); err != nil {
						t.Fatalf("accepted record %d: %v", i, err)
					}
				}
				if err := s.Wait(s.RetainSet(Msg{Topic: "later", Payload: []byte("y"), Retain: true})); err != nil {
					t.Fatalf("after the stall: %v", err)
				}
			}
			if st := s.Stats(); st.PendingPeak > max {
				t.Fatalf("pending peaked at %d records, bound %d", st.PendingPeak, max)
			}
			s.Close()
			_, st := open(t, dir, SyncBatch)
			got := map[string]bool{}
			for _, m := range st.Retained {
				got[m.Topic] = true
			}
			for i := range n {
				want := policy == durable.StallWait || i < max
				if got[fmt.Sprintf("t/%d", i)] != want {
					t.Errorf("t/%d kept %v, want %v", i, !want, want)
				}
			}
		})
	}
}
