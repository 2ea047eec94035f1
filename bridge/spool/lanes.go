package spool

// Design note: priority lanes. One spool holds every lane: one ID
// sequence (the bridge derives upstream packet ids from record IDs, so
// lanes must not reuse each other's), one set of segments, one acks.log.
// Each record carries its lane in its flags (bits 4-5; segment format 2),
// and the spool keeps, per lane, the IDs of its live records in order, so
// Head finds a lane's next record without scanning the other lanes'
// records. A version 1 spool has no lane bits: every record is in the
// normal lane.
//
// When the spool is full (MaxBytes), the oldest message of the lowest
// lane goes first: bulk, then normal, then high.

import (
	"context"
	"fmt"
	"slices"
	"sort"
)

// Lane is a priority class of messages.
type Lane uint8

// The lanes, from the first sent to the last. NumLanes is their number.
const (
	LaneNormal Lane = 0 // also every record of a version 1 spool
	LaneHigh   Lane = 1
	LaneBulk   Lane = 2
	NumLanes        = 3
)

// ByPriority lists the lanes in the order they are served.
var ByPriority = [NumLanes]Lane{LaneHigh, LaneNormal, LaneBulk}

// String returns the lane's configuration name.
func (l Lane) String() string {
	switch l {
	case LaneHigh:
		return "high"
	case LaneNormal:
		return "normal"
	case LaneBulk:
		return "bulk"
	}
	return fmt.Sprintf("Lane(%d)", uint8(l))
}

// ParseLane parses "high", "normal" or "bulk"; "" is normal.
func ParseLane(s string) (Lane, error) {
	switch s {
	case "high":
		return LaneHigh, nil
	case "normal", "":
		return LaneNormal, nil
	case "bulk":
		return LaneBulk, nil
	}
	return 0, fmt.Errorf("unknown priority %q (want high, normal or bulk)", s)
}

const (
	flagLaneShift = 4
	flagLaneMask  = 3 << flagLaneShift
)

func laneOfFlags(flags byte) Lane { return Lane(flags&flagLaneMask) >> flagLaneShift }

// laneQueue is the IDs of a lane's records, ascending, from the oldest
// that may still be live (removed ones are trimmed from the front lazily).
type laneQueue struct {
	ids  []ID
	head int
}

func (q *laneQueue) push(id ID) { q.ids = append(q.ids, id) }

// trimLocked drops removed IDs from the front and returns the rest.
// Caller holds s.mu.
func (s *Spool) trimLocked(q *laneQueue) []ID {
	for q.head < len(q.ids) && s.removedLocked(q.ids[q.head]) {
		q.head++
	}
	if q.head > 1024 && q.head > len(q.ids)/2 {
		q.ids = append(q.ids[:0:0], q.ids[q.head:]...)
		q.head = 0
	}
	return q.ids[q.head:]
}

// removedLocked reports whether record id is gone. Caller holds s.mu.
func (s *Spool) removedLocked(id ID) bool {
	g, i := s.locateLocked(id)
	return g == nil || g.isRemoved(i)
}

// headLocked finds the oldest live record of lane with an ID above after
// that skip (if not nil) does not pass over. Caller holds s.mu.
func (s *Spool) headLocked(lane Lane, after ID, skip func(ID) bool) (recLoc, bool) {
	ids := s.trimLocked(&s.laneQ[lane])
	for k := sort.Search(len(ids), func(k int) bool { return ids[k] > after }); k < len(ids); k++ {
		if skip != nil && skip(ids[k]) {
			continue
		}
		if g, i := s.locateLocked(ids[k]); g != nil && !g.isRemoved(i) {
			if !s.flushPendingFor(g, i) {
				return recLoc{}, false // taken back: it was the newest
			}
			return s.locOfLocked(g, i), true
		}
	}
	return recLoc{}, false
}

// Head returns the oldest unacked message of lane with an ID above after,
// without waiting (ok false: none). Expired messages are dropped on the
// way, as by Next.
func (s *Spool) Head(lane Lane, after ID) (id ID, m Message, ok bool, err error) {
	return s.HeadSkipping(lane, after, nil)
}

// HeadSkipping is Head passing over the records skip reports: the
// caller's publishes in flight (the bridge's flows re-sent on connect).
// They are never read, so one whose expiry passed while it was in flight
// is not dropped as expired: its upstream ack removes it. skip is called
// with the spool's lock held and must not call the spool.
func (s *Spool) HeadSkipping(lane Lane, after ID, skip func(ID) bool) (id ID, m Message, ok bool, err error) {
	if lane >= NumLanes {
		return 0, m, false, fmt.Errorf("spool: no lane %d", lane)
	}
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return 0, m, false, ErrClosed
		}
		l, found := s.headLocked(lane, after, skip)
		s.mu.Unlock()
		if !found {
			return 0, m, false, nil
		}
		m, err := s.read(l)
		switch {
		case err != nil:
			s.readFailed(l, err)
		case s.expired(&m):
			s.drop(l.id, DropExpired)
			after = l.id
		default:
			return l.id, m, true, nil
		}
	}
}

// LastID returns the highest ID of a record written so far (0: none). A
// record still waiting for its commit write (pending.go) does not count:
// if that write fails its ID goes to the next append, and LastID must
// not go back (the bridge's picker takes LastID()+1 as the first ID of
// the records accepted during a connection).
func (s *Spool) LastID() ID {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pend.seg != nil {
		return s.pend.first - 1
	}
	return s.nextID - 1
}

// Changed returns a channel closed after the next append (or at Close):
// take it before looking with Head, wait on it if there was nothing, and
// no append is missed. With SyncBatch and SyncAlways it is closed when the
// group commit covering the append starts (within SyncInterval), so a
// waiter wakes once per batch of appends; with SyncNone at the append.
func (s *Spool) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	if s.notify == nil {
		s.notify = make(chan struct{})
	}
	return s.notify
}

// WakeOnChange is Changed for a waiter with a wake-up channel of its own
// (the bridge's picker): it arranges one send on ch, without blocking,
// when Changed's channel would be closed: at the next append's group
// commit (with SyncNone at the append), or at Close; at once if the spool
// is closed. Take it before looking with Head, wait on ch if there was
// nothing, and no append is missed. ch should have a capacity of 1: a
// send that would block is dropped, a wake-up is pending already. It
// costs no allocation, where Changed makes a channel per commit waited
// for (garbage at a sensor fleet's rate, issue 16). ch is forgotten
// after its send, so call WakeOnChange before each look, like Changed;
// calling it again before the send adds nothing.
func (s *Spool) WakeOnChange(ch chan<- struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		wake(ch)
		return
	}
	if !slices.Contains(s.wakeOnChange, ch) {
		s.wakeOnChange = append(s.wakeOnChange, ch)
	}
}

// ForgetWake takes ch off the list WakeOnChange put it on, for a waiter
// that stops waiting (the bridge's sender when its connection ends):
// otherwise it stays there until the next commit, and an idle spool
// behind a flapping uplink would gather one per reconnect.
func (s *Spool) ForgetWake(ch chan<- struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i := slices.Index(s.wakeOnChange, ch); i >= 0 {
		s.wakeOnChange = slices.Delete(s.wakeOnChange, i, i+1)
	}
}

// wake sends on ch unless a wake-up is pending there already.
func wake(ch chan<- struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// WaitAppend waits for the next append, Close or the end of ctx.
func (s *Spool) WaitAppend(ctx context.Context, changed <-chan struct{}) error {
	select {
	case <-changed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// victimLocked returns the record the overflow policy drops next: the
// oldest of the lowest non-empty lane. Caller holds s.mu and s.live > 0.
func (s *Spool) victimLocked() (*segment, int) {
	for k := NumLanes - 1; k >= 0; k-- {
		if ids := s.trimLocked(&s.laneQ[ByPriority[k]]); len(ids) > 0 {
			return s.locateLocked(ids[0])
		}
	}
	return s.oldestLocked()
}

// indexLanesLocked builds the lane queues from the segments (Open).
func (s *Spool) indexLanesLocked() {
	for _, g := range s.segs {
		for i := g.nextLive(0); i >= 0; i = g.nextLive(i + 1) {
			l := g.lanes[i]
			s.laneQ[l].push(g.base + ID(i))
			s.liveLane[l]++
		}
	}
}
