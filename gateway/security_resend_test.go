package gateway_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/edgegw/edgegw/gateway/auth"
	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/internal/testutil"
)

// denyPublic reloads the ACL with shared/public/# denied to alice.
func denyPublic(t *testing.T, files *auth.Files) {
	t.Helper()
	acl := strings.Replace(issue13ACL, "topic deny shared/secret/#", "topic deny shared/secret/#\ntopic deny shared/public/#", 1)
	if err := os.WriteFile(files.ACLFile, []byte(acl), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := files.Load(); err != nil {
		t.Fatal(err)
	}
}

// publishFlow publishes body on topic at qos (1 or 2) as packet id 1 and
// completes the flow.
func publishFlow(t *testing.T, c *rawClient, qos byte, topic, body string) {
	t.Helper()
	c.send(&packet.Publish{QoS: qos, PacketID: 1, Topic: topic, Payload: []byte(body)})
	if qos == 1 {
		expect[*packet.Puback](t, c, 10*time.Second)
		return
	}
	expect[*packet.Pubrec](t, c, 10*time.Second)
	c.send(&packet.Pubrel{PacketID: 1})
	expect[*packet.Pubcomp](t, c, 10*time.Second)
}

// A QoS 1 message sent to a persistent session but not yet acknowledged
// when its connection dropped is not sent again after a reload denied its
// topic: the resend is a delivery, and authorization holds for every
// delivery.
func TestSecurityReloadDeniesInflightResend(t *testing.T) {
	b, files := secureBroker(t, false)
	alice, _ := inflightAfterDrop(t, b, "alice-if", 1)
	denyPublic(t, files)
	pub := bobPublisher(t, b, "alice-if-bob2")
	pub(2, "shared/end", "end")
	alice, _ = rawConnect(t, b.addr, packet.V311, "alice-if", false, login("alice"))
	if got := untilMarker(t, alice, "shared/end"); len(got) != 0 {
		t.Fatalf("after a reload denying shared/public/#, the resumed session was sent %q again", got)
	}
}

// A QoS 2 flow started before the same reload is not sent again either:
// the resumed session gets a PUBREL for its packet id instead of the
// PUBLISH (the client may hold the id until a PUBREL [MQTT-4.3.3-10],
// [MQTT-4.3.3-2](3.1.1), and would drop a later message under it as a
// duplicate, so the flow is ended, not dropped), the client's PUBCOMP ends
// it, and the session goes on. The denied resend is counted.
func TestSecurityReloadReleasesStartedQoS2(t *testing.T) {
	for _, v := range []packet.Version{packet.V311, packet.V5} {
		t.Run(v.String(), func(t *testing.T) {
			b, files := secureBroker(t, false)
			id := "alice-q2-" + v.String()
			_, pid := inflightAfterDrop(t, b, id, 2, v)
			denyPublic(t, files)
			before := b.srv.Stats().Denied["delivery"]
			alice, _ := rawConnect(t, b.addr, v, id, false, loginKeep("alice", v))
			rel := expect[*packet.Pubrel](t, alice, 10*time.Second)
			if rel.PacketID != pid {
				t.Fatalf("PUBREL for id %d, want the started flow's %d", rel.PacketID, pid)
			}
			comp := &packet.Pubcomp{PacketID: pid}
			if v == packet.V5 {
				comp.ReasonCode = packet.ReasonCode(0x92) // Packet Identifier not found: it never got the PUBLISH
			}
			alice.send(comp)
			if n := b.srv.Stats().Denied["delivery"]; n != before+1 {
				t.Fatalf("denied deliveries %d, want %d", n, before+1)
			}
			pub := bobPublisher(t, b, id+"-bob2")
			pub(2, "shared/end", "end")
			if got := untilMarker(t, alice, "shared/end"); len(got) != 0 {
				t.Fatalf("after a reload denying shared/public/#, the resumed session was sent %q", got)
			}
			testutil.Eventually(t, 10*time.Second, "nothing in flight", func() bool { return b.srv.Stats().Inflight == 0 })
			// Ended for good: a session resumed once more is sent no
			// PUBREL (nor PUBLISH) for it before the next message.
			alice.close()
			testutil.Eventually(t, 10*time.Second, id+" offline", func() bool { _, d := sessions(b); return d == 1 })
			alice, _ = rawConnect(t, b.addr, v, id, false, loginKeep("alice", v))
			pub(3, "shared/end", "end")
			if got := untilMarker(t, alice, "shared/end"); len(got) != 0 {
				t.Fatalf("the second resume was sent %q", got)
			}
		})
	}
}

// loginKeep is login for a persistent session: over MQTT 5 with a session
// expiry, so that it outlives its connection as a 3.1.1 one does.
func loginKeep(name string, v packet.Version) func(*packet.Connect) {
	return func(cp *packet.Connect) {
		login(name)(cp)
		if v == packet.V5 {
			cp.Props.SessionExpiry = 3600
			cp.Props.Set(packet.PropSessionExpiry)
		}
	}
}

// inflightAfterDrop leaves one message on shared/public/x in flight to
// the persistent session id at qos: sent, never acknowledged, its
// connection (of version v, default 3.1.1) dropped. It returns the dropped
// client and the packet id the message went out with.
func inflightAfterDrop(t *testing.T, b *broker, id string, qos byte, v ...packet.Version) (*rawClient, uint16) {
	t.Helper()
	ver := packet.V311
	if len(v) > 0 {
		ver = v[0]
	}
	alice, _ := rawConnect(t, b.addr, ver, id, false, loginKeep("alice", ver))
	alice.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "shared/#", QoS: qos})
	bob, _ := rawConnect(t, b.addr, packet.V311, id+"-bob", true, login("bob"))
	publishFlow(t, bob, qos, "shared/public/x", "sent-before-reload")
	p := alice.nextPublish(10 * time.Second)
	if p.Topic != "shared/public/x" || p.QoS != qos {
		t.Fatalf("alice got %q at QoS %d", p.Topic, p.QoS)
	}
	alice.close() // no acknowledgement: the message stays in flight
	testutil.Eventually(t, 10*time.Second, id+" offline", func() bool { _, d := sessions(b); return d == 1 })
	return alice, p.PacketID
}

// A QoS 2 flow past its PUBREC is finished after the same reload: the
// PUBREL carries no message, the client holds the packet id until it
// comes, so it is sent again as the protocol requires [MQTT-4.4.0-1].
func TestSecurityReloadKeepsPubrelResend(t *testing.T) {
	b, files := secureBroker(t, false)
	alice, _ := rawConnect(t, b.addr, packet.V311, "alice-rel", false, login("alice"))
	alice.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "shared/#", QoS: 2})
	bob, _ := rawConnect(t, b.addr, packet.V311, "bob-rel", true, login("bob"))
	publishFlow(t, bob, 2, "shared/public/x", "delivered")
	p := alice.nextPublish(10 * time.Second)
	alice.send(&packet.Pubrec{PacketID: p.PacketID})
	expect[*packet.Pubrel](t, alice, 10*time.Second)
	alice.close() // no PUBCOMP: the PUBREL stays in flight
	testutil.Eventually(t, 10*time.Second, "alice-rel offline", func() bool { _, d := sessions(b); return d == 1 })

	denyPublic(t, files)
	alice, _ = rawConnect(t, b.addr, packet.V311, "alice-rel", false, login("alice"))
	if rel := expect[*packet.Pubrel](t, alice, 10*time.Second); rel.PacketID != p.PacketID {
		t.Fatalf("PUBREL for id %d, want %d", rel.PacketID, p.PacketID)
	}
	alice.send(&packet.Pubcomp{PacketID: p.PacketID})
}

// The same after a restart with the changed ACL: a QoS 1 message that
// was in flight is restored to the session's queue (its send was not
// recorded) and is not delivered either.
func TestSecurityRestartDeniesInflightResend(t *testing.T) {
	dir := t.TempDir()
	b, _ := secureBrokerState(t, false, nil, dir, nil)
	inflightAfterDrop(t, b, "alice-ifr", 1)
	b.stop()

	b, files := secureBrokerState(t, false, nil, dir, nil)
	denyPublic(t, files)
	pub := bobPublisher(t, b, "alice-ifr-bob2")
	pub(2, "shared/end", "end")
	alice, _ := rawConnect(t, b.addr, packet.V311, "alice-ifr", false, login("alice"))
	if got := untilMarker(t, alice, "shared/end"); len(got) != 0 {
		t.Fatalf("after a restart with shared/public/# denied, the restored session was sent %q again", got)
	}
}

// The same after a restart with the changed ACL: the QoS 2 flow restored
// in flight (its packet id was recorded) is ended with a PUBREL, and that
// is recorded too: a second restart before the PUBCOMP sends the PUBREL
// again, never the PUBLISH.
func TestSecurityRestartReleasesStartedQoS2(t *testing.T) {
	dir := t.TempDir()
	b, _ := secureBrokerState(t, false, nil, dir, nil)
	_, pid := inflightAfterDrop(t, b, "alice-q2r", 2)
	b.stop()

	b, files := secureBrokerState(t, false, nil, dir, nil)
	denyPublic(t, files)
	alice, _ := rawConnect(t, b.addr, packet.V311, "alice-q2r", false, login("alice"))
	if rel := expect[*packet.Pubrel](t, alice, 10*time.Second); rel.PacketID != pid {
		t.Fatalf("PUBREL for id %d, want the started flow's %d", rel.PacketID, pid)
	}
	alice.close() // no PUBCOMP
	testutil.Eventually(t, 10*time.Second, "alice-q2r offline", func() bool { _, d := sessions(b); return d == 1 })
	b.stop()

	b, _ = secureBrokerState(t, false, nil, dir, nil)
	alice, _ = rawConnect(t, b.addr, packet.V311, "alice-q2r", false, login("alice"))
	if rel := expect[*packet.Pubrel](t, alice, 10*time.Second); rel.PacketID != pid {
		t.Fatalf("after a second restart: PUBREL for id %d, want %d", rel.PacketID, pid)
	}
	alice.send(&packet.Pubcomp{PacketID: pid})
	pub := bobPublisher(t, b, "alice-q2r-bob2")
	pub(2, "shared/end", "end")
	if got := untilMarker(t, alice, "shared/end"); len(got) != 0 {
		t.Fatalf("the restored session was sent %q", got)
	}
}
