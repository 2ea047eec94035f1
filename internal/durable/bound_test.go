package durable

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/edgegw/edgegw/internal/testutil"
)

// TestBoundRefuses: with StallRefuse a full bound refuses at once and
// takes nothing; a release makes room again.
func TestBoundRefuses(t *testing.T) {
	b := NewBound(3)
	ctx := context.Background()
	for range 3 {
		if err := b.Take(ctx, 1, StallRefuse); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Take(ctx, 1, StallRefuse); !errors.Is(err, ErrStalled) {
		t.Fatalf("full: %v, want ErrStalled", err)
	}
	if n, peak := b.Pending(); n != 3 || peak != 3 {
		t.Fatalf("pending %d, peak %d", n, peak)
	}
	b.Release(2)
	if err := b.Take(ctx, 2, StallRefuse); err != nil {
		t.Fatal(err)
	}
}

// TestBoundWaits: with StallWait a full bound blocks the appender until
// the flusher releases; the waiter is unblocked by the release, not by
// a timer.
func TestBoundWaits(t *testing.T) {
	b := NewBound(2)
	ctx := context.Background()
	if err := b.Take(ctx, 2, StallWait); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { got <- b.Take(ctx, 1, StallWait) }()
	select {
	case err := <-got:
		t.Fatalf("took from a full bound: %v", err)
	default:
	}
	b.Release(1)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if n, _ := b.Pending(); n != 2 {
		t.Fatalf("pending %d", n)
	}
}

// TestBoundWaitEnds: a waiter leaves on its context or on Close.
func TestBoundWaitEnds(t *testing.T) {
	b := NewBound(1)
	if err := b.Take(context.Background(), 1, StallWait); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 2)
	go func() { got <- b.Take(ctx, 1, StallWait) }()
	cancel()
	if err := <-got; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	go func() { got <- b.Take(context.Background(), 1, StallWait) }()
	testutil.Eventually(t, 5*time.Second, "a waiter", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.room != nil
	})
	b.Close()
	if err := <-got; !errors.Is(err, ErrClosed) {
		t.Fatalf("closed: %v", err)
	}
}

// TestBoundTakesOversizedAlone: one take larger than the bound fits when
// nothing else is pending.
func TestBoundTakesOversizedAlone(t *testing.T) {
	b := NewBound(2)
	if err := b.Take(context.Background(), 5, StallRefuse); err != nil {
		t.Fatal(err)
	}
	if err := b.Take(context.Background(), 1, StallRefuse); !errors.Is(err, ErrStalled) {
		t.Fatalf("%v", err)
	}
}
