package gateway_test

import (
	"testing"
	"time"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/internal/testutil"
)

// A QoS 2 message already sent is not expired: "the sender MUST NOT apply
// Application Message expiry if a PUBLISH packet has been sent"
// [MQTT-4.3.3-7]. The receiver may hold its packet id until the PUBREL
// [MQTT-4.3.3-10] and take a later message under that id for a duplicate,
// so the flow must go on (the PUBLISH again, DUP) when the session resumes
// after the expiry, not be dropped with its id.
func TestV5ExpiryKeepsSentQoS2(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true})
	const id = "exp2"
	alice, _ := rawConnect(t, b.addr, packet.V5, id, false, withExpiry(60))
	alice.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "exp2/t", QoS: 2})
	pub := v5Client(t, b, "exp2-pub", nil)
	var props packet.Properties
	props.MessageExpiry = 1
	props.Set(packet.PropMessageExpiry)
	pub.send(&packet.Publish{QoS: 2, PacketID: 1, Topic: "exp2/t", Payload: []byte("short"), Props: props})
	expect[*packet.Pubrec](t, pub, 10*time.Second)
	routed := time.Now()
	pub.send(&packet.Pubrel{PacketID: 1})
	expect[*packet.Pubcomp](t, pub, 10*time.Second)
	p := alice.nextPublish(10 * time.Second)
	if p.QoS != 2 || string(p.Payload) != "short" {
		t.Fatalf("alice got %q at QoS %d", p.Payload, p.QoS)
	}
	alice.close() // no PUBREC: the flow is in flight
	testutil.Eventually(t, 10*time.Second, id+" offline", func() bool { _, d := sessions(b); return d == 1 })
	<-time.After(time.Until(routed.Add(2 * time.Second))) // the 1 s expiry passes while the session is offline

	alice, _ = rawConnect(t, b.addr, packet.V5, id, false, withExpiry(60))
	pub.send(&packet.Publish{QoS: 0, Topic: "exp2/t", Payload: []byte("marker")})
	got := alice.nextPublish(10 * time.Second)
	if string(got.Payload) != "short" || !got.Dup || got.PacketID != p.PacketID {
		t.Fatalf("resumed session got %q (dup %v, id %d) first, want the sent QoS 2 message again under id %d",
			got.Payload, got.Dup, got.PacketID, p.PacketID)
	}
}
