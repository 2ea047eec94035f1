package spool

// Garbage per message (issue 16). At a sensor fleet's rate (one reading
// per group commit, or a few) the spool's allocations per message set how
// often the bridge's GC runs. These tests count them on a real spool in a
// temporary directory, the flusher's included (AllocsPerRun counts every
// goroutine's): allocation counts are deterministic, so they assert an
// upper bound.

import (
	"testing"
	"time"
)

// A QoS 1 record through its group commit (SyncBatch), and its ack
// through the next, allocate nothing: the batch the appends join is one
// of two the spool keeps (it was a batch and its done channel per
// commit, and a new callback slice whenever the next append came before
// the flusher had given the last one back), and the ring's writes keep
// their completion's state in the ring (it was the state and the
// callback of the wait, per write).
func TestCommitAllocatesNothing(t *testing.T) {
	s := openT(t, Options{Dir: t.TempDir(), Sync: SyncBatch, SyncInterval: time.Millisecond})
	m := Message{Topic: "site-a/sensors/t", Payload: make([]byte, 100), QoS: 1}
	type result struct {
		id  ID
		err error
	}
	committed := make(chan result, 1)
	done := func(id ID, err error) { committed <- result{id, err} }
	n := testing.AllocsPerRun(500, func() {
		s.AppendAsync(m, done)
		r := <-committed
		if r.err != nil {
			t.Fatal(r.err)
		}
		if err := s.Ack(r.id); err != nil {
			t.Fatal(err)
		}
	})
	if n > 0 {
		t.Errorf("%.1f allocations per record appended, committed and acked, want 0", n)
	}
}

// A record read back (Head, as the bridge's picker reads) is one
// allocation: the record's bytes, which its topic and payload share (it
// was two, the topic's string and the payload's copy).
func TestReadIsOneAllocation(t *testing.T) {
	s := openT(t, Options{Dir: t.TempDir(), Sync: SyncNone})
	want := Message{Topic: "site-a/sensors/t", Payload: []byte("21.5 C"), QoS: 1, Lane: LaneNormal}
	s.AppendAsync(want, func(_ ID, err error) {
		if err != nil {
			t.Error(err)
		}
	})
	n := testing.AllocsPerRun(1000, func() {
		_, m, ok, err := s.Head(LaneNormal, 0)
		if !ok || err != nil || m.Topic != want.Topic || string(m.Payload) != string(want.Payload) {
			t.Fatalf("Head: %q %q ok %v err %v", m.Topic, m.Payload, ok, err)
		}
	})
	if n > 1 {
		t.Errorf("%.1f allocations per record read, want at most 1", n)
	}
}

// A reader woken by the commit through its own channel (WakeOnChange, as
// the bridge's picker waits) allocates nothing; Changed made a channel
// per commit.
func TestWakeOnChangeAllocatesNothing(t *testing.T) {
	s := openT(t, Options{Dir: t.TempDir(), Sync: SyncBatch, SyncInterval: time.Millisecond})
	m := Message{Topic: "site-a/sensors/t", Payload: make([]byte, 100), QoS: 1}
	committed := make(chan ID, 1)
	done := func(id ID, err error) {
		if err != nil {
			t.Error(err)
		}
		committed <- id
	}
	woken := make(chan struct{}, 1)
	n := testing.AllocsPerRun(500, func() {
		s.WakeOnChange(woken)
		s.AppendAsync(m, done)
		<-woken
		if err := s.Ack(<-committed); err != nil {
			t.Fatal(err)
		}
	})
	if n > 0 {
		t.Errorf("%.1f allocations per record appended, waited for, committed and acked, want 0", n)
	}
}

// A message read is its own: writing into its payload changes neither its
// topic nor the spool's copy, and later reads (which reuse the read-ahead
// block) do not change it.
func TestReadMessageOwnsItsBytes(t *testing.T) {
	s := openT(t, Options{Dir: t.TempDir(), Sync: SyncNone})
	for i := range 3 {
		s.AppendAsync(testMsg(i), func(_ ID, err error) {
			if err != nil {
				t.Error(err)
			}
		})
	}
	id, m, ok, err := s.Head(LaneNormal, 0)
	if !ok || err != nil {
		t.Fatalf("Head: ok %v err %v", ok, err)
	}
	for i := range m.Payload {
		m.Payload[i] = 0xff
	}
	m.Payload = append(m.Payload, 0xff) // beyond its capacity: a new array
	if _, _, ok, err := s.Head(LaneNormal, id); !ok || err != nil {
		t.Fatalf("Head after %d: ok %v err %v", id, ok, err)
	}
	if want := testMsg(0).Topic; m.Topic != want {
		t.Fatalf("topic %q after writing into the payload, want %q", m.Topic, want)
	}
	_, again, _, _ := s.Head(LaneNormal, 0)
	if string(again.Payload) != string(testMsg(0).Payload) {
		t.Fatalf("the spool's record changed with a message read from it: %x", again.Payload)
	}
}
