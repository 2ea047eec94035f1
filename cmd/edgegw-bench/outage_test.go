package main

import (
	"encoding/binary"
	"sync/atomic"
	"testing"
	"time"
)

// payload is a message of publisher idx, number seq, sent at sent since base.
func payload(sent time.Duration, idx, seq uint32) []byte {
	b := make([]byte, minPayload)
	binary.BigEndian.PutUint64(b, uint64(sent))
	binary.BigEndian.PutUint32(b[8:], idx)
	binary.BigEndian.PutUint32(b[12:], seq)
	return b
}

// TestOutageRxCounts: the upstream subscriber's view counts each backlog
// and live message once, their duplicates (QoS 2 ones apart), malformed
// payloads, and times only the live messages sent after the bridge's
// connection through the link.
func TestOutageRxCounts(t *testing.T) {
	base := time.Now().Add(-time.Minute)
	var upAt atomic.Int64
	upAt.Store(base.Add(10 * time.Second).UnixNano())
	rx := &outageRx{base: base, upAt: &upAt, isQoS2: func(seq uint32) bool { return seq%2 == 0 }, live2: true,
		seen: make([]bool, 4), liveRx: map[uint32]bool{}}
	var backlogHooks, liveHooks, others int
	rx.onBacklog = func(time.Duration) { backlogHooks++ }
	rx.onLive = func(now, sent, lat time.Duration) {
		liveHooks++
		if lat != now-sent || sent < 10*time.Second {
			t.Errorf("live hook: sent %v, latency %v at %v", sent, lat, now)
		}
	}
	rx.onOther = func(idx uint32, _, _ time.Duration) bool { others++; return idx == 2 }
	for _, p := range [][]byte{
		payload(0, 0, 1), payload(0, 0, 2), payload(0, 0, 3),
		payload(0, 0, 1), payload(0, 0, 2), // duplicates: one QoS 1, one QoS 2
		payload(0, 0, 4),             // out of the backlog's range: the scenario's, or malformed
		payload(5*time.Second, 1, 1), // live, sent before the connection: not timed
		payload(20*time.Second, 1, 2), payload(30*time.Second, 1, 3),
		payload(30*time.Second, 1, 3), // a live QoS 2 duplicate
		payload(0, 2, 1),              // the scenario's own
		{1, 2, 3},                     // too short
	} {
		rx.publish(p)
	}
	if got := rx.backlog.Load(); got != 3 || backlogHooks != 3 {
		t.Errorf("backlog %d (hook %d), want 3", got, backlogHooks)
	}
	if got := rx.liveN.Load(); got != 3 || rx.live.Count() != 2 || liveHooks != 2 {
		t.Errorf("live %d, timed %d (hook %d), want 3, 2", got, rx.live.Count(), liveHooks)
	}
	if rx.dups != 3 || rx.dups2 != 2 {
		t.Errorf("dups %d (QoS 2 %d), want 3 (2)", rx.dups, rx.dups2)
	}
	if rx.malformed != 2 || others != 2 {
		t.Errorf("malformed %d, others %d, want 2, 2", rx.malformed, others)
	}
	if rx.lastNs < 50*time.Second {
		t.Errorf("last backlog arrival %v after base, want about a minute", rx.lastNs)
	}
}
