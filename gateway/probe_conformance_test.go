package gateway_test

// Reproducers found by a conformance probe with real clients (paho.golang,
// paho.mqtt.golang, python3-paho-mqtt, mosquitto_pub/sub) against the
// built binary; each fails on main for the reason its comment gives.

import (
	"testing"
	"time"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/packet"
)

// TestProbeSharedRedeliveredWhenMemberSessionEnds: a member of a shared
// subscription whose session ends (session expiry 0, connection dropped)
// holding an unacknowledged QoS 1 message and one queued behind its
// Receive Maximum: the group's other member should get both. 5.0 §4.8.2:
// "If the Client's Session terminates before the Client reconnects, the
// Server SHOULD send the Application Message to another Client that is
// subscribed to the same Shared Subscription." On main both are dropped
// with the member's session, though the publisher was sent its PUBACKs
// (paho.golang against the binary: 2 of 4 acknowledged messages lost).
func TestProbeSharedRedeliveredWhenMemberSessionEnds(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true})
	// Member a never acknowledges and takes one message at a time.
	a, _ := rawConnect(t, b.addr, packet.V5, "member-a", true, func(cp *packet.Connect) {
		cp.Props.ReceiveMaximum = 1
		cp.Props.Set(packet.PropReceiveMaximum)
	})
	a.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "$share/g/work/#", QoS: 1})
	pub := v5Client(t, b, "producer", nil)
	pub.pub1(1, &packet.Publish{Topic: "work/1", Payload: []byte("m0")})
	pub.pub1(2, &packet.Publish{Topic: "work/1", Payload: []byte("m1")})
	if p := a.nextPublish(5 * time.Second); string(p.Payload) != "m0" {
		t.Fatalf("member a got %q first, want m0", p.Payload)
	}
	// m0 is in flight to a (unacknowledged), m1 waits in a's queue.
	m := rawDial(t, b.addr, packet.V5)
	m.hook = autoAck
	m.connect(&packet.Connect{ClientID: "member-b", CleanStart: true, KeepAlive: 60})
	m.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "$share/g/work/#", QoS: 1})
	a.close() // a's connection breaks; its session (expiry 0) ends with it
	got := map[string]bool{}
	for range 2 {
		p, err := m.nextErr(5 * time.Second)
		if err != nil {
			t.Fatalf("member b got %v of m0, m1 after member a's session ended: %v (5.0 §4.8.2: SHOULD go to another member)", got, err)
		}
		if pp, ok := p.(*packet.Publish); ok {
			got[string(pp.Payload)] = true
		}
	}
	if !got["m0"] || !got["m1"] {
		t.Fatalf("member b got %v, want m0 and m1", got)
	}
}

// TestProbeWillOnErrorDisconnect: an MQTT 5 client that ends with a
// DISCONNECT carrying an error reason code (0x80 Unspecified error) has
// not asked for its will to be dropped: only reason 0x00 deletes the will
// [MQTT-3.1.2-8], [MQTT-3.14.4-3], and docs/behaviour.md says wills are
// published "on any close that is not a normal DISCONNECT". On main only
// 0x04 keeps the will, so every other code drops it like 0x00
// (python3-paho-mqtt against the binary: wills after DISCONNECT 0x80,
// 0x83, 0x90 and 0x93 all missing).
func TestProbeWillOnErrorDisconnect(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true})
	w := rawDial(t, b.addr, packet.V5)
	w.hook = autoAck
	w.connect(&packet.Connect{ClientID: "watcher", CleanStart: true, KeepAlive: 60})
	w.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "will/#", QoS: 1})
	c, _ := rawConnect(t, b.addr, packet.V5, "dying", true, func(cp *packet.Connect) {
		cp.Will = &packet.Will{Topic: "will/dying", QoS: 1, Payload: []byte("gone")}
	})
	c.send(&packet.Disconnect{ReasonCode: packet.UnspecifiedError})
	c.expectClose(5 * time.Second)
	p, err := w.nextErr(5 * time.Second)
	if err != nil {
		t.Fatalf("no will after DISCONNECT 0x80: %v ([MQTT-3.1.2-8]: only 0x00 deletes it)", err)
	}
	if pp, ok := p.(*packet.Publish); !ok || pp.Topic != "will/dying" {
		t.Fatalf("got %T %+v, want the will", p, p)
	}
}
