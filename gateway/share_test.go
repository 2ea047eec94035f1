package gateway_test

import (
	"slices"
	"testing"
	"time"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/packet"
)

// TestSharedRedeliveredWhenMemberSessionExpires: a persistent member's
// session that expires while its client is away hands the shared
// subscription's messages it held to another member (5.0 §4.8.2; share.go),
// the one in flight first; a message also routed to a subscription of its
// own (not only the group's) ends with the session.
func TestSharedRedeliveredWhenMemberSessionExpires(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true})
	a := heldByMemberA(t, b, "job", withExpiry(1))
	m := ackingSubscriber(t, b.addr, packet.V5, "member-b", packet.Subscription{Filter: "$share/g/job/#", QoS: 1})
	a.close() // the session waits 1 s for its client, then expires
	got := memberPayloads(t, m, 2, 10*time.Second, "after member a's session expired")
	if got[0] != "m0" || got[1] != "m1" {
		t.Fatalf("member b got %v, want [m0 m1]: the one in flight first", got)
	}
}

// heldByMemberA connects member-a of group g on topic/# at QoS 1 (MQTT 5,
// Receive Maximum 1, acknowledging nothing; mod adds to its CONNECT),
// publishes m0 and m1 to topic/1 from a v5 producer and checks that
// member a got m0: m0 is then in flight to it, and m1 waits in its queue.
func heldByMemberA(t *testing.T, b *broker, topic string, mod func(*packet.Connect)) *rawClient {
	t.Helper()
	a := windowOneMember(t, b, "$share/g/"+topic+"/#", 1, mod)
	pub := v5Client(t, b, "producer", nil)
	pub.pub1(1, &packet.Publish{Topic: topic + "/1", Payload: []byte("m0")})
	pub.pub1(2, &packet.Publish{Topic: topic + "/1", Payload: []byte("m1")})
	if p := a.nextPublish(5 * time.Second); string(p.Payload) != "m0" {
		t.Fatalf("member a got %q first, want m0", p.Payload)
	}
	return a
}

// windowOneMember connects member-a of a shared subscription on filter at
// qos: MQTT 5, Receive Maximum 1 (one message in flight at a time), and it
// acknowledges nothing itself; mod adds to its CONNECT.
func windowOneMember(t *testing.T, b *broker, filter string, qos byte, mod func(*packet.Connect)) *rawClient {
	t.Helper()
	a, _ := rawConnect(t, b.addr, packet.V5, "member-a", true, func(cp *packet.Connect) {
		cp.Props.ReceiveMaximum = 1
		cp.Props.Set(packet.PropReceiveMaximum)
		if mod != nil {
			mod(cp)
		}
	})
	a.subscribe(1, packet.Properties{}, packet.Subscription{Filter: filter, QoS: qos})
	return a
}

// memberPayloads reads the payloads of the next n PUBLISH packets on rc
// (other packets skipped); after says what happened before, for the
// failure.
func memberPayloads(t *testing.T, rc *rawClient, n int, d time.Duration, after string) []string {
	t.Helper()
	var got []string
	for len(got) < n {
		p, err := rc.nextErr(d)
		if err != nil {
			t.Fatalf("member b got %v %s: %v", got, after, err)
		}
		if pp, ok := p.(*packet.Publish); ok {
			got = append(got, string(pp.Payload))
		}
	}
	return got
}

// TestSharedRedeliveredWhenMemberSessionEnds: a member of a shared
// subscription whose session ends (session expiry 0, connection dropped)
// holding an unacknowledged QoS 1 message and one queued behind its
// Receive Maximum: the group's other member should get both. 5.0 §4.8.2:
// "If the Client's Session terminates before the Client reconnects, the
// Server SHOULD send the Application Message to another Client that is
// subscribed to the same Shared Subscription." Found by a conformance
// probe with paho.golang, when both ended with the member's session though
// the publisher had its PUBACKs.
func TestSharedRedeliveredWhenMemberSessionEnds(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true})
	a := heldByMemberA(t, b, "work", nil)
	m := ackingSubscriber(t, b.addr, packet.V5, "member-b", packet.Subscription{Filter: "$share/g/work/#", QoS: 1})
	a.close() // a's connection breaks; its session (expiry 0) ends with it
	got := memberPayloads(t, m, 2, 5*time.Second, "after member a's session ended (5.0 §4.8.2: SHOULD go to another member)")
	if !slices.Contains(got, "m0") || !slices.Contains(got, "m1") {
		t.Fatalf("member b got %v, want m0 and m1", got)
	}
}

// TestSharedQoS2InFlightNotRedelivered: a QoS 2 message already sent to a
// member (PUBLISH out, no PUBREC yet) whose session ends must not go to
// another member of the group: "If the Client's Session terminates before
// the Client reconnects, the Server MUST NOT send the Application Message
// to any other subscribed Client" [MQTT-4.8.2-5]. The member reconnecting
// with a clean start ends the old session inside attach (redeliverShared
// runs before CONNACK), so the next message member b gets after m1 was
// published tells whether m0 went to it.
func TestSharedQoS2InFlightNotRedelivered(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true})
	a := windowOneMember(t, b, "$share/g/q2/#", 2, nil)
	pub := v5Client(t, b, "producer", nil)
	pub.send(&packet.Publish{Topic: "q2/1", QoS: 2, PacketID: 1, Payload: []byte("m0")})
	expect[*packet.Pubrec](t, pub, 10*time.Second)
	if p := a.nextPublish(5 * time.Second); string(p.Payload) != "m0" || p.QoS != 2 {
		t.Fatalf("member a got %q QoS %d, want m0 at QoS 2", p.Payload, p.QoS)
	}
	// m0 is in flight to a at QoS 2 (PUBLISH sent, no PUBREC).
	m := ackingSubscriber(t, b.addr, packet.V5, "member-b", packet.Subscription{Filter: "$share/g/q2/#", QoS: 2})
	// Member a comes back with a clean start: its old session ends.
	rawConnect(t, b.addr, packet.V5, "member-a", true, nil)
	pub.send(&packet.Pubrel{PacketID: 1})
	expect[*packet.Pubcomp](t, pub, 10*time.Second)
	pub.send(&packet.Publish{Topic: "q2/1", QoS: 2, PacketID: 2, Payload: []byte("m1")})
	p := m.nextPublish(5 * time.Second)
	if string(p.Payload) != "m1" {
		t.Fatalf("member b got %q, want m1: m0 was in flight at QoS 2 to member a, whose session ended [MQTT-4.8.2-5]", p.Payload)
	}
}
