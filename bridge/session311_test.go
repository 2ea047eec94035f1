package bridge

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"testing"

	"github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/edgegw/edgegw/bridge/spool"
)

func publishPacket(pid uint16, qos byte) *packets.PublishPacket {
	p := packets.NewControlPacket(packets.Publish).(*packets.PublishPacket)
	p.MessageID, p.Qos, p.TopicName = pid, qos, "t"
	return p
}

// TestUplinkStore walks the store through paho's calls for a few flows:
// announce+Put on Publish, PUBREC seen on the wire, resume on a new
// connection (All/Get), Del at PUBACK/PUBCOMP, Reset on a clean session.
func TestUplinkStore(t *testing.T) {
	var completed []spool.ID
	s := newUplinkStore(func(rec spool.ID) { completed = append(completed, rec) })

	// Three publishes; paho gives them ids out of record order.
	pids := map[spool.ID]uint16{7: 3, 8: 1, 9: 2}
	es := map[spool.ID]*outbound{}
	for _, rec := range []spool.ID{7, 8, 9} {
		e := s.announce(rec, wireID(rec))
		s.Put("o."+strconv.Itoa(int(pids[rec])), publishPacket(pids[rec], 2))
		if !s.taken(e) {
			t.Fatalf("record %d: not taken after Put", rec)
		}
		es[rec] = e
	}
	// A publish paho refused (no Put) is not taken, and the next Put does
	// not pick up its stale announcement.
	e := s.announce(10, wireID(10))
	if s.taken(e) {
		t.Fatal("record 10 taken without a Put")
	}
	s.Put("o.4", publishPacket(4, 1)) // no announcement: ignored
	s.Put("o.5", &packets.SubscribePacket{FixedHeader: packets.FixedHeader{MessageType: packets.Subscribe, Qos: 1}, MessageID: 5})
	s.Put("i.9", publishPacket(9, 2)) // inbound QoS 2 state is kept for paho

	if pid := s.pahoOf(wireID(8), true); pid != 1 { // record 8 reached the broker
		t.Fatalf("PUBREC for record 8's wire id maps to paho id %d, want 1", pid)
	}
	if pid := s.pahoOf(wireID(42), true); pid != 0 { // unknown: nothing happens
		t.Fatalf("unknown wire id maps to %d", pid)
	}
	if got := s.All(); !slices.Equal(got, []string{"o.3", "o.1", "o.2", "i.9"}) {
		t.Fatalf("All = %v, want outbound by record (7, 8, 9) then inbound", got)
	}
	if s.resumed.Load() != 3 {
		t.Fatalf("resumed = %d, want 3", s.resumed.Load())
	}
	if _, ok := s.Get("o.1").(*packets.PubrelPacket); !ok {
		t.Fatalf("record 8 after PUBREC: Get = %T, want the PUBREL", s.Get("o.1"))
	}
	if _, ok := s.Get("o.3").(*packets.PublishPacket); !ok {
		t.Fatalf("record 7: Get = %T, want the PUBLISH", s.Get("o.3"))
	}
	if s.Get("o.5") != nil || s.Get("o.4") != nil {
		t.Fatal("SUBSCRIBE or unannounced PUBLISH stored")
	}
	if rels := s.pendingPubrels(); len(rels) != 1 {
		t.Fatalf("%d pending PUBRELs, want 1", len(rels))
	}

	s.Del("o.1")
	s.Del("o.1") // twice: no second completion
	s.Del("i.9")
	select {
	case <-es[8].done:
	default:
		t.Fatal("record 8 not completed by Del")
	}
	if !slices.Equal(completed, []spool.ID{8}) {
		t.Fatalf("completed %v, want [8]", completed)
	}
	if got := s.pending(); len(got) != 2 || got[0].rec != 7 || got[1].rec != 9 {
		t.Fatalf("pending after Del: %v", got)
	}

	s.Reset() // clean session: dropped, not completed
	if s.len() != 0 || len(s.All()) != 0 || !slices.Equal(completed, []spool.ID{8}) {
		t.Fatalf("after Reset: %d entries, completed %v", s.len(), completed)
	}
	select {
	case <-es[7].done:
		t.Fatal("Reset completed record 7")
	default:
	}
}

func TestParseKey(t *testing.T) {
	for _, tc := range []struct {
		key     string
		inbound bool
		pid     uint16
		ok      bool
	}{
		{"o.1", false, 1, true},
		{"i.65535", true, 65535, true},
		{"o.0", false, 0, false},
		{"o.65536", false, 0, false},
		{"x.1", false, 0, false},
		{"o.", false, 0, false},
		{"o1", false, 0, false},
	} {
		in, pid, ok := parseKey(tc.key)
		if in != tc.inbound || pid != tc.pid || ok != tc.ok {
			t.Errorf("parseKey(%q) = %v %d %v, want %v %d %v", tc.key, in, pid, ok, tc.inbound, tc.pid, tc.ok)
		}
	}
}

// TestResumeWithoutBrokerSession: the connection's CONNACK, read through
// the ack rewriter in any split, tells the store whether the broker kept
// the session. With session present 1 All resumes the flows; with 0
// (broker restarted without persistence, a failover address) it resumes
// none and drops them without completing them, so their records are sent
// again as new messages instead of PUBRELs the new broker would complete
// with nothing. The next connection starts out assuming a session again.
func TestResumeWithoutBrokerSession(t *testing.T) {
	for _, tc := range []struct {
		name    string
		connack []byte
		resumed bool
	}{
		{"session present", []byte{0x20, 2, 1, 0}, true},
		{"no session", []byte{0x20, 2, 0, 0}, false},
	} {
		for split := 1; split <= len(tc.connack); split++ {
			t.Run(fmt.Sprintf("%s/reads of %d", tc.name, split), func(t *testing.T) {
				var completed []spool.ID
				s := newUplinkStore(func(rec spool.ID) { completed = append(completed, rec) })
				for _, rec := range []spool.ID{7, 8} {
					e := s.announce(rec, wireID(rec))
					s.Put("o."+strconv.Itoa(int(rec)), publishPacket(uint16(rec), 2))
					s.taken(e)
				}
				s.pahoOf(wireID(8), true) // record 8 is at its PUBREL
				s.connecting()
				r := ackRewriter{st: s}
				// The CONNACK, then a PUBACK that follows it in the stream.
				stream := append(slices.Clone(tc.connack), 0x40, 2, 0, 9)
				var out []byte
				for i := 0; i < len(stream); i += split {
					out = r.filter(stream[i:min(i+split, len(stream))], out)
				}
				if !bytes.Equal(out[:4], tc.connack) {
					t.Fatalf("the CONNACK reached paho as %x", out[:4])
				}
				keys := s.All()
				if tc.resumed {
					if !slices.Equal(keys, []string{"o.7", "o.8"}) || s.takeLostFlows() != 0 {
						t.Fatalf("All = %v with a session", keys)
					}
					return
				}
				if len(keys) != 0 || len(s.pending()) != 0 || len(completed) != 0 {
					t.Fatalf("no session: All = %v, pending %d, completed %v; want nothing resumed or completed", keys, len(s.pending()), completed)
				}
				if n := s.takeLostFlows(); n != 2 {
					t.Fatalf("lost flows %d, want 2", n)
				}
				s.connecting()
				if s.noSession {
					t.Fatal("the next connection starts without a session")
				}
			})
		}
	}
}
