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
	alice := inflightAfterDrop(t, b, "alice-if", 1)
	denyPublic(t, files)
	pub := bobPublisher(t, b, "alice-if-bob2")
	pub(2, "shared/end", "end")
	alice, _ = rawConnect(t, b.addr, packet.V311, "alice-if", false, login("alice"))
	if got := untilMarker(t, alice, "shared/end"); len(got) != 0 {
		t.Fatalf("after a reload denying shared/public/#, the resumed session was sent %q again", got)
	}
}

// A QoS 2 flow started before the same reload is completed: the client
// may hold the packet id until the PUBREL [MQTT-4.3.3-2] and would take a
// later message under that id for a duplicate and drop it, so dropping
// the resend could lose a message the client may read. The message was
// allowed when it was first sent.
func TestSecurityReloadCompletesStartedQoS2(t *testing.T) {
	b, files := secureBroker(t, false)
	inflightAfterDrop(t, b, "alice-q2", 2)
	denyPublic(t, files)
	alice, _ := rawConnect(t, b.addr, packet.V311, "alice-q2", false, login("alice"))
	p := alice.nextPublish(10 * time.Second)
	if p.Topic != "shared/public/x" || !p.Dup || p.QoS != 2 {
		t.Fatalf("resumed session got %q QoS %d dup %v, want the started QoS 2 flow again", p.Topic, p.QoS, p.Dup)
	}
	alice.send(&packet.Pubrec{PacketID: p.PacketID})
	if rel := expect[*packet.Pubrel](t, alice, 10*time.Second); rel.PacketID != p.PacketID {
		t.Fatalf("PUBREL for id %d, want %d", rel.PacketID, p.PacketID)
	}
	alice.send(&packet.Pubcomp{PacketID: p.PacketID})
}

// inflightAfterDrop leaves one message on shared/public/x in flight to
// the persistent session id at qos: sent, never acknowledged, its
// connection dropped. It returns the dropped client.
func inflightAfterDrop(t *testing.T, b *broker, id string, qos byte) *rawClient {
	t.Helper()
	alice, _ := rawConnect(t, b.addr, packet.V311, id, false, login("alice"))
	alice.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "shared/#", QoS: qos})
	bob, _ := rawConnect(t, b.addr, packet.V311, id+"-bob", true, login("bob"))
	publishFlow(t, bob, qos, "shared/public/x", "sent-before-reload")
	if p := alice.nextPublish(10 * time.Second); p.Topic != "shared/public/x" || p.QoS != qos {
		t.Fatalf("alice got %q at QoS %d", p.Topic, p.QoS)
	}
	alice.close() // no acknowledgement: the message stays in flight
	testutil.Eventually(t, 10*time.Second, id+" offline", func() bool { _, d := sessions(b); return d == 1 })
	return alice
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
