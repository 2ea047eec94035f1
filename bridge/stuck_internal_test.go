package bridge

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/edgegw/edgegw/gateway"
)

// TestStuckRecordStreak: the hint comes when stuckAfter connections in a
// row were ended by the peer with the same record the oldest
// unacknowledged one, is logged once per streak, keeps the topic and size
// of the connection that sent the record itself (later ones re-send it
// from the session without them), and anything else breaks the streak:
// another record first, an end the bridge caused, no record in flight.
func TestStuckRecordStreak(t *testing.T) {
	sent := inflight{id: 7, topic: "site/big", wire: 412}
	resent := inflight{id: 7} // re-sent on connect: topic and size unknown
	other := inflight{id: 8, topic: "site/small", wire: 40}
	type step struct {
		e     connEnd
		hint  bool
		first bool
	}
	peer := func(f inflight) connEnd { return connEnd{byPeer: true, oldest: f, held: true} }
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"same record three times", []step{{peer(sent), false, false}, {peer(resent), false, false},
			{peer(resent), true, true}, {peer(resent), true, false}, {peer(resent), true, false}}},
		{"another record breaks it", []step{{peer(sent), false, false}, {peer(resent), false, false},
			{peer(other), false, false}, {peer(sent), false, false}, {peer(resent), false, false}, {peer(resent), true, true}}},
		{"an end the bridge caused breaks it", []step{{peer(sent), false, false}, {peer(resent), false, false},
			{connEnd{oldest: resent, held: true}, false, false}, {peer(sent), false, false}, {peer(resent), false, false},
			{peer(resent), true, true}}},
		{"nothing in flight breaks it", []step{{peer(sent), false, false}, {peer(resent), false, false},
			{connEnd{byPeer: true}, false, false}, {peer(sent), false, false}}},
		{"the topic outlives a break", []step{{peer(sent), false, false}, {connEnd{oldest: resent, held: true}, false, false},
			{peer(resent), false, false}, {peer(resent), false, false}, {peer(resent), true, true}}},
		{"a new streak of the same record is logged again", []step{{peer(sent), false, false}, {peer(resent), false, false},
			{peer(resent), true, true}, {connEnd{byPeer: true}, false, false}, {peer(sent), false, false},
			{peer(resent), false, false}, {peer(resent), true, true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var w stuckRecord
			for i, s := range tc.steps {
				hint, first := w.ended(s.e)
				if (hint != "") != s.hint || first != s.first {
					t.Fatalf("connection %d: hint %q, first %v; want hint %v, first %v", i+1, hint, first, s.hint, s.first)
				}
				if hint != "" && (!strings.Contains(hint, "412 bytes, topic site/big") || !strings.Contains(hint, "bridges[].max_packet_size")) {
					t.Fatalf("connection %d: hint %q lacks the record's size and topic or the key", i+1, hint)
				}
			}
		})
	}
}

// TestNoteEndCountsOnlyThePeer: a connection counts towards the streak
// only if the peer ended it: not the stop, a reload, the ack watchdog or a
// write timeout during it (serveUplink's end, noteEnd), nor, for an
// attempt lost after its CONNACK (noteSetupLost), an answer the bridge
// gave up waiting for. A failure before the CONNACK is no connection and
// leaves the streak as it was.
func TestNoteEndCountsOnlyThePeer(t *testing.T) {
	b, err := New(Config{Name: "b", Addresses: []string{"tcp://127.0.0.1:1"}, CleanSession: true,
		Topics: []Rule{{Pattern: "#", Direction: Out}}}, nopGW{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	live := context.Background()
	stopped, cancel := context.WithCancel(live)
	cancel()
	lost := errors.New("read: connection reset by peer")
	served := func(ctx context.Context, why error, during func()) int {
		s := &uplink{b: b, oldest: inflight{id: 7, topic: "t", wire: 300}, waiting: true}
		trips, wt := b.trips.Load(), b.writeTimeouts.Load()
		if during != nil {
			during()
		}
		b.noteEnd(ctx, s, newFlowQueue(), why, trips, wt)
		return b.stuck.n
	}
	for _, tc := range []struct {
		name   string
		ctx    context.Context
		why    error
		during func()
		want   int // the streak after two peer-ended connections and this one
	}{
		{"by the peer", live, lost, nil, 3},
		{"the stop", stopped, errors.New("stopped"), nil, 0},
		{"a reload", live, errReload, nil, 0},
		{"the ack watchdog", live, errors.New("ack watchdog"), func() { b.trips.Add(1) }, 0},
		{"a write timeout", live, errors.New("write timeout"), func() { b.writeTimeouts.Add(1) }, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b.stuck = stuckRecord{}
			served(live, lost, nil)
			served(live, lost, nil)
			if n := served(tc.ctx, tc.why, tc.during); n != tc.want {
				t.Fatalf("streak %d, want %d", n, tc.want)
			}
		})
	}
	t.Run("lost in setup", func(t *testing.T) {
		b.stuck = stuckRecord{}
		served(live, lost, nil)
		e := &setupLost{err: lost, oldest: 7, held: true}
		if b.noteSetupLost(live, errors.New("dial: connection refused"), b.writeTimeouts.Load()); b.stuck.n != 1 {
			t.Fatalf("a failure before CONNACK changed the streak to %d", b.stuck.n)
		}
		if b.noteSetupLost(live, e, b.writeTimeouts.Load()); b.stuck.n != 2 {
			t.Fatalf("streak %d after an attempt lost in setup, want 2", b.stuck.n)
		}
		noAnswer := &setupLost{err: fmt.Errorf("subscribe: %w within 1s", errNoAnswer), oldest: 7, held: true}
		if b.noteSetupLost(live, noAnswer, b.writeTimeouts.Load()); b.stuck.n != 0 {
			t.Fatalf("streak %d after the bridge gave up waiting for a SUBACK, want 0", b.stuck.n)
		}
		// A request whose context's deadline passed gave up waiting too.
		served(live, lost, nil)
		served(live, lost, nil)
		noAnswer5 := &setupLost{err: fmt.Errorf("subscribe: %w", context.DeadlineExceeded), oldest: 7, held: true}
		if b.noteSetupLost(live, noAnswer5, b.writeTimeouts.Load()); b.stuck.n != 0 {
			t.Fatalf("streak %d after an MQTT 5 SUBACK not given in time, want 0", b.stuck.n)
		}
	})
}

type nopGW struct{}

func (nopGW) Publish(*gateway.Message) error             { return nil }
func (nopGW) AddSink(string, string, gateway.Sink) error { return nil }
func (nopGW) RemoveSink(string, string)                  {}
