package store

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeQueue writes n queued messages for one session and closes the
// store; it returns the file's bytes.
func writeQueue(t *testing.T, dir string, n int) []byte {
	t.Helper()
	s, _, err := Open(Options{Dir: dir, Sync: SyncNone})
	if err != nil {
		t.Fatal(err)
	}
	s.SessionPut("act", SessionMeta{Expiry: time.Hour})
	for i := range n {
		s.QAdd("act", Entry{Msg: Msg{Topic: "cmd/x", Payload: []byte(fmt.Sprintf("payload-%04d", i))}, QoS: 1})
	}
	s.Close()
	b, err := os.ReadFile(filepath.Join(dir, logName))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func reopen(t *testing.T, dir string) (*Store, *State) {
	t.Helper()
	s, st, err := Open(Options{Dir: dir, Sync: SyncNone})
	if err != nil {
		t.Fatalf("Open refused a damaged file: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s, st
}

func queueLen(st *State) int {
	if len(st.Sessions) == 0 {
		return 0
	}
	return len(st.Sessions[0].Queue)
}

func quarantined(t *testing.T, dir string) int {
	m, _ := filepath.Glob(filepath.Join(dir, logName+".corrupt-*"))
	return len(m)
}

// One flipped byte anywhere costs at most the record it is in: every
// other record is read back, the damaged file is kept aside, and the
// store opens.
func TestByteFlipLosesOnlyTheDamage(t *testing.T) {
	const n = 200
	orig := writeQueue(t, t.TempDir(), n)
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 40 {
		off := headerSize + rng.IntN(len(orig)-headerSize)
		t.Run(fmt.Sprint("offset-", off), func(t *testing.T) {
			dir := t.TempDir()
			b := append([]byte(nil), orig...)
			b[off] ^= byte(1 + rng.IntN(255))
			os.WriteFile(filepath.Join(dir, logName), b, 0o600)
			s, st := reopen(t, dir)
			got := queueLen(st)
			// The flipped byte is in the session record or in one message.
			if got < n-1 || got > n {
				t.Fatalf("trial %d: %d of %d messages after one flipped byte", trial, got, n)
			}
			if s.Stats().SkippedRecords != 1 || quarantined(t, dir) != 1 {
				t.Fatalf("stats %+v, quarantined %d", s.Stats(), quarantined(t, dir))
			}
		})
	}
}

// A torn tail (a power cut during a write) loses at most the torn record.
func TestTruncatedTail(t *testing.T) {
	const n = 50
	orig := writeQueue(t, t.TempDir(), n)
	for cut := len(orig) - 1; cut > len(orig)-60; cut -= 7 { // inside the last record (66 bytes)
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, logName), orig[:cut], 0o600)
		s, st := reopen(t, dir)
		if got := queueLen(st); got != n-1 {
			t.Fatalf("cut at %d of %d: %d messages, want %d", cut, len(orig), got, n-1)
		}
		if quarantined(t, dir) != 0 || s.Stats().SkippedBytes == 0 {
			t.Fatalf("a torn tail is not damage to quarantine: %+v", s.Stats())
		}
		s.Close()
		// Rewritten at Open: the next Open finds a clean file.
		s2, st2 := reopen(t, dir)
		if queueLen(st2) != n-1 || s2.Stats().SkippedBytes != 0 {
			t.Fatalf("after rewrite: %d messages, %+v", queueLen(st2), s2.Stats())
		}
		s2.Close()
	}
}

// A zeroed region (a lost flash page) costs the records it covers.
func TestZeroedRegion(t *testing.T) {
	const n = 200
	orig := writeQueue(t, t.TempDir(), n)
	dir := t.TempDir()
	b := append([]byte(nil), orig...)
	clear(b[len(b)/2 : len(b)/2+100]) // ~3 records of ~40 bytes
	os.WriteFile(filepath.Join(dir, logName), b, 0o600)
	_, st := reopen(t, dir)
	if got := queueLen(st); got < n-4 {
		t.Fatalf("%d of %d messages after 100 zeroed bytes", got, n)
	}
}

// A file that is not ours, or of a newer version, is moved aside and the
// broker starts empty rather than refusing.
func TestUnreadableFileQuarantined(t *testing.T) {
	for name, content := range map[string][]byte{
		"garbage":      []byte("this is not a state file at all"),
		"newer":        append([]byte("EGST\x09\x00\x00\x00"), make([]byte, 40)...),
		"short header": []byte("EGS"),
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, logName), content, 0o600)
			s, st := reopen(t, dir)
			if len(st.Sessions)+len(st.Retained) != 0 || quarantined(t, dir) != 1 || s.Stats().Quarantined != 1 {
				t.Fatalf("state %+v, stats %+v", st, s.Stats())
			}
			// And it works afterwards.
			s.Wait(s.RetainSet(Msg{Topic: "a", Payload: []byte("b")}))
			s.Close()
			_, st = reopen(t, dir)
			if len(st.Retained) != 1 {
				t.Fatalf("after quarantine: %+v", st)
			}
		})
	}
}

func TestOpenIsExclusive(t *testing.T) {
	dir := t.TempDir()
	reopen(t, dir)
	if _, _, err := Open(Options{Dir: dir}); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second Open: %v", err)
	}
}
