package spool

import (
	"context"
	"fmt"
	"testing"
)

// laneMsg is message i of lane l.
func laneMsg(l Lane, i int) Message {
	return Message{Topic: fmt.Sprintf("%s/%d", l, i), Payload: make([]byte, 50), QoS: 1, Lane: l}
}

// headAll returns a lane's messages as Head walks them.
func headAll(t *testing.T, s *Spool, l Lane) (ids []ID, topics []string) {
	t.Helper()
	var after ID
	for {
		id, m, ok, err := s.Head(l, after)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return ids, topics
		}
		if m.Lane != l {
			t.Fatalf("Head(%s) returned a message of lane %s", l, m.Lane)
		}
		ids, topics, after = append(ids, id), append(topics, m.Topic), id
	}
}

// TestLanesHead: each lane is its own FIFO in the one spool, across acks
// and a reopen, and the ledger adds up per lane.
func TestLanesHead(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, Options{Dir: dir, SegmentSize: 2048})
	lanes := []Lane{LaneBulk, LaneBulk, LaneNormal, LaneHigh, LaneBulk, LaneHigh, LaneNormal, LaneBulk}
	for round := range 20 {
		for i, l := range lanes {
			if _, err := s.Append(context.Background(), laneMsg(l, round*len(lanes)+i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	ids, _ := headAll(t, s, LaneBulk)
	for _, id := range ids[:30] { // the oldest 30 bulk messages delivered
		s.Ack(id)
	}
	s.Close()

	s = openT(t, Options{Dir: dir, SegmentSize: 2048})
	defer s.Close()
	want := map[Lane]int{LaneBulk: 80 - 30, LaneNormal: 40, LaneHigh: 40}
	for l, n := range want {
		ids, topics := headAll(t, s, l)
		if len(ids) != n {
			t.Fatalf("lane %s: %d messages, want %d", l, len(ids), n)
		}
		for k := 1; k < len(ids); k++ {
			if ids[k] <= ids[k-1] {
				t.Fatalf("lane %s out of order: %v", l, ids)
			}
		}
		if l == LaneBulk && topics[0] != "bulk/"+fmt.Sprint(8*7+4) { // the 31st bulk message
			t.Fatalf("bulk starts at %s", topics[0])
		}
	}
	ld := s.Stats().Ledger
	checkLedger(t, ld, Ledger{Accepted: 160, Delivered: 30, Live: 130, Dropped: map[DropReason]uint64{}})
	for l := range Lane(NumLanes) {
		ll := ld.Lanes[l]
		sum := ll.Delivered + ll.Live + ll.Unknown
		for _, n := range ll.Dropped {
			sum += n
		}
		if sum != ll.Accepted || ll.Live != uint64(want[l]) {
			t.Fatalf("lane %s: %+v", l, ll)
		}
	}
	if ld.Lanes[LaneBulk].Delivered != 30 || ld.Lanes[LaneBulk].Accepted != 80 {
		t.Fatalf("bulk lane %+v", ld.Lanes[LaneBulk])
	}
}

// TestOverflowDropsLowestLaneFirst: a full spool drops the oldest bulk
// message first, then normal, and high last.
func TestOverflowDropsLowestLaneFirst(t *testing.T) {
	m := laneMsg(LaneHigh, 0)
	size := int64(len(m.Topic) + len(m.Payload))
	s := openT(t, Options{Dir: t.TempDir(), MaxBytes: 10*size + size/2})
	defer s.Close()
	for i := range 4 {
		s.Append(context.Background(), laneMsg(LaneHigh, i))
		s.Append(context.Background(), laneMsg(LaneBulk, i))
	}
	s.Append(context.Background(), laneMsg(LaneNormal, 0))
	s.Append(context.Background(), laneMsg(LaneNormal, 1))
	// Full (10). Five more high messages push out the 4 bulk and 1 normal.
	for i := 4; i < 9; i++ {
		s.Append(context.Background(), laneMsg(LaneHigh, i))
	}
	ld := s.Stats().Ledger
	if ld.Lanes[LaneBulk].Dropped[DropSpoolFull] != 4 || ld.Lanes[LaneNormal].Dropped[DropSpoolFull] != 1 ||
		ld.Lanes[LaneHigh].Dropped[DropSpoolFull] != 0 || ld.Lanes[LaneHigh].Live != 9 {
		t.Fatalf("ledger %+v", ld.Lanes)
	}
	if _, topics := headAll(t, s, LaneNormal); len(topics) != 1 || topics[0] != "normal/1" {
		t.Fatalf("normal lane kept %v, want its newest", topics)
	}
}
