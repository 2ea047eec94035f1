package bridge

import (
	"context"
	"testing"

	"github.com/edgegw/edgegw/bridge/spool"
)

// The acker gets the flows in the order the sender pushed them, across
// the ring's growth and wrap, while both run.
func TestFlowQueueKeepsSendOrder(t *testing.T) {
	q := newFlowQueue()
	const n = 5000
	go func() {
		for i := range n {
			q.push(inflight{id: spool.ID(i + 1)})
		}
	}()
	for i := range n {
		f, ok := q.pop(context.Background())
		if !ok || f.id != spool.ID(i+1) {
			t.Fatalf("pop %d: id %d, ok %v", i, f.id, ok)
		}
	}
}

// pop waits for a flow and gives up when its context ends; a flow pushed
// before is still handed out.
func TestFlowQueuePopEndsWithContext(t *testing.T) {
	q := newFlowQueue()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan bool)
	go func() {
		_, ok := q.pop(ctx)
		done <- ok
	}()
	cancel()
	if <-done {
		t.Fatal("pop returned a flow from an empty queue")
	}
	q.push(inflight{id: 7})
	if f, ok := q.pop(ctx); !ok || f.id != 7 {
		t.Fatalf("a pushed flow after the end: id %d, ok %v", f.id, ok)
	}
}

// A queue that keeps a few flows in flight holds a small ring, not the
// window's maximum, and a push and pop in the steady state allocate
// nothing.
func TestFlowQueueSizedByUse(t *testing.T) {
	q := newFlowQueue()
	for i := range 10 {
		q.push(inflight{id: spool.ID(i)})
	}
	if len(q.buf) != 16 {
		t.Fatalf("ten flows in flight hold a ring of %d", len(q.buf))
	}
	ctx := context.Background()
	if a := testing.AllocsPerRun(100, func() {
		q.push(inflight{id: 1})
		q.pop(ctx)
	}); a != 0 {
		t.Fatalf("a push and pop allocate %.1f objects", a)
	}
}
