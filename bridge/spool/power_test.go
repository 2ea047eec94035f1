package spool

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgegw/edgegw/internal/crashsim"
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

// The crash-state explorer (internal/crashsim) on the spool: a workload
// of appends, in-order and out-of-order acks, segment rotation and
// deletion, acks.log checkpoints and clean restarts runs through a
// recording FS; every disk state a power cut could leave is opened by the
// real Open and checked against what the workload was told:
//
//   - SyncAlways and SyncBatch: every message whose done reported it kept
//     before the cut, and not acked upstream before it, is there;
//   - every mode: nothing is invented (each message read back is one the
//     workload appended, under its ID, byte for byte); Open succeeds; an
//     append after it is kept across a clean restart; its ID is above
//     every ID the upstream acked before the cut.
//
// CRASHSIM_STATES sets the states per mode (make crashsim); the default
// is the sample every go test runs.

// cutMsg is what the workload knows of one message, with the marks
// (crashsim.Recorder.Len) of what it was told when.
type cutMsg struct {
	m     Message
	done  int // its done reported it kept (0: never)
	upAck int // just before it was acked upstream (0: never)
}

// reader marks each record as a reader (the bridge's sender) gets it:
// from then on it may be upstream, so its ID must never be handed out
// again. It stops when s closes.
func (w *crashWork) reader(s *Spool) (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		var after ID
		for {
			id, _, err := s.Next(context.Background(), after)
			if err != nil {
				return
			}
			mark := w.rec.Len()
			w.mu.Lock()
			if w.seen[id] == 0 {
				w.seen[id] = mark
			}
			w.mu.Unlock()
			after = id
		}
	}()
	return func() { <-done }
}

type crashWork struct {
	rec  *crashsim.Recorder
	opts Options
	mu   sync.Mutex
	msgs map[ID]*cutMsg
	seen map[ID]int // the mark when a reader got the record
}

// crashWorkload runs the workload (kind "segments": small segments,
// rotation and deletion; "acks": out-of-order acks and frequent acks.log
// checkpoints) and returns what it recorded.
func crashWorkload(t *testing.T, mode SyncMode, kind string, rounds int, plant ...func(*crashsim.Recorder)) *crashWork {
	t.Helper()
	// On tmpfs where there is one: the workload fsyncs often.
	dir, cleanup, err := crashsim.Scratch(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	w := &crashWork{rec: crashsim.NewRecorder(dir), msgs: map[ID]*cutMsg{}, seen: map[ID]int{}}
	for _, p := range plant {
		p(w.rec)
	}
	w.opts = Options{Dir: dir, Sync: mode, SyncInterval: time.Millisecond, MaxBytes: 1 << 30, SegmentSize: 1200}
	if kind == "acks" {
		w.opts.SegmentSize = 16 << 10
		w.opts.ackCompactMin = 200
	}
	rng := rand.New(rand.NewPCG(uint64(mode), 7))
	open := func() *Spool {
		o := w.opts
		o.FS = w.rec
		s, err := Open(o)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open()
	readerDone := w.reader(s)
	n := 0
	var unacked []ID
	for round := range rounds {
		var wg sync.WaitGroup
		batch := 2 + rng.IntN(6)
		for range batch {
			n++
			m := Message{Topic: fmt.Sprintf("t/%d", n), Payload: bytes.Repeat([]byte{byte(n)}, 10+rng.IntN(500)), QoS: byte(1 + n%2)}
			wg.Add(1)
			s.AppendAsync(m, func(id ID, err error) {
				defer wg.Done()
				if err != nil {
					t.Errorf("append: %v", err)
					return
				}
				mark := w.rec.Len()
				w.mu.Lock()
				w.msgs[id] = &cutMsg{m: m, done: mark}
				w.mu.Unlock()
			})
		}
		wg.Wait()
		w.mu.Lock()
		unacked = unacked[:0]
		for id, cm := range w.msgs {
			if cm.upAck == 0 {
				unacked = append(unacked, id)
			}
		}
		w.mu.Unlock()
		slices.Sort(unacked)
		// Ack the older half: in order for segments, shuffled for acks.
		k := len(unacked) / 2
		if kind == "acks" {
			rng.Shuffle(len(unacked), func(i, j int) { unacked[i], unacked[j] = unacked[j], unacked[i] })
		}
		for _, id := range unacked[:k] {
			w.mu.Lock()
			w.msgs[id].upAck = w.rec.Len()
			w.mu.Unlock()
			if err := s.Ack(id); err != nil {
				t.Fatal(err)
			}
		}
		if round%12 == 11 {
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			readerDone()
			s = open()
			readerDone = w.reader(s)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	readerDone()
	return w
}

// crashLoss is what one recovered state lost or brought back.
type crashLoss struct {
	lost    int // messages reported kept, not acked, missing
	resent  int // messages acked upstream before the cut, back
	present int
	path    string // the recovery path Open took (what it repaired)
}

// check opens the state in dir and returns what breaks a promise.
func (w *crashWork) check(dir string, st crashsim.State, loss *crashLoss) error {
	o := w.opts
	o.Dir, o.FS = dir, nil
	s, err := Open(o)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	rs := s.Stats()
	loss.path = fmt.Sprintf("tail=%t empty=%t quarantined=%t skipped=%t ackdamage=%t idgap=%t recovered=%t",
		rs.CorruptTail > 0, rs.EmptySegments > 0, rs.Quarantined > 0, rs.Skipped > 0, rs.AckDamage > 0, rs.IDGap > 0, rs.Recovered > 0)
	var es []Entry
	for after := ID(0); ; {
		got, err := s.Peek(after, 64)
		if err != nil {
			s.Close()
			return fmt.Errorf("peek: %w", err)
		}
		if len(got) == 0 {
			break
		}
		es = append(es, got...)
		after = got[len(got)-1].ID
	}
	have := map[ID]bool{}
	var upAcked ID // the highest ID a reader got (or the upstream acked) before the cut
	for id, mark := range w.seen {
		if mark <= st.Crash {
			upAcked = max(upAcked, id)
		}
	}
	for _, e := range es {
		cm := w.msgs[e.ID]
		if cm == nil || !equalMsg(cm.m, e.Message) {
			s.Close()
			return fmt.Errorf("id %d invented or changed: %q", e.ID, e.Message.Topic)
		}
		have[e.ID] = true
		if cm.upAck != 0 && cm.upAck <= st.Crash {
			loss.resent++
		}
	}
	loss.present = len(es)
	var lost []ID
	for id, cm := range w.msgs {
		if cm.upAck != 0 && cm.upAck <= st.Crash {
			upAcked = max(upAcked, id)
			continue
		}
		if cm.done != 0 && cm.done <= st.Crash && !have[id] {
			lost = append(lost, id)
		}
	}
	loss.lost = len(lost)
	if len(lost) > 0 && w.opts.Sync != SyncNone {
		slices.Sort(lost)
		s.Close()
		return fmt.Errorf("%d acknowledged messages lost: ids %v", len(lost), lost)
	}
	after := Message{Topic: "after/recovery", Payload: []byte("kept"), QoS: 1}
	id, err := s.Append(context.Background(), after)
	if err != nil {
		s.Close()
		return fmt.Errorf("append after recovery: %w", err)
	}
	if id <= upAcked {
		s.Close()
		return fmt.Errorf("id %d handed out again (a reader had up to %d)", id, upAcked)
	}
	if err := s.Close(); err != nil {
		return fmt.Errorf("close after recovery: %w", err)
	}
	s, err = Open(o)
	if err != nil {
		return fmt.Errorf("reopen after recovery: %w", err)
	}
	defer s.Close()
	if m, ok, err := s.Get(id); err != nil || !ok || !equalMsg(m, after) {
		return fmt.Errorf("the append after recovery (id %d) is not kept: %v %v", id, ok, err)
	}
	return nil
}

// TestPowerCutStates explores the crash states of the spool's workloads
// in each sync mode (see above) and reports the count in a line make
// crashsim sums.
func TestPowerCutStates(t *testing.T) {
	for _, kind := range []string{"segments", "acks"} {
		for _, mode := range []SyncMode{SyncAlways, SyncBatch, SyncNone} {
			t.Run(kind+"/"+mode.String(), func(t *testing.T) {
				// Enough crash points for the states asked for.
				w := crashWorkload(t, mode, kind, max(36, crashsim.Budget(t, 60)/6))
				tr := w.rec.Trace()
				var worst, lossy, resent, maxResent int
				paths := map[string]bool{}
				res, err := crashsim.Explore(tr, crashsim.Options{Max: crashsim.Budget(t, 60), Seed: uint64(mode) + 1}, "", 10,
					func(dir string, st crashsim.State) error {
						var l crashLoss
						err := w.check(dir, st, &l)
						worst = max(worst, l.lost)
						if l.lost > 0 {
							lossy++
						}
						resent += l.resent
						paths[l.path] = true
						maxResent = max(maxResent, l.resent)
						return err
					})
				if err != nil {
					t.Fatal(err)
				}
				log := "spool-" + kind
				fmt.Printf("crashsim-result: log=%s mode=%s ops=%d messages=%d states=%d distinct=%d paths=%d violations=%d lost_max=%d states_with_loss=%d resent_max=%d\n",
					log, mode, len(tr.Ops), len(w.msgs), res.States, res.Distinct, len(paths), len(res.Violations), worst, lossy, maxResent)
				for _, v := range res.Violations {
					t.Errorf("violation: %v\n%s", v, tr.Describe(v.State.Crash-8, v.State.Crash))
				}
			})
		}
	}
}

// The explorer catches a spool that breaks its own rules: bugs planted
// through the seam (the fsyncs are recorded as not done) must each
// produce violations, among them acknowledged messages lost (without
// its directory fsync the spool also loses its new ids file, and hands
// ids out again).
func TestPowerCutStatesCatchPlantedBugs(t *testing.T) {
	for _, bug := range []struct {
		name  string
		plant func(*crashsim.Recorder)
	}{
		// A new segment's name is not made durable: the cut loses the
		// whole file with its acknowledged records.
		{"no directory fsync", func(r *crashsim.Recorder) { r.DropSyncDir = true }},
		// Appends acknowledged before their segment's fsync.
		{"ack before fsync", func(r *crashsim.Recorder) {
			r.DropSync = func(name string) bool { return strings.HasSuffix(name, segSuffix) }
		}},
	} {
		t.Run(bug.name, func(t *testing.T) {
			w := crashWorkload(t, SyncBatch, "segments", 12, bug.plant)
			res, err := crashsim.Explore(w.rec.Trace(), crashsim.Options{Max: 300, Seed: 5}, "", 1000,
				func(dir string, st crashsim.State) error { return w.check(dir, st, &crashLoss{}) })
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Violations) == 0 {
				t.Fatalf("%d states explored, the planted bug went unnoticed", res.States)
			}
			i := slices.IndexFunc(res.Violations, func(v crashsim.Violation) bool {
				return strings.Contains(v.Err.Error(), "acknowledged messages lost")
			})
			if i < 0 {
				t.Fatalf("no acknowledged message lost among %d violations: %v", len(res.Violations), res.Violations[0])
			}
			t.Logf("%d violations in %d states, e.g. %v", len(res.Violations), res.States, res.Violations[i])
		})
	}
}
