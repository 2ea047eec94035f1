package spool

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// testClock is a clock the test moves.
type testClock struct{ ns atomic.Int64 }

func newTestClock() *testClock {
	c := &testClock{}
	c.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}
func (c *testClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *testClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// TestExpiredNeverServed: a message whose expiry passed is dropped (and
// counted as expired in the ledger) instead of being returned by Next or
// Peek; the expiry survives a reopen, and so does the count.
func TestExpiredNeverServed(t *testing.T) {
	dir := t.TempDir()
	clk := newTestClock()
	opts := Options{Dir: dir, Now: clk.now}
	s := openT(t, opts)
	for i := range 10 {
		m := testMsg(i + 1) // record i+1
		if i%2 == 0 {
			m.Expiry = clk.now().Add(time.Minute)
		}
		if _, err := s.Append(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()

	// Reopened before the expiry: every message is served, with it.
	s = openT(t, opts)
	es := all(t, s)
	if len(es) != 10 {
		t.Fatalf("%d entries", len(es))
	}
	for i, e := range es {
		want := time.Time{}
		if i%2 == 0 {
			want = clk.now().Add(time.Minute)
		}
		if !e.Message.Expiry.Equal(want) || !equalMsg(e.Message, testMsg(i+1)) {
			t.Fatalf("entry %d: %+v, expiry want %v", i, e.Message, want)
		}
	}
	clk.advance(time.Minute)
	// Next skips and drops the five expired ones.
	var got []ID
	var last ID
	for range 5 {
		id, m, err := s.Next(context.Background(), last)
		if err != nil {
			t.Fatal(err)
		}
		if !m.Expiry.IsZero() {
			t.Fatalf("Next returned an expired message %d", id)
		}
		got, last = append(got, id), id
	}
	checkEntries(t, all(t, s), got)
	l := s.Stats().Ledger
	checkLedger(t, l, Ledger{Accepted: 10, Live: 5, Dropped: map[DropReason]uint64{DropExpired: 5}})
	s.Close()

	s = openT(t, opts)
	defer s.Close()
	checkLedger(t, s.Stats().Ledger, l)
}

// TestDropCountsRefused: Drop removes a message under its reason.
func TestDropCountsRefused(t *testing.T) {
	s := openT(t, Options{Dir: t.TempDir()})
	defer s.Close()
	ids := appendN(t, s, 1, 3)
	if err := s.Drop(ids[1], DropRefused); err != nil {
		t.Fatal(err)
	}
	s.Drop(ids[1], DropRefused) // gone already: not counted twice
	checkLedger(t, s.Stats().Ledger, Ledger{Accepted: 3, Live: 2, Dropped: map[DropReason]uint64{DropRefused: 1}})
}

// TestGetReadsOnlyItsRecord: Get returns a live record, drops it if it
// expired, and for a record that is gone says so without reading (and
// dropping) the record after it, which may be in flight.
func TestGetReadsOnlyItsRecord(t *testing.T) {
	clk := newTestClock()
	s := openT(t, Options{Dir: t.TempDir(), Now: clk.now})
	ctx := context.Background()
	var ids []ID
	for i := range 3 {
		m := testMsg(i + 1)
		m.Expiry = clk.now().Add(time.Second)
		id, err := s.Append(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if m, ok, err := s.Get(ids[0]); err != nil || !ok || m.Topic != testMsg(1).Topic {
		t.Fatalf("Get(%d) = %q, %v, %v; want %q", ids[0], m.Topic, ok, err, testMsg(1).Topic)
	}
	if err := s.Ack(ids[0]); err != nil {
		t.Fatal(err)
	}
	clk.advance(2 * time.Second)
	if _, ok, err := s.Get(ids[0]); err != nil || ok {
		t.Fatalf("Get of an acked record: ok %v, err %v", ok, err)
	}
	if st := s.Stats(); st.Messages != 2 || st.Dropped[DropExpired] != 0 {
		t.Fatalf("after Get of a gone record: %d messages, %d expired; want 2, 0", st.Messages, st.Dropped[DropExpired])
	}
	if _, ok, err := s.Get(ids[1]); err != nil || ok {
		t.Fatalf("Get of an expired record: ok %v, err %v", ok, err)
	}
	if st := s.Stats(); st.Messages != 1 || st.Dropped[DropExpired] != 1 {
		t.Fatalf("after Get of an expired record: %d messages, %d expired; want 1, 1", st.Messages, st.Dropped[DropExpired])
	}
}
