package spool

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// upstreamAcker does what the bridge does with the spool over a link that
// keeps up: it reads each record as the spool hands it out and acks it at
// once, unless withhold says the upstream never acknowledges it.
type upstreamAcker struct {
	mu    sync.Mutex
	acked map[ID]bool
	seen  int
	stop  context.CancelFunc
	done  chan struct{}
}

func startAcker(t *testing.T, s *Spool, withhold func(ID) bool) *upstreamAcker {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	a := &upstreamAcker{acked: map[ID]bool{}, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(a.done)
		var after ID
		for {
			id, _, err := s.Next(ctx, after)
			if err != nil {
				return // ctx ended or the spool closed
			}
			after = id
			ack := !withhold(id)
			a.mu.Lock()
			a.seen++
			if ack {
				a.acked[id] = true // before the Ack, so before any done it allows
			}
			a.mu.Unlock()
			if ack {
				if err := s.Ack(id); err != nil && !errors.Is(err, ErrClosed) {
					t.Errorf("Ack %d: %v", id, err)
				}
			}
		}
	}()
	t.Cleanup(a.close)
	return a
}

func (a *upstreamAcker) close() { a.stop(); <-a.done }

func (a *upstreamAcker) wasAcked(id ID) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.acked[id]
}

// waitSeen waits until the acker has handled n records.
func (a *upstreamAcker) waitSeen(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		a.mu.Lock()
		seen := a.seen
		a.mu.Unlock()
		if seen >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the acker handled %d of %d records", seen, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// windowDone is one AppendAsync completion with what was true when it
// came: whether the upstream had acked the record, and the spool's fsyncs
// since the record was appended.
type windowDone struct {
	id          ID
	err         error
	acked       bool
	syncsSince  uint64
	coveredThen uint64
}

// commitWindow appends n QoS 1 records in one commit window and waits for
// their dones.
func commitWindow(t *testing.T, s *Spool, a *upstreamAcker, from, n int) []windowDone {
	t.Helper()
	out := make([]windowDone, n)
	var wg sync.WaitGroup
	wg.Add(n)
	before := s.Stats().Syncs
	for i := range n {
		m := testMsg(from + i)
		m.QoS = 1
		s.AppendAsync(m, func(id ID, err error) {
			// Called without the spool's locks: Stats is safe here.
			st := s.Stats()
			out[i] = windowDone{id, err, a.wasAcked(id), st.Syncs - before, st.CoveredCommits}
			wg.Done()
		})
	}
	waitWG(t, &wg, 30*time.Second)
	return out
}

// With an upstream that acknowledges every window before its commit ends,
// the commits after the first need no fsync at all, every publisher is
// still told its message is kept, and what a kill -9 leaves of the files
// (the page cache) holds the acks: nothing comes back as undelivered.
func TestCoveredCommitNeedsNoFsync(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, Options{Dir: dir, Sync: SyncBatch, SyncInterval: 2 * time.Millisecond,
		coverGrace: time.Minute, coverMaxAge: time.Hour})
	a := startAcker(t, s, func(ID) bool { return false })

	const per, windows = 5, 10
	for _, d := range commitWindow(t, s, a, 0, per) {
		if d.err != nil {
			t.Fatalf("first window: %d: %v", d.id, d.err)
		}
	}
	// Every window is acked whole before the next one starts: the
	// flusher saw the last one acknowledged in time.
	a.waitSeen(t, per)
	waitLive(t, s, 0)
	// The first window's acks came after its commit and start a flush of
	// their own, which may still be due now. A covered window first: its
	// acks all come during its commit's wait, so when its dones are in,
	// no flush is due.
	commitWindow(t, s, a, per, per)
	a.waitSeen(t, 2*per)
	waitLive(t, s, 0)
	st0 := s.Stats()
	for w := 2; w <= windows+1; w++ {
		for _, d := range commitWindow(t, s, a, w*per, per) {
			if d.err != nil || !d.acked {
				t.Fatalf("window %d: record %d done with %v, acked upstream %v", w, d.id, d.err, d.acked)
			}
		}
		a.waitSeen(t, (w+1)*per)
		waitLive(t, s, 0)
		// Sensors pause between readings: an idle gap of several commit
		// windows, in which the acks that came during the commit's wait
		// must not start a flush of their own (it would fsync).
		time.Sleep(10 * time.Millisecond)
	}
	st := s.Stats()
	// At least one per window: on a busy machine a window's appends may
	// straddle two commits, both covered.
	if got := st.CoveredCommits - st0.CoveredCommits; got < windows {
		t.Errorf("%d covered commits in %d windows the upstream acked in time", got, windows)
	}
	if st.Syncs != st0.Syncs {
		t.Errorf("%d fsyncs for %d covered windows, want 0", st.Syncs-st0.Syncs, windows)
	}
	// kill -9 now: the files as they are (the page cache survives a
	// crash) reopen with every message delivered.
	img := copyDir(t, dir)
	s2 := openT(t, Options{Dir: img, Sync: SyncBatch})
	st2 := s2.Stats()
	if l := st2.Ledger; st2.Messages != 0 || l.Sum() != l.Accepted || l.Delivered != (windows+2)*per {
		t.Fatalf("after kill -9: %d messages live (want 0), ledger %+v", st2.Messages, l)
	}
}

// A window the upstream does not acknowledge whole is fsynced before its
// publishers are told, however the windows around it went: for every
// done, the record was acked upstream or an fsync came after its append.
func TestUncoveredWindowIsFsynced(t *testing.T) {
	s := openT(t, Options{Dir: t.TempDir(), Sync: SyncBatch, SyncInterval: 2 * time.Millisecond,
		coverGrace: 100 * time.Millisecond, coverMaxAge: time.Hour})
	// Every fourth window has a record the upstream never acknowledges.
	const per, windows = 4, 24
	withheld := map[ID]bool{}
	var wmu sync.Mutex
	a := startAcker(t, s, func(id ID) bool {
		wmu.Lock()
		defer wmu.Unlock()
		return withheld[id]
	})
	st0 := s.Stats()
	for w := range windows {
		if w%4 == 3 {
			wmu.Lock()
			withheld[s.nextIDForTest()+1] = true
			wmu.Unlock()
		}
		for _, d := range commitWindow(t, s, a, w*per, per) {
			if d.err != nil {
				t.Fatalf("window %d: record %d: %v", w, d.id, d.err)
			}
			if !d.acked && d.syncsSince == 0 {
				t.Fatalf("window %d: record %d reported kept with no ack upstream and no fsync", w, d.id)
			}
		}
		a.waitSeen(t, (w+1)*per)
		waitLive(t, s, int64(len(withheld)))
	}
	st := s.Stats()
	if st.CoveredCommits == st0.CoveredCommits {
		t.Errorf("no covered commit in %d windows, %d of them acked whole", windows, windows-windows/4)
	}
}

// Acks of records outside the window (a backlog the upstream takes at
// last) do not cover it: the flusher waits for this window's own records.
// The window's one record is never acked; the backlog is acked while the
// flusher waits for it, and Close ends the wait: its publisher must then
// be told only after an fsync.
func TestCoverCountsOnlyItsWindow(t *testing.T) {
	s := openT(t, Options{Dir: t.TempDir(), Sync: SyncBatch, SyncInterval: 2 * time.Millisecond,
		coverGrace: time.Hour, coverMaxAge: time.Hour})
	var wmu sync.Mutex
	withheld := map[ID]bool{}
	withhold := func(from ID, n int) {
		wmu.Lock()
		defer wmu.Unlock()
		for i := range n {
			withheld[from+ID(i)] = true
		}
	}
	a := startAcker(t, s, func(id ID) bool {
		wmu.Lock()
		defer wmu.Unlock()
		return withheld[id]
	})
	// The backlog: a window the upstream does not take (fsynced).
	const backlog = 5
	first := s.nextIDForTest() + 1
	withhold(first, backlog)
	commitWindow(t, s, a, 0, backlog)
	a.waitSeen(t, backlog)
	// A window acked in time, so that the next commit waits.
	commitWindow(t, s, a, backlog, 3)
	a.waitSeen(t, backlog+3)
	waitLive(t, s, backlog)

	x := s.nextIDForTest() + 1
	withhold(x, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	var got windowDone
	before := s.Stats().Syncs
	s.AppendAsync(Message{Topic: "t", Payload: []byte("x"), QoS: 1}, func(id ID, err error) {
		got = windowDone{id: id, err: err, acked: a.wasAcked(id), syncsSince: s.Stats().Syncs - before}
		wg.Done()
	})
	// The acker has x: its commit has started, and waits for x's ack.
	a.waitSeen(t, backlog+4)
	for i := range backlog {
		if err := s.Ack(first + ID(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	waitWG(t, &wg, 30*time.Second)
	if got.id != x || got.err != nil {
		t.Fatalf("done(%d, %v), want (%d, nil)", got.id, got.err, x)
	}
	if got.acked || got.syncsSince == 0 {
		t.Fatalf("record %d reported kept with no ack upstream (acked %v) and %d fsyncs since its append",
			x, got.acked, got.syncsSince)
	}
}

// When the messages stop after a covered commit, a full commit still
// comes within coverMaxAge of the last one: the covered windows' records
// and acks do not wait on disk unsynced for the next message, which may
// be hours away.
func TestCoveredCommitSyncedWhenIdle(t *testing.T) {
	s := openT(t, Options{Dir: t.TempDir(), Sync: SyncBatch, SyncInterval: 2 * time.Millisecond,
		coverGrace: time.Hour, coverMaxAge: 200 * time.Millisecond})
	a := startAcker(t, s, func(ID) bool { return false })
	// One record a window: a window's appends cannot straddle two
	// commits, so the last commit of the loop below is the covered one.
	const per = 1
	deadline := time.Now().Add(30 * time.Second)
	var before uint64 // the fsyncs when the covered commit called its done
	for w := 0; s.Stats().CoveredCommits == 0; w++ {
		if time.Now().After(deadline) {
			t.Fatalf("no covered commit in %d windows", w)
		}
		b0 := s.Stats().Syncs
		d := commitWindow(t, s, a, w*per, per)
		before = b0 + d[0].syncsSince
		a.waitSeen(t, (w+1)*per)
		waitLive(t, s, 0)
	}
	// Idle now. The covered commit left its segment and acks.log
	// unsynced: the full commit fsyncs both, the segment first (the ids
	// file has nothing new). before was read by the done, on the flusher,
	// so the full commit cannot have come before it.
	deadline = time.Now().Add(10 * time.Second)
	for {
		s.mu.Lock()
		unsynced := len(s.unsynced)
		s.mu.Unlock()
		if unsynced == 0 && s.Stats().Syncs-before >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("idle for 10 s after a covered commit (cover max age 200 ms): %d segments unsynced, %d fsyncs",
				unsynced, s.Stats().Syncs-before)
		}
		time.Sleep(time.Millisecond)
	}
}

// A window the upstream has not acknowledged by the next commit makes
// that commit fsync at once, without waiting for its acks, even though
// the windows before were acknowledged in time.
func TestNoCoverWaitAfterUnackedWindow(t *testing.T) {
	const maxAge = 300 * time.Millisecond
	s := openT(t, Options{Dir: t.TempDir(), Sync: SyncBatch, SyncInterval: 2 * time.Millisecond,
		coverGrace: time.Hour, coverMaxAge: maxAge})
	var wmu sync.Mutex
	withheld := map[ID]bool{}
	withhold := func() ID {
		wmu.Lock()
		defer wmu.Unlock()
		id := s.nextIDForTest() + 1
		withheld[id] = true
		return id
	}
	a := startAcker(t, s, func(id ID) bool {
		wmu.Lock()
		defer wmu.Unlock()
		return withheld[id]
	})
	// One record a window, so that a window is one commit. Acked in
	// time (the grace is an hour): the next commit would wait ...
	commitWindow(t, s, a, 0, 1)
	a.waitSeen(t, 1)
	waitLive(t, s, 0)
	// ... but it comes after the age bound, so it does not: a window
	// fsynced at once, which the upstream does not ack. The age is
	// counted from the end of the flush that took window 0's acks (its
	// fsync may still run when they are taken: a margin for it).
	deadline := time.Now().Add(30 * time.Second)
	for {
		s.mu.Lock()
		taken := len(s.acks) == 0
		s.mu.Unlock()
		if taken {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("window 0's acks not taken by a flush")
		}
		time.Sleep(time.Millisecond)
	}
	for t0 := time.Now(); time.Since(t0) <= maxAge+700*time.Millisecond; {
		time.Sleep(10 * time.Millisecond) // the time must pass; nothing to poll
	}
	withhold()
	if d := commitWindow(t, s, a, 1, 1); d[0].err != nil || d[0].syncsSince == 0 {
		t.Fatalf("window 1: done %v after %d fsyncs", d[0].err, d[0].syncsSince)
	}
	a.waitSeen(t, 2)
	// The next commit: the window before is not acked, so it does not
	// wait. Its record is acked (by the test) only once its commit has
	// started; had the commit waited, the ack would cover it.
	y := withhold()
	var wg sync.WaitGroup
	wg.Add(1)
	var got windowDone
	before := s.Stats().Syncs
	s.AppendAsync(Message{Topic: "t", Payload: []byte("y"), QoS: 1}, func(id ID, err error) {
		got = windowDone{id: id, err: err, syncsSince: s.Stats().Syncs - before}
		wg.Done()
	})
	a.waitSeen(t, 3) // handed out: its commit has started
	if err := s.Ack(y); err != nil {
		t.Fatal(err)
	}
	waitWG(t, &wg, 30*time.Second)
	if got.id != y || got.err != nil || got.syncsSince == 0 {
		t.Fatalf("window 2: done(%d, %v) after %d fsyncs; want (%d, nil) after an fsync",
			got.id, got.err, got.syncsSince, y)
	}
}

// The age bound: with coverMaxAge passed at every commit, no commit is
// covered, however promptly the upstream acks.
func TestCoveredCommitAgeBound(t *testing.T) {
	s := openT(t, Options{Dir: t.TempDir(), Sync: SyncBatch, SyncInterval: 2 * time.Millisecond,
		coverGrace: time.Minute, coverMaxAge: time.Nanosecond})
	a := startAcker(t, s, func(ID) bool { return false })
	const per = 3
	for w := range 6 {
		before := s.Stats().Syncs
		for _, d := range commitWindow(t, s, a, w*per, per) {
			if d.err != nil {
				t.Fatalf("window %d: %v", w, d.err)
			}
		}
		if s.Stats().Syncs == before {
			t.Fatalf("window %d: no fsync", w)
		}
		a.waitSeen(t, (w+1)*per)
		waitLive(t, s, 0)
	}
	if n := s.Stats().CoveredCommits; n != 0 {
		t.Fatalf("%d covered commits past the age bound", n)
	}
}

// Close while the flusher waits for an upstream ack that never comes: the
// wait ends, the window is fsynced and its dones get nil.
func TestCloseDuringCoverWait(t *testing.T) {
	s := openT(t, Options{Dir: t.TempDir(), Sync: SyncBatch, SyncInterval: 2 * time.Millisecond,
		coverGrace: time.Hour, coverMaxAge: time.Hour})
	acking := true
	var amu sync.Mutex
	a := startAcker(t, s, func(ID) bool {
		amu.Lock()
		defer amu.Unlock()
		return !acking
	})
	commitWindow(t, s, a, 0, 3)
	a.waitSeen(t, 3)
	waitLive(t, s, 0)
	for w := 1; w <= 2; w++ { // waited for: the window before was acked in time
		commitWindow(t, s, a, w*3, 3)
		a.waitSeen(t, (w+1)*3)
		waitLive(t, s, 0)
	}
	if s.Stats().CoveredCommits == 0 {
		t.Fatal("no covered commit before the test's point")
	}
	amu.Lock()
	acking = false
	amu.Unlock()
	var wg sync.WaitGroup
	wg.Add(1)
	var got error = errors.New("not called")
	s.AppendAsync(Message{Topic: "t", Payload: []byte("x"), QoS: 1}, func(_ ID, err error) {
		got = err
		wg.Done()
	})
	a.waitSeen(t, 10) // the flusher is waiting for its ack now (or soon)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	waitWG(t, &wg, 30*time.Second)
	if got != nil {
		t.Fatalf("done after Close: %v, want nil (fsynced by the final flush)", got)
	}
}

// waitLive waits until the spool holds n live records.
func waitLive(t *testing.T, s *Spool, n int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for s.Stats().Messages != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d live records, want %d", s.Stats().Messages, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// nextIDForTest is the ID the next append gets, less one.
func (s *Spool) nextIDForTest() ID {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nextID - 1
}
