package gateway_test

import (
	"testing"
	"time"

	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/internal/testutil"
)

// Two QoS 2 flows denied in flight (TestSecurityReloadReleasesStartedQoS2)
// resumed by a client whose Receive Maximum is 1: the resend stops at the
// window with the second flow already released, and goes on after the
// first PUBCOMP. Each flow is ended by one PUBREL, counted as one denied
// delivery (not once per pass over the window), and its payload charge is
// released exactly once: nothing is left queued or in flight.
func TestSecurityReleasedQoS2Window(t *testing.T) {
	b, files := secureBroker(t, false)
	const id = "alice-q2w"
	alice, _ := rawConnect(t, b.addr, packet.V5, id, false, loginKeep("alice", packet.V5))
	alice.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "shared/#", QoS: 2})
	bob, _ := rawConnect(t, b.addr, packet.V311, id+"-bob", true, login("bob"))
	publishFlow(t, bob, 2, "shared/public/x", "first")
	publishFlow(t, bob, 2, "shared/public/y", "second")
	want := map[uint16]bool{}
	for range 2 {
		p := alice.nextPublish(10 * time.Second)
		if p.QoS != 2 {
			t.Fatalf("alice got %q at QoS %d", p.Topic, p.QoS)
		}
		want[p.PacketID] = true
	}
	alice.close() // neither acknowledged
	testutil.Eventually(t, 10*time.Second, id+" offline", func() bool { _, d := sessions(b); return d == 1 })
	if st := b.srv.Stats(); st.Inflight != 2 || st.QueuedBytes == 0 {
		t.Fatalf("before the resume: %d in flight, %d bytes queued; want 2 and the payloads", st.Inflight, st.QueuedBytes)
	}
	denyPublic(t, files)
	before := b.srv.Stats().Denied["delivery"]

	alice, _ = rawConnect(t, b.addr, packet.V5, id, false, func(cp *packet.Connect) {
		loginKeep("alice", packet.V5)(cp)
		cp.Props.ReceiveMaximum = 1
		cp.Props.Set(packet.PropReceiveMaximum)
	})
	for len(want) > 0 {
		rel := expect[*packet.Pubrel](t, alice, 10*time.Second)
		if !want[rel.PacketID] {
			t.Fatalf("PUBREL for id %d, want one of %v", rel.PacketID, want)
		}
		delete(want, rel.PacketID)
		alice.send(&packet.Pubcomp{PacketID: rel.PacketID, ReasonCode: packet.ReasonCode(0x92)})
	}
	testutil.Eventually(t, 10*time.Second, "nothing in flight or queued", func() bool {
		st := b.srv.Stats()
		return st.Inflight == 0 && st.QueuedBytes == 0
	})
	if n := b.srv.Stats().Denied["delivery"]; n != before+2 {
		t.Fatalf("denied deliveries %d, want %d (one per flow)", n, before+2)
	}
	pub := bobPublisher(t, b, id+"-bob2")
	pub(2, "shared/end", "end")
	if got := untilMarker(t, alice, "shared/end"); len(got) != 0 {
		t.Fatalf("the resumed session was sent %q", got)
	}
}
