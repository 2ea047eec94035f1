package gateway_test

import (
	"testing"
	"time"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/packet"
)

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
	a, _ := rawConnect(t, b.addr, packet.V5, "member-a", true, func(cp *packet.Connect) {
		cp.Props.ReceiveMaximum = 1
		cp.Props.Set(packet.PropReceiveMaximum)
	})
	a.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "$share/g/q2/#", QoS: 2})
	pub := v5Client(t, b, "producer", nil)
	pub.send(&packet.Publish{Topic: "q2/1", QoS: 2, PacketID: 1, Payload: []byte("m0")})
	expect[*packet.Pubrec](t, pub, 10*time.Second)
	if p := a.nextPublish(5 * time.Second); string(p.Payload) != "m0" || p.QoS != 2 {
		t.Fatalf("member a got %q QoS %d, want m0 at QoS 2", p.Payload, p.QoS)
	}
	// m0 is in flight to a at QoS 2 (PUBLISH sent, no PUBREC).
	m := rawDial(t, b.addr, packet.V5)
	m.hook = autoAck
	m.connect(&packet.Connect{ClientID: "member-b", CleanStart: true, KeepAlive: 60})
	m.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "$share/g/q2/#", QoS: 2})
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
