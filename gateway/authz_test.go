package gateway_test

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/auth"
	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/internal/testutil"
)

// Authorization on delivery (authz.go) holds for every message delivered,
// under the rules in force when it is delivered: a message that waited in
// a session's queue, or in flight to it, across a reload (or a restart
// with a changed ACL) is checked again as it leaves the queue and when it
// is resent.

// A reload that denies a topic applies to the messages already queued for
// an offline session: "authorization holds for every message delivered"
// (docs/security.md), and a message queued under the old rules is
// delivered after the reload, under the new ones. Found in review, when a
// message was checked only as it was routed.
func TestSecurityReloadDeniesQueuedMessages(t *testing.T) {
	b, files := secureBroker(t, false)
	pub := queuedForOffline(t, b, "alice-rq", "queued-before-reload")
	denyPublic(t, files)
	pub(2, "shared/end", "end")
	alice, _ := rawConnect(t, b.addr, packet.V311, "alice-rq", false, login("alice"))
	nothingBeforeMarker(t, alice, "after a reload denying shared/public/#, alice's resumed session")
}

// The same after a restart with the changed ACL: the queue restored from
// the state store is delivered under the rules in force.
func TestSecurityRestartDeniesRestoredQueue(t *testing.T) {
	dir := t.TempDir()
	b, _ := secureBrokerState(t, false, nil, dir, nil)
	pub := queuedForOffline(t, b, "alice-rs", "queued-before-restart")
	pub(2, "shared/end", "end")
	b.stop()

	b, files := secureBrokerState(t, false, nil, dir, nil)
	denyPublic(t, files)
	alice, _ := rawConnect(t, b.addr, packet.V311, "alice-rs", false, login("alice"))
	nothingBeforeMarker(t, alice, "after a restart with shared/public/# denied, alice's restored session")
}

// queuedForOffline leaves body, published by bob on shared/public/x at
// QoS 1, queued for alice's persistent session id while it is offline. It
// returns bob's publisher for more.
func queuedForOffline(t *testing.T, b *broker, id, body string) func(pid uint16, topic, body string) {
	t.Helper()
	alice := aliceOnShared(t, b, packet.V311, id, false, 1)
	alice.disconnect()
	waitOneOffline(t, b, id+" offline")
	pub := bobPublisher(t, b, id+"-bob")
	pub(1, "shared/public/x", body)
	return pub
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
	nothingBeforeMarker(t, alice, "after a reload denying shared/public/#, the resumed session")
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
			nothingBeforeMarker(t, alice, "after a reload denying shared/public/#, the resumed session")
			testutil.Eventually(t, 10*time.Second, "nothing in flight", func() bool { return b.srv.Stats().Inflight == 0 })
			// Ended for good: a session resumed once more is sent no
			// PUBREL (nor PUBLISH) for it before the next message.
			alice.close()
			waitOneOffline(t, b, id+" offline")
			alice, _ = rawConnect(t, b.addr, v, id, false, loginKeep("alice", v))
			pub(3, "shared/end", "end")
			nothingBeforeMarker(t, alice, "the second resume")
		})
	}
}

// A QoS 2 flow past its PUBREC is finished after the same reload: the
// PUBREL carries no message, the client holds the packet id until it
// comes, so it is sent again as the protocol requires [MQTT-4.4.0-1].
func TestSecurityReloadKeepsPubrelResend(t *testing.T) {
	b, files := secureBroker(t, false)
	alice := aliceOnShared(t, b, packet.V311, "alice-rel", false, 2)
	bob, _ := rawConnect(t, b.addr, packet.V311, "bob-rel", true, login("bob"))
	publishFlow(t, bob, 2, "shared/public/x", "delivered")
	p := alice.nextPublish(10 * time.Second)
	alice.send(&packet.Pubrec{PacketID: p.PacketID})
	expect[*packet.Pubrel](t, alice, 10*time.Second)
	alice.close() // no PUBCOMP: the PUBREL stays in flight
	waitOneOffline(t, b, "alice-rel offline")

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
	nothingBeforeMarker(t, alice, "after a restart with shared/public/# denied, the restored session")
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
	waitOneOffline(t, b, "alice-q2r offline")
	b.stop()

	b, _ = secureBrokerState(t, false, nil, dir, nil)
	alice, _ = rawConnect(t, b.addr, packet.V311, "alice-q2r", false, login("alice"))
	if rel := expect[*packet.Pubrel](t, alice, 10*time.Second); rel.PacketID != pid {
		t.Fatalf("after a second restart: PUBREL for id %d, want %d", rel.PacketID, pid)
	}
	alice.send(&packet.Pubcomp{PacketID: pid})
	pub := bobPublisher(t, b, "alice-q2r-bob2")
	pub(2, "shared/end", "end")
	nothingBeforeMarker(t, alice, "the restored session")
}

// denyPublic reloads the ACL with shared/public/# denied to alice.
func denyPublic(t *testing.T, files *auth.Files) {
	t.Helper()
	acl := strings.Replace(securityACL, "topic deny shared/secret/#", "topic deny shared/secret/#\ntopic deny shared/public/#", 1)
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

// aliceOnShared connects alice as id, a clean or a persistent session,
// subscribed to the wide filter shared/# at qos.
func aliceOnShared(t *testing.T, b *broker, v packet.Version, id string, clean bool, qos byte) *rawClient {
	t.Helper()
	opts := loginKeep("alice", v)
	if clean {
		opts = login("alice")
	}
	alice, _ := rawConnect(t, b.addr, v, id, clean, opts)
	alice.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "shared/#", QoS: qos})
	return alice
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
	alice := aliceOnShared(t, b, ver, id, false, qos)
	bob, _ := rawConnect(t, b.addr, packet.V311, id+"-bob", true, login("bob"))
	publishFlow(t, bob, qos, "shared/public/x", "sent-before-reload")
	p := alice.nextPublish(10 * time.Second)
	if p.Topic != "shared/public/x" || p.QoS != qos {
		t.Fatalf("alice got %q at QoS %d", p.Topic, p.QoS)
	}
	alice.close() // no acknowledgement: the message stays in flight
	waitOneOffline(t, b, id+" offline")
	return alice, p.PacketID
}

// Two QoS 2 flows denied in flight (TestSecurityReloadReleasesStartedQoS2)
// resumed by a client whose Receive Maximum is 1: the resend stops at the
// window with the second flow already released, and goes on after the
// first PUBCOMP. Each flow is ended by one PUBREL, counted as one denied
// delivery (not once per pass over the window), and its payload charge is
// released exactly once: nothing is left queued or in flight.
func TestSecurityReleasedQoS2Window(t *testing.T) {
	b, files := secureBroker(t, false)
	const id = "alice-q2w"
	alice := aliceOnShared(t, b, packet.V5, id, false, 2)
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
	waitOneOffline(t, b, id+" offline")
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
	nothingBeforeMarker(t, alice, "the resumed session")
}

// A receiver that got the QoS 2 PUBLISH before the reload, but whose
// PUBREC never reached the broker, holds the message; libmosquitto hands a
// QoS 2 message to the application on PUBREL, not on PUBLISH. The PUBREL the resumed session is sent instead of
// the resend (TestSecurityReloadReleasesStartedQoS2) therefore makes
// mosquitto_sub print the message the reload denied: the copy that left
// the broker while the topic was allowed cannot be taken back
// (docs/security.md). The flow still ends and the session goes on.
func TestSecurityReleasedQoS2HeldByClient(t *testing.T) {
	needMosquittoClients(t)
	b, files := secureBroker(t, false)
	px := startCutProxy(t, b.addr)
	pb := *b
	pb.addr = px.l.Addr().String()
	const id = "alice-held"
	sub := startMosqSub(t, &pb, args([]string{"-c", "-i", id, "-q", "2", "-t", "shared/#", "-v", "-C", "2"}, user("alice"))...)
	waitSubs(t, b, 1)
	px.setCut(true) // from here the broker hears nothing from mosquitto_sub
	bob, _ := rawConnect(t, b.addr, packet.V311, id+"-bob", true, login("bob"))
	publishFlow(t, bob, 2, "shared/public/x", "sent-before-reload")
	// mosquitto_sub got the PUBLISH: its PUBREC (0x50 0x02) was swallowed.
	testutil.Eventually(t, 10*time.Second, "the PUBREC swallowed", func() bool {
		return bytes.Contains(px.swallowed(), []byte{0x50, 0x02})
	})
	denyPublic(t, files)
	before := b.srv.Stats().Denied["delivery"]
	px.setCut(false)
	px.drop() // mosquitto_sub reconnects and resumes its session
	testutil.Eventually(t, 10*time.Second, "the released flow ended", func() bool {
		st := b.srv.Stats()
		return st.Inflight == 0 && st.Denied["delivery"] == before+1
	})
	bobPublisher(t, b, id+"-bob2")(2, "shared/end", "end")
	got := sub.wait(t)
	if len(got) != 2 || got[0] != "shared/public/x sent-before-reload" || got[1] != "shared/end end" {
		t.Fatalf("mosquitto_sub printed %q, want the message it held, then the marker", got)
	}
}

// TestSecurityReleasedQoS2RealClients: real clients resuming a session
// whose QoS 2 message was denied in flight (TestSecurityReloadReleasesStartedQoS2)
// answer the PUBREL for a packet id they never got a PUBLISH for with a
// PUBCOMP [MQTT-4.3.3-11], [MQTT-4.3.3-2](3.1.1), so the flow ends, and
// they go on receiving what they may read; the denied message never
// reaches them (they never got it: TestSecurityReleasedQoS2HeldByClient
// for one that did).
func TestSecurityReleasedQoS2RealClients(t *testing.T) {
	needMosquittoClients(t)
	for _, tc := range []struct {
		name string
		v    packet.Version
		run  func(t *testing.T, b *broker, id string) (received func() []string)
	}{
		{"mosquitto_sub 3.1.1", packet.V311, func(t *testing.T, b *broker, id string) func() []string {
			s := startMosqSub(t, b, args([]string{"-c", "-i", id, "-q", "2", "-t", "shared/#", "-v", "-C", "1"}, user("alice"))...)
			return func() []string { return s.wait(t) }
		}},
		{"mosquitto_sub 5", packet.V5, func(t *testing.T, b *broker, id string) func() []string {
			s := startMosqSub(t, b, args([]string{"-V", "mqttv5", "-c", "-x", "3600", "-i", id, "-q", "2", "-t", "shared/#", "-v", "-C", "1"}, user("alice"))...)
			return func() []string { return s.wait(t) }
		}},
		{"paho 3.1.1", packet.V311, func(t *testing.T, b *broker, id string) func() []string {
			var got collector
			pahoClient(t, b.addr, id, false, func(o *mqtt.ClientOptions) {
				o.SetUsername("alice").SetPassword(securityUsers["alice"]).SetDefaultPublishHandler(got.handle)
			})
			return func() []string {
				testutil.Eventually(t, 10*time.Second, "the marker", func() bool { return got.len() >= 1 })
				return got.payloads()
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, files := secureBroker(t, false)
			id := "alice-real-" + tc.v.String()
			inflightAfterDrop(t, b, id, 2, tc.v)
			denyPublic(t, files)
			pub := bobPublisher(t, b, id+"-bob2")
			received := tc.run(t, b, id)
			testutil.Eventually(t, 10*time.Second, "the client resumed", func() bool { _, d := sessions(b); return d == 0 })
			// The PUBREL was answered: nothing is left in flight.
			testutil.Eventually(t, 10*time.Second, "the released flow ended", func() bool { return b.srv.Stats().Inflight == 0 })
			pub(2, "shared/end", "end")
			got := received()
			if len(got) != 1 || (got[0] != "shared/end end" && got[0] != "end") {
				t.Fatalf("received %q, want only the marker", got)
			}
		})
	}
}

// A filter that reaches a denied subtree without lying inside it
// (alice's shared/# next to "deny shared/secret/#") is granted; only the
// check per delivered message keeps the denied topics from it. These tests
// follow that filter through every path a message can take to a
// subscriber besides a live delivery to a connected one.

// untilMarker collects the topics rc receives, acknowledging each, up to
// and without the marker topic.
func untilMarker(t *testing.T, rc *rawClient, marker string) []string {
	t.Helper()
	var got []string
	for {
		p := rc.nextPublish(10 * time.Second)
		rc.ackPublish(p)
		if p.Topic == marker {
			return got
		}
		got = append(got, p.Topic+" "+string(p.Payload))
	}
}

// nothingBeforeMarker fails if rc receives anything before the marker
// shared/end; who says whose deliveries they are, for the failure.
func nothingBeforeMarker(t *testing.T, rc *rawClient, who string) {
	t.Helper()
	if got := untilMarker(t, rc, "shared/end"); len(got) != 0 {
		t.Fatalf("%s received %q before the marker", who, got)
	}
}

// bobPublisher returns a function that publishes at QoS 1 as bob and waits
// for the PUBACK (so the message has been routed).
func bobPublisher(t *testing.T, b *broker, id string) func(pid uint16, topic, body string) {
	bob, _ := rawConnect(t, b.addr, packet.V311, id, true, login("bob"))
	return func(pid uint16, topic, body string) {
		t.Helper()
		bob.send(&packet.Publish{QoS: 1, PacketID: pid, Topic: topic, Payload: []byte(body)})
		expect[*packet.Puback](t, bob, 10*time.Second)
	}
}

// The offline queue of a persistent session subscribed to the wide filter
// holds no denied message, and the resumed session receives none.
func TestSecurityWideFilterOfflineQueue(t *testing.T) {
	b, _ := secureBroker(t, false)
	alice := aliceOnShared(t, b, packet.V311, "alice-q", false, 1)
	alice.disconnect()
	waitOneOffline(t, b, "alice-q offline")
	pub := bobPublisher(t, b, "bob-q")
	pub(1, "shared/secret/x", "leak")
	pub(2, "shared/public/x", "ok")
	pub(3, "shared/end", "end")
	alice, _ = rawConnect(t, b.addr, packet.V311, "alice-q", false, login("alice"))
	if got := untilMarker(t, alice, "shared/end"); len(got) != 1 || got[0] != "shared/public/x ok" {
		t.Fatalf("alice's resumed session received %q, want only the public message", got)
	}
}

// A shared subscription on the wide filter: a denied message goes to no
// member that may not read it, also when that member is the group's only
// one, connected or offline.
func TestSecurityWideFilterSharedSubscription(t *testing.T) {
	b, _ := secureBroker(t, false)
	alice, _ := rawConnect(t, b.addr, packet.V5, "alice-sh", false, func(cp *packet.Connect) {
		login("alice")(cp)
		cp.Props.Set(packet.PropSessionExpiry)
		cp.Props.SessionExpiry = 3600
	})
	alice.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "$share/g/shared/#", QoS: 1})
	pub := bobPublisher(t, b, "bob-sh")
	pub(1, "shared/secret/x", "leak-online")
	pub(2, "shared/end", "end1")
	if got := untilMarker(t, alice, "shared/end"); len(got) != 0 {
		t.Fatalf("alice received %q through $share/g/shared/#", got)
	}
	alice.disconnect()
	waitOneOffline(t, b, "alice-sh offline")
	pub(3, "shared/secret/x", "leak-offline")
	pub(4, "shared/end", "end2")
	alice, _ = rawConnect(t, b.addr, packet.V5, "alice-sh", false, login("alice"))
	if got := untilMarker(t, alice, "shared/end"); len(got) != 0 {
		t.Fatalf("alice's resumed session received %q through $share/g/shared/#", got)
	}
}

// The retained messages sent on subscribe to the wide filter are checked
// one by one.
func TestSecurityWideFilterRetained(t *testing.T) {
	b, _ := secureBroker(t, false)
	pub := bobPublisher(t, b, "bob-r")
	for i, topic := range []string{"shared/secret/x", "shared/secret/deep/y", "shared/public/x"} {
		pubRetained(t, b, uint16(10+i), topic)
	}
	alice := aliceOnShared(t, b, packet.V311, "alice-r", true, 1)
	pub(1, "shared/end", "end")
	got := untilMarker(t, alice, "shared/end")
	if len(got) != 1 || !strings.HasPrefix(got[0], "shared/public/x ") {
		t.Fatalf("alice received %q on subscribing to shared/#, want only the public retained message", got)
	}
}

func pubRetained(t *testing.T, b *broker, pid uint16, topic string) {
	t.Helper()
	bob, _ := rawConnect(t, b.addr, packet.V311, "bob-ret", true, login("bob"))
	bob.send(&packet.Publish{QoS: 1, Retain: true, PacketID: pid, Topic: topic, Payload: []byte("r")})
	expect[*packet.Puback](t, bob, 10*time.Second)
	bob.disconnect()
}

// A will on a denied topic, published when its client goes away (at once,
// and after a v5 will delay), does not reach the wide filter.
func TestSecurityWideFilterWill(t *testing.T) {
	for _, delay := range []uint32{0, 1} {
		t.Run(fmt.Sprintf("delay %ds", delay), func(t *testing.T) {
			b, _ := secureBroker(t, false)
			alice := aliceOnShared(t, b, packet.V5, "alice-w", true, 1)
			bob, _ := rawConnect(t, b.addr, packet.V5, "bob-w", true, func(cp *packet.Connect) {
				login("bob")(cp)
				cp.Will = &packet.Will{QoS: 1, Topic: "shared/secret/will", Payload: []byte("leak")}
				if delay > 0 {
					cp.Will.Props.Set(packet.PropWillDelay)
					cp.Will.Props.WillDelay = delay
				}
			})
			before := b.srv.Stats().Denied["delivery"]
			bob.close() // no DISCONNECT: the will is published
			testutil.Eventually(t, 10*time.Second, "the will withheld from alice", func() bool {
				return b.srv.Stats().Denied["delivery"] > before
			})
			pub := bobPublisher(t, b, "bob-p")
			pub(1, "shared/end", "end")
			nothingBeforeMarker(t, alice, "alice")
		})
	}
}

// A message from inside the process (what a bridge's "in" rule and $SYS
// use, gateway.Server.Publish) is checked per subscriber as a client's.
func TestSecurityWideFilterInProcessPublish(t *testing.T) {
	b, _ := secureBroker(t, false)
	alice := aliceOnShared(t, b, packet.V311, "alice-b", true, 1)
	for _, topic := range []string{"shared/secret/x", "shared/public/x", "shared/end"} {
		if err := b.srv.Publish(&gateway.Message{Topic: topic, Payload: []byte("from the cloud"), QoS: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if got := untilMarker(t, alice, "shared/end"); len(got) != 1 || !strings.HasPrefix(got[0], "shared/public/x ") {
		t.Fatalf("alice received %q, want only the public message", got)
	}
}
