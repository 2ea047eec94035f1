package gateway_test

import (
	"fmt"
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

// A message sent to a persistent session but not yet acknowledged when
// its connection dropped is not sent again after a reload denied its
// topic: the resend of an in-flight QoS 1 or QoS 2 PUBLISH is a delivery,
// and authorization holds for every delivery.
func TestSecurityReloadDeniesInflightResend(t *testing.T) {
	for _, qos := range []byte{1, 2} {
		t.Run(fmt.Sprintf("qos%d", qos), func(t *testing.T) {
			b, files := secureBroker(t, false)
			id := fmt.Sprintf("alice-if%d", qos)
			alice, _ := rawConnect(t, b.addr, packet.V311, id, false, login("alice"))
			alice.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "shared/#", QoS: qos})
			bob, _ := rawConnect(t, b.addr, packet.V311, id+"-bob", true, login("bob"))
			publishFlow(t, bob, qos, "shared/public/x", "sent-before-reload")
			if p := alice.nextPublish(10 * time.Second); p.Topic != "shared/public/x" || p.QoS != qos {
				t.Fatalf("alice got %q at QoS %d", p.Topic, p.QoS)
			}
			alice.close() // no acknowledgement: the message stays in flight
			testutil.Eventually(t, 10*time.Second, id+" offline", func() bool { _, d := sessions(b); return d == 1 })

			denyPublic(t, files)
			pub := bobPublisher(t, b, id+"-bob2")
			pub(2, "shared/end", "end")
			alice, _ = rawConnect(t, b.addr, packet.V311, id, false, login("alice"))
			if got := untilMarker(t, alice, "shared/end"); len(got) != 0 {
				t.Fatalf("after a reload denying shared/public/#, the resumed session was sent %q again", got)
			}
		})
	}
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

// The same after a restart with the changed ACL: the message that was in
// flight, restored from the state store, is not sent again either. At
// QoS 2 its packet id is recorded, so it is restored in flight and meets
// the resend's check; a lone QoS 1 send is not recorded and is restored
// to the queue, whose check TestSecurityRestartDeniesRestoredQueue covers
// (the qos1 case passed with the resend's check removed).
func TestSecurityRestartDeniesInflightResend(t *testing.T) {
	for _, qos := range []byte{1, 2} {
		t.Run(fmt.Sprintf("qos%d", qos), func(t *testing.T) {
			dir := t.TempDir()
			id := fmt.Sprintf("alice-ifr%d", qos)
			b, _ := secureBrokerState(t, false, nil, dir, nil)
			alice, _ := rawConnect(t, b.addr, packet.V311, id, false, login("alice"))
			alice.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "shared/#", QoS: qos})
			bob, _ := rawConnect(t, b.addr, packet.V311, id+"-bob", true, login("bob"))
			publishFlow(t, bob, qos, "shared/public/x", "sent-before-restart")
			if p := alice.nextPublish(10 * time.Second); p.Topic != "shared/public/x" || p.QoS != qos {
				t.Fatalf("alice got %q at QoS %d", p.Topic, p.QoS)
			}
			alice.close() // no acknowledgement: the message stays in flight
			testutil.Eventually(t, 10*time.Second, id+" offline", func() bool { _, d := sessions(b); return d == 1 })
			b.stop()

			b, files := secureBrokerState(t, false, nil, dir, nil)
			denyPublic(t, files)
			pub := bobPublisher(t, b, id+"-bob2")
			pub(2, "shared/end", "end")
			alice, _ = rawConnect(t, b.addr, packet.V311, id, false, login("alice"))
			if got := untilMarker(t, alice, "shared/end"); len(got) != 0 {
				t.Fatalf("after a restart with shared/public/# denied, the restored session was sent %q again", got)
			}
		})
	}
}
