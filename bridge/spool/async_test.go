package spool

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// asyncResult records every done call of AppendAsync, checking each is
// called exactly once.
type asyncResult struct {
	id    ID
	err   error
	calls atomic.Int32
}

func (r *asyncResult) done(wg *sync.WaitGroup) func(ID, error) {
	return func(id ID, err error) {
		if r.calls.Add(1) == 1 {
			r.id, r.err = id, err
			wg.Done()
		}
	}
}

// Many AppendAsync calls from several goroutines: every done is called
// exactly once with nil, IDs grow in call order within a goroutine, and
// every record is there afterwards.
func TestAppendAsyncConcurrent(t *testing.T) {
	for _, mode := range []SyncMode{SyncBatch, SyncAlways, SyncNone} {
		t.Run(mode.String(), func(t *testing.T) {
			s := openT(t, Options{Dir: t.TempDir(), Sync: mode, SyncInterval: 5 * time.Millisecond, SegmentSize: 64 << 10})
			const workers, per = 8, 500
			res := make([][]asyncResult, workers)
			var wg sync.WaitGroup
			wg.Add(workers * per)
			var issuers sync.WaitGroup
			for w := range workers {
				res[w] = make([]asyncResult, per)
				issuers.Add(1)
				go func() {
					defer issuers.Done()
					for i := range per {
						s.AppendAsync(testMsg(w*per+i), res[w][i].done(&wg))
					}
				}()
			}
			issuers.Wait()
			waitWG(t, &wg, 30*time.Second)
			ids := map[ID]bool{}
			for w := range workers {
				var prev ID
				for i := range per {
					r := &res[w][i]
					if r.err != nil || r.id <= prev {
						t.Fatalf("worker %d call %d: id %d (previous %d), err %v", w, i, r.id, prev, r.err)
					}
					prev = r.id
					ids[r.id] = true
				}
			}
			if len(ids) != workers*per {
				t.Fatalf("%d distinct ids for %d appends", len(ids), workers*per)
			}
			es := all(t, s)
			if len(es) != workers*per {
				t.Fatalf("%d entries, want %d", len(es), workers*per)
			}
			for _, e := range es {
				if !ids[e.ID] {
					t.Fatalf("entry %d was not reported", e.ID)
				}
			}
			// Let a late duplicate call show up before counting.
			if mode != SyncNone {
				flushNow(s) // SyncInterval is short here
			}
			for w := range workers {
				for i := range per {
					if n := res[w][i].calls.Load(); n != 1 {
						t.Fatalf("worker %d call %d: done called %d times", w, i, n)
					}
				}
			}
		})
	}
}

func waitWG(t *testing.T, wg *sync.WaitGroup, d time.Duration) {
	t.Helper()
	ch := make(chan struct{})
	go func() { wg.Wait(); close(ch) }()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("not every done was called within %s", d)
	}
}

// A single caller is not limited to one message per commit window: 10k
// AppendAsync calls complete in a few windows with a few fsyncs.
func TestAppendAsyncSingleCaller(t *testing.T) {
	const interval = 20 * time.Millisecond
	const n = 10000
	s := openT(t, Options{Dir: t.TempDir(), Sync: SyncBatch, SyncInterval: interval, MaxBytes: 1 << 30})
	msg := Message{Topic: "site-a/sensors/temp/42", Payload: make([]byte, 256), QoS: 1}
	before := s.Stats().Syncs
	var wg sync.WaitGroup
	wg.Add(n)
	var failed atomic.Int32
	start := time.Now()
	for range n {
		s.AppendAsync(msg, func(_ ID, err error) {
			if err != nil {
				failed.Add(1)
			}
			wg.Done()
		})
	}
	waitWG(t, &wg, time.Minute)
	elapsed := time.Since(start)
	syncs := s.Stats().Syncs - before
	windows := float64(elapsed) / float64(interval)
	t.Logf("%d appends in %s = %.1f commit windows, %d fsyncs", n, elapsed, windows, syncs)
	if failed.Load() != 0 {
		t.Fatalf("%d appends failed", failed.Load())
	}
	// Synchronously this takes n windows. Allow a slow (-race, shared)
	// machine 50 times the handful it takes.
	if windows > n/50 {
		t.Fatalf("%d appends took %.0f commit windows", n, windows)
	}
	if syncs > n/50 {
		t.Fatalf("%d fsyncs for %d appends", syncs, n)
	}
}

// Immediate failures complete done at once with the error and ID 0.
func TestAppendAsyncErrors(t *testing.T) {
	s := openT(t, Options{Dir: t.TempDir(), MaxBytes: 100})
	call := func(m Message) (ID, error, int) {
		var id ID
		var err error
		calls := 0
		s.AppendAsync(m, func(i ID, e error) { id, err = i, e; calls++ })
		return id, err, calls
	}
	if id, err, n := call(Message{Topic: "t", Payload: make([]byte, 200)}); !errors.Is(err, ErrTooLarge) || id != 0 || n != 1 {
		t.Fatalf("too large: %d %v, %d calls", id, err, n)
	}
	if id, err, n := call(Message{Topic: "t", QoS: 3}); err == nil || id != 0 || n != 1 {
		t.Fatalf("qos 3: %d %v, %d calls", id, err, n)
	}
	if id, err, n := call(Message{Topic: strings.Repeat("a", maxTopicLen+1)}); !errors.Is(err, ErrTooLarge) || n != 1 {
		t.Fatalf("long topic: %d %v, %d calls", id, err, n)
	}
	s.Close()
	if id, err, n := call(Message{Topic: "t"}); !errors.Is(err, ErrClosed) || id != 0 || n != 1 {
		t.Fatalf("after Close: %d %v, %d calls", id, err, n)
	}
}

// Close completes the dones still waiting for a group commit: its final
// fsync covers them, so they succeed, and the records are there after a
// reopen.
func TestAppendAsyncClose(t *testing.T) {
	dir := t.TempDir()
	// A window far longer than the test: only Close can complete them.
	s, err := Open(Options{Dir: dir, Sync: SyncBatch, SyncInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	const n = 100
	res := make([]asyncResult, n)
	var wg sync.WaitGroup
	wg.Add(n)
	for i := range n {
		s.AppendAsync(testMsg(i), res[i].done(&wg))
	}
	for i := range res {
		if res[i].calls.Load() != 0 {
			t.Fatalf("done %d called before the group commit", i)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Every done has been called when Close returns.
	for i := range res {
		r := &res[i]
		if r.calls.Load() != 1 || r.err != nil || r.id != ID(i+1) {
			t.Fatalf("done %d: %d calls, id %d, err %v", i, r.calls.Load(), r.id, r.err)
		}
	}
	s = openT(t, Options{Dir: dir})
	if got := len(all(t, s)); got != n {
		t.Fatalf("%d entries after reopen, want %d", got, n)
	}
}

// A failed spool fails the dones of its group commit: nothing is
// reported durable that may not be.
func TestAppendAsyncSyncFailure(t *testing.T) {
	// A window long enough to inject the failure before the flush.
	s := openT(t, Options{Dir: t.TempDir(), Sync: SyncBatch, SyncInterval: 200 * time.Millisecond})
	type result struct {
		id  ID
		err error
	}
	ch := make(chan result, 2)
	done := func(id ID, err error) { ch <- result{id, err} }
	s.AppendAsync(testMsg(1), done)
	if r := <-ch; r.err != nil || r.id != 1 {
		t.Fatalf("first: %+v", r)
	}
	s.AppendAsync(testMsg(2), done)
	// As if the fsync of the pending record had failed (a closed file
	// reads as "segment deleted" to the flusher, so inject the failure).
	s.mu.Lock()
	s.failLocked(errors.New("injected fsync failure"))
	s.mu.Unlock()
	if r := <-ch; r.err == nil || r.id != 2 {
		t.Fatalf("done after a failed fsync: %+v", r)
	} else {
		t.Logf("failed fsync: %v", r.err)
	}
	s.AppendAsync(testMsg(3), done)
	if r := <-ch; r.err == nil || r.id != 0 {
		t.Fatalf("append on a failed spool: %+v", r)
	}
}

// A done may call back into the spool (it runs without spool locks).
func TestAppendAsyncReentrant(t *testing.T) {
	s := openT(t, Options{Dir: t.TempDir(), Sync: SyncBatch})
	ch := make(chan ID, 2)
	s.AppendAsync(testMsg(1), func(id ID, err error) {
		if err != nil {
			t.Error(err)
		}
		s.Ack(id)
		s.Stats()
		s.AppendAsync(testMsg(2), func(id ID, err error) { ch <- id })
		ch <- id
	})
	a, b := <-ch, <-ch
	if a != 1 || b != 2 {
		t.Fatalf("ids %d %d", a, b)
	}
	if es := all(t, s); len(es) != 1 || es[0].ID != 2 {
		t.Fatalf("entries %v", entryIDs(es))
	}
}

// A reader waiting for new records (the bridge's sender) is woken once per
// group commit, not per append: with SyncBatch nothing closes Changed
// until the flush starts, and it is closed before the batch's done
// callbacks run; with SyncNone it is closed by the append itself.
func TestChangedOncePerCommit(t *testing.T) {
	t.Run("batch, window still open", func(t *testing.T) {
		s := openT(t, Options{Dir: t.TempDir(), Sync: SyncBatch, SyncInterval: time.Hour})
		ch := s.Changed()
		for i := range 10 {
			s.AppendAsync(testMsg(i), func(ID, error) {})
		}
		select {
		case <-ch:
			t.Fatal("Changed closed by an append before the group commit started")
		default:
		}
		if _, _, ok, err := s.Head(LaneNormal, 0); !ok || err != nil {
			t.Fatalf("Head before the commit: ok %v err %v; records are readable once written", ok, err)
		}
	})
	t.Run("batch, closed by the flush before done", func(t *testing.T) {
		s := openT(t, Options{Dir: t.TempDir(), Sync: SyncBatch, SyncInterval: 5 * time.Millisecond})
		ch := s.Changed()
		var wg sync.WaitGroup
		wg.Add(1)
		var closedAtDone atomic.Bool
		s.AppendAsync(testMsg(1), func(_ ID, err error) {
			select {
			case <-ch:
				closedAtDone.Store(true)
			default:
			}
			wg.Done()
		})
		waitWG(t, &wg, 10*time.Second)
		if !closedAtDone.Load() {
			t.Fatal("Changed still open when the group commit reported the record durable")
		}
		// The next record closes the next channel, with an ack in between.
		ch = s.Changed()
		if err := s.Ack(1); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		s.AppendAsync(testMsg(2), func(ID, error) { wg.Done() })
		waitWG(t, &wg, 10*time.Second)
		select {
		case <-ch:
		default:
			t.Fatal("Changed not closed by the commit of a new record")
		}
	})
	t.Run("none", func(t *testing.T) {
		s := openT(t, Options{Dir: t.TempDir(), Sync: SyncNone, SyncInterval: time.Hour})
		ch := s.Changed()
		s.AppendAsync(testMsg(1), func(ID, error) {})
		select {
		case <-ch:
		default:
			t.Fatal("SyncNone: Changed not closed by the append")
		}
	})
}

// A waiter that stopped (ForgetWake) is neither woken nor kept: the
// list does not grow with reconnects on an idle spool.
func TestForgetWake(t *testing.T) {
	s := openT(t, Options{Dir: t.TempDir(), Sync: SyncBatch, SyncInterval: time.Millisecond})
	gone, kept := make(chan struct{}, 1), make(chan struct{}, 1)
	for range 100 { // a sender per reconnect, each forgotten as it ends
		ch := make(chan struct{}, 1)
		s.WakeOnChange(ch)
		s.ForgetWake(ch)
	}
	s.WakeOnChange(gone)
	s.WakeOnChange(kept)
	s.ForgetWake(gone)
	s.mu.Lock()
	n := len(s.wakeOnChange)
	s.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d waiters registered, want 1 (the one not forgotten)", n)
	}
	if _, err := s.Append(context.Background(), testMsg(1)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-gone:
		t.Fatal("a forgotten waiter was woken")
	default:
	}
	select {
	case <-kept:
	default:
		t.Fatal("the waiter left was not woken by the commit")
	}
}

// WakeOnChange wakes its channel when Changed's would be closed: not at
// an append whose commit has not started, at the commit before its done,
// once per registration (a second registration before the commit adds
// nothing), and at Close; at once on a closed spool.
func TestWakeOnChange(t *testing.T) {
	pending := func(ch chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	t.Run("batch, window still open", func(t *testing.T) {
		s := openT(t, Options{Dir: t.TempDir(), Sync: SyncBatch, SyncInterval: time.Hour})
		ch := make(chan struct{}, 1)
		s.WakeOnChange(ch)
		for i := range 10 {
			s.AppendAsync(testMsg(i), func(ID, error) {})
		}
		if pending(ch) {
			t.Fatal("woken by an append before the group commit started")
		}
		s.Close()
		if !pending(ch) {
			t.Fatal("not woken by Close")
		}
		s.WakeOnChange(ch)
		if !pending(ch) {
			t.Fatal("not woken at once on a closed spool")
		}
	})
	t.Run("batch, woken by the flush before done", func(t *testing.T) {
		s := openT(t, Options{Dir: t.TempDir(), Sync: SyncBatch, SyncInterval: 5 * time.Millisecond})
		ch := make(chan struct{}, 1)
		s.WakeOnChange(ch)
		s.WakeOnChange(ch) // adds nothing
		var wg sync.WaitGroup
		wg.Add(1)
		var wokenAtDone atomic.Bool
		s.AppendAsync(testMsg(1), func(_ ID, err error) {
			wokenAtDone.Store(pending(ch))
			wg.Done()
		})
		waitWG(t, &wg, 10*time.Second)
		if !wokenAtDone.Load() {
			t.Fatal("not woken when the group commit reported the record durable")
		}
		s.mu.Lock()
		left := len(s.wakeOnChange)
		s.mu.Unlock()
		if left != 0 {
			t.Fatalf("%d registrations left after the wake-up, want 0", left)
		}
		// Forgotten after its send: the next commit wakes only a channel
		// registered again.
		wg.Add(1)
		s.AppendAsync(testMsg(2), func(ID, error) { wg.Done() })
		waitWG(t, &wg, 10*time.Second)
		if pending(ch) {
			t.Fatal("woken again without a new registration")
		}
		s.WakeOnChange(ch)
		wg.Add(1)
		s.AppendAsync(testMsg(3), func(ID, error) { wg.Done() })
		waitWG(t, &wg, 10*time.Second)
		if !pending(ch) {
			t.Fatal("not woken by the commit of a new record")
		}
	})
	t.Run("none", func(t *testing.T) {
		s := openT(t, Options{Dir: t.TempDir(), Sync: SyncNone, SyncInterval: time.Hour})
		ch := make(chan struct{}, 1)
		s.WakeOnChange(ch)
		s.AppendAsync(testMsg(1), func(ID, error) {})
		if !pending(ch) {
			t.Fatal("SyncNone: not woken by the append")
		}
	})
}
