package bridge

import (
	"strings"
	"testing"
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
