package spool

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// syncedImage follows a spool's fsyncs and builds what a power cut would
// leave at any moment: each file as it was at its last fsync, the bytes
// written after it gone, a file never fsynced gone. (A real cut may keep
// more of what was written; never less of what was fsynced.)
type syncedImage struct {
	dir  string
	mu   sync.Mutex
	size map[string]int64  // path -> bytes covered by its last fsync
	ids  map[string][]byte // the ids file is overwritten in place: its bytes then
}

func newSyncedImage(dir string) *syncedImage {
	return &syncedImage{dir: dir, size: map[string]int64{}, ids: map[string][]byte{}}
}

// synced is the spool's Options.synced hook.
func (m *syncedImage) synced(path string, size int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.size[path] = size
	if filepath.Base(path) == idsFileName {
		if b, err := os.ReadFile(path); err == nil {
			m.ids[path] = b
		}
	}
}

// cut writes the power-cut image to a new directory.
func (m *syncedImage) cut(t *testing.T) string {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	dst := t.TempDir()
	for path, size := range m.size {
		var b []byte
		if ids, ok := m.ids[path]; ok {
			b = ids
		} else {
			full, err := os.ReadFile(path)
			if err != nil {
				continue // deleted since (a segment all acked)
			}
			if size < 0 || size > int64(len(full)) {
				t.Fatalf("%s: synced size %d, file %d bytes", path, size, len(full))
			}
			b = full[:size]
		}
		if err := os.WriteFile(filepath.Join(dst, filepath.Base(path)), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// A power cut at any moment keeps every message the spool reported kept
// that the upstream had not acknowledged, with covered commits taking no
// fsync for the windows the upstream acknowledged in time; and after it
// no ID is handed out again that an ack on disk could name.
func TestPowerCutKeepsWhatWasReportedKept(t *testing.T) {
	dir := t.TempDir()
	img := newSyncedImage(dir)
	s := openT(t, Options{Dir: dir, Sync: SyncBatch, SyncInterval: 2 * time.Millisecond,
		SegmentSize: 4 << 10, synced: img.synced})
	// The upstream never acknowledges every 23rd record.
	a := startAcker(t, s, func(id ID) bool { return id%23 == 0 })
	rng := rand.New(rand.NewPCG(1, 2))

	var mu sync.Mutex
	kept := map[ID]bool{} // done(nil): the publisher was told
	var handedOut ID
	const cuts, windowsPerCut = 40, 1
	seq := 0
	for c := range cuts {
		for range windowsPerCut {
			n := 1 + rng.IntN(6)
			var wg sync.WaitGroup
			wg.Add(n)
			for range n {
				m := testMsg(seq)
				m.QoS = 1
				seq++
				s.AppendAsync(m, func(id ID, err error) {
					mu.Lock()
					if err == nil {
						kept[id] = true
					}
					handedOut = max(handedOut, id)
					mu.Unlock()
					wg.Done()
				})
			}
			waitWG(t, &wg, 30*time.Second)
			if rng.IntN(2) == 0 {
				time.Sleep(time.Duration(rng.IntN(4)) * time.Millisecond) // a sensor's pause
			}
		}

		// The cut: the files as their last fsyncs left them, now.
		mu.Lock()
		keptNow := make(map[ID]bool, len(kept))
		for id := range kept {
			keptNow[id] = true
		}
		maxID := handedOut
		mu.Unlock()
		cut := img.cut(t)
		s2, err := Open(Options{Dir: cut, Sync: SyncBatch})
		if err != nil {
			t.Fatalf("cut %d: open: %v", c, err)
		}
		live := map[ID]bool{}
		for _, e := range all(t, s2) {
			live[e.ID] = true
		}
		for id := range keptNow {
			if !live[id] && !a.wasAcked(id) {
				t.Errorf("cut %d: record %d was reported kept, never acked upstream, and is gone", c, id)
			}
		}
		st := s2.Stats()
		if l := st.Ledger; l.Sum() != l.Accepted {
			t.Errorf("cut %d: ledger does not add up: %+v", c, l)
		}
		id, err := s2.Append(t.Context(), testMsg(0))
		if err != nil {
			t.Fatalf("cut %d: append after the cut: %v", c, err)
		}
		if id <= maxID {
			t.Errorf("cut %d: id %d handed out again after the cut (ids up to %d were in use)", c, id, maxID)
		}
		s2.Close()
		if c%10 == 9 {
			t.Logf("cut %d: %d reported kept, %d live after the cut, %d covered commits so far", c, len(keptNow), len(live), s.Stats().CoveredCommits)
		}
	}
	if s.Stats().CoveredCommits == 0 {
		t.Error("no covered commit: the test did not reach what it is for")
	}
}
