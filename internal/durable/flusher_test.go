package durable

import (
	"sync"
	"testing"
	"time"

	"github.com/edgegw/edgegw/internal/testutil"
)

// flushes records the calls of a Flusher's Flush.
type flushes struct {
	mu    sync.Mutex
	calls []bool
}

func (r *flushes) flush(final bool) {
	r.mu.Lock()
	r.calls = append(r.calls, final)
	r.mu.Unlock()
}

func (r *flushes) get() []bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]bool(nil), r.calls...)
}

// TestFlusherBatchHoldsTheWindow: in SyncBatch a kick opens a window of
// Interval; kicks during it join the same flush. With an hour's window
// nothing is flushed until Stop, which ends the window and flushes once,
// final.
func TestFlusherBatchHoldsTheWindow(t *testing.T) {
	var r flushes
	f := &Flusher{Mode: SyncBatch, Interval: time.Hour, Flush: r.flush}
	f.Start()
	for range 10 {
		f.Kick()
	}
	f.Stop()
	if got := r.get(); len(got) != 1 || !got[0] {
		t.Fatalf("flushes %v, want one final", got)
	}
}

// TestFlusherAlwaysEndsTheWindowForAWaiter: in SyncAlways the window
// ends as soon as someone waits, long before Interval.
func TestFlusherAlwaysEndsTheWindowForAWaiter(t *testing.T) {
	var r flushes
	var mu sync.Mutex
	waiting := false
	f := &Flusher{Mode: SyncAlways, Interval: time.Hour, Flush: r.flush,
		Waiting: func() bool { mu.Lock(); defer mu.Unlock(); return waiting }}
	f.Start()
	defer f.Stop()
	f.Kick()
	mu.Lock()
	waiting = true
	mu.Unlock()
	f.Kick()
	testutil.Eventually(t, 10*time.Second, "a flush for the waiter", func() bool {
		got := r.get()
		return len(got) == 1 && !got[0]
	})
}

// TestFlusherNoneAtOnce: with SyncNone and NoneAtOnce a kick flushes
// without a window.
func TestFlusherNoneAtOnce(t *testing.T) {
	var r flushes
	f := &Flusher{Mode: SyncNone, NoneAtOnce: true, Interval: time.Hour, Flush: r.flush}
	f.Start()
	defer f.Stop()
	f.Kick()
	testutil.Eventually(t, 10*time.Second, "a flush", func() bool { return len(r.get()) == 1 })
}

// TestFlusherDue: a flush owed at a time (Due) comes without a kick and
// without a window.
func TestFlusherDue(t *testing.T) {
	var r flushes
	var mu sync.Mutex
	at := time.Now()
	f := &Flusher{Mode: SyncBatch, Interval: time.Hour, Flush: func(final bool) {
		r.flush(final)
		mu.Lock()
		at = time.Time{} // paid
		mu.Unlock()
	}, Due: func() time.Time { mu.Lock(); defer mu.Unlock(); return at }}
	f.Start()
	testutil.Eventually(t, 10*time.Second, "the owed flush", func() bool { return len(r.get()) == 1 })
	f.Stop()
	if got := r.get(); len(got) != 2 || got[0] || !got[1] {
		t.Fatalf("flushes %v, want the owed one and the final one", got)
	}
}
