package session

import (
	"testing"
	"time"
)

// TestChangedOnlyForWaiters: a flow's end (or a freed id) wakes a waiting
// publisher, and makes no channel while nobody waits: at a sensor fleet's
// rate nobody does, and a channel per flow was a fifth of the engine's
// garbage per reading.
func TestChangedOnlyForWaiters(t *testing.T) {
	e, err := New(Config{WriteTimeout: time.Second, AckTimeout: time.Second, ConnectTimeout: time.Second}, NewMemStore())
	if err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if n := testing.AllocsPerRun(100, e.changedLocked); n != 0 || e.changed != nil {
		t.Fatalf("a change with nobody waiting: %.0f allocations, channel %v", n, e.changed)
	}
	ch := e.changedChLocked()
	if again := e.changedChLocked(); again != ch {
		t.Fatal("two waiters got different channels")
	}
	e.changedLocked()
	select {
	case <-ch:
	default:
		t.Fatal("the waiter was not woken")
	}
	if e.changedChLocked() == ch {
		t.Fatal("the next waiter got the closed channel")
	}
}
