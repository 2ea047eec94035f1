//go:build linux

package store

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgegw/edgegw/internal/testutil"
)

// When the log's own records fill the disk, the store refuses what it
// cannot write; once the queued messages are removed (the live state is
// small again) it writes the snapshot into state.reserve's room, the
// rename frees the dead records, new records are kept again, the removed
// messages stay removed after reopening, and the reserve is back.
func TestStateRecoversFromFullDisk(t *testing.T) {
	dir := filepath.Join(testutil.MountTmpfs(t, "512k", 0), "state")
	var logs testutil.LogBuffer
	opts := Options{Dir: dir, Sync: SyncBatch, SyncInterval: 2 * time.Millisecond,
		Log: slog.New(slog.NewTextHandler(&logs, nil))}
	s, _, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	reserve := filepath.Join(dir, reserveName)
	if fi, err := os.Stat(reserve); err != nil || fi.Size() != reserveSize {
		t.Fatalf("state.reserve after Open: %v %v", fi, err)
	}
	if err := s.Wait(s.SessionPut("sub", SessionMeta{Expiry: time.Hour})); err != nil {
		t.Fatal(err)
	}

	// Queue QoS 2 messages of 4 KB until one is refused.
	payload := bytes.Repeat([]byte("q"), 4000)
	var kept []uint64
	var refusal error
	for range 1000 {
		seq, pos := s.QAdd("sub", Entry{Msg: Msg{Topic: "t", Payload: payload}, QoS: 2})
		if refusal = s.Wait(pos); refusal != nil {
			s.QDel("sub", seq) // the gateway drops what was not kept
			break
		}
		kept = append(kept, seq)
	}
	if refusal == nil || len(kept) == 0 {
		t.Fatalf("%d kept, refusal %v: the disk did not fill as planned", len(kept), refusal)
	}
	if !noSpace(refusal) {
		t.Fatalf("refused with %v, want no space left on device", refusal)
	}
	// Full of live records: a small one is refused too.
	seq, pos := s.QAdd("sub", Entry{Msg: Msg{Topic: "t", Payload: []byte("small")}, QoS: 2})
	if err := s.Wait(pos); err == nil {
		t.Fatal("a record was reported kept on a disk full of live records")
	}
	s.QDel("sub", seq)
	// The handle is the snapshot's from Open; its failure names state.log.
	var line string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "state write failed") {
			line = l
			break
		}
	}
	if !strings.Contains(line, filepath.Join(dir, logName)+":") {
		t.Fatalf("the write failure must name %s:\n%s", logName, logs.String())
	}

	// The subscriber completes every message: the live state is tiny.
	for _, seq := range kept {
		s.QDel("sub", seq)
	}
	seq, pos = s.QAdd("sub", Entry{Msg: Msg{Topic: "t", Payload: []byte("after")}, QoS: 2})
	if err := s.Wait(pos); err != nil {
		st := s.Stats()
		t.Fatalf("after %d completed messages (live %d B, log %d B on 512 KiB), a new record is refused: %v",
			len(kept), st.LiveBytes, st.LogBytes, err)
	}
	st := s.Stats()
	t.Logf("512 KiB tmpfs: %d messages of 4000 B kept, then refused; after their removal live %d B, log %d B, %d compactions",
		len(kept), st.LiveBytes, st.LogBytes, st.Compactions)
	if fi, err := os.Stat(reserve); err != nil || fi.Size() != reserveSize {
		t.Fatalf("state.reserve after the recovery: %v %v", fi, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, state, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	if st := state; len(st.Sessions) != 1 || len(st.Sessions[0].Queue) != 1 || st.Sessions[0].Queue[0].Seq != seq {
		t.Fatalf("after reopening: %+v, want session sub with only message %d queued", st.Sessions, seq)
	}
}

// TestFullDiskBacksOff: while the disk stays full and the live state is
// too large for the reserve's room, every record is refused, but the store
// does not try a snapshot on every flush (each one rewrites the whole live
// state into the last free blocks) nor log each failure: the attempts back
// off and the log has a few lines, however many records were refused. Once
// space is freed a record is kept again.
func TestFullDiskBacksOff(t *testing.T) {
	root := testutil.MountTmpfs(t, "512k", 0)
	dir := filepath.Join(root, "state")
	var logs testutil.LogBuffer
	s, _, err := Open(Options{Dir: dir, Sync: SyncBatch, SyncInterval: 2 * time.Millisecond,
		Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Wait(s.SessionPut("sub", SessionMeta{Expiry: time.Hour})); err != nil {
		t.Fatal(err)
	}
	// A live state larger than the reserve's room: no snapshot fits.
	payload := bytes.Repeat([]byte("q"), 4000)
	for range 30 {
		if _, pos := s.QAdd("sub", Entry{Msg: Msg{Topic: "t", Payload: payload}, QoS: 1}); s.Wait(pos) != nil {
			t.Fatal("refused before the disk was filled")
		}
	}
	filler := filepath.Join(root, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := f.Write(make([]byte, 4096)); err != nil {
			break
		}
	}
	f.Close()
	// The log's last page may still take a few records.
	for i := 0; ; i++ {
		if _, pos := s.QAdd("sub", Entry{Msg: Msg{Topic: "t", Payload: payload}, QoS: 1}); s.Wait(pos) != nil {
			break
		}
		if i == 100 {
			t.Fatal("the disk did not fill")
		}
	}

	start := time.Now()
	refused := 0
	for time.Since(start) < 3*time.Second {
		seq, pos := s.QAdd("sub", Entry{Msg: Msg{Topic: "t", Payload: []byte("small")}, QoS: 1})
		if s.Wait(pos) == nil {
			t.Fatal("a record was kept on a full disk")
		}
		s.QDel("sub", seq) // the gateway takes back what was not kept
		refused++
	}
	failed := s.Stats().CompactionsFailed
	lines := strings.Count(logs.String(), "\n")
	t.Logf("3 s of a full disk: %d records refused, %d snapshot attempts failed, %d log lines", refused, failed, lines)
	if failed > 12 {
		t.Errorf("%d snapshot attempts in 3 s for %d refused records: no backoff", failed, refused)
	}
	if lines > 5 {
		t.Errorf("%d log lines in 3 s of a full disk, want a few:\n%s", lines, logs.String())
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	// Each Wait is one flush: the store's own pace, no sleeping.
	for deadline := time.Now().Add(30 * time.Second); ; {
		seq, pos := s.QAdd("sub", Entry{Msg: Msg{Topic: "t", Payload: []byte("after")}, QoS: 1})
		if s.Wait(pos) == nil {
			break
		}
		s.QDel("sub", seq)
		if time.Now().After(deadline) {
			t.Fatal("no record kept within 30 s of space being freed")
		}
	}
}
