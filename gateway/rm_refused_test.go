package gateway_test

import (
	"testing"
	"time"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/packet"
)

// Regression (review): a refused QoS 1/2 PUBLISH (denied: $SYS or ACL, or
// over the topic limits) must not close a flow it never opened: it did
// (ackID closed one without a matching open), so a client interleaving
// denied publishes kept any number of QoS 2 flows open past the Receive
// Maximum it was told. A refused publish is a flow of its own until its
// ack, so the client is cut (0x93) at the latest on its fifth open flow.
func TestReceiveMaximumBypassedByDeniedPublishes(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true, MaxInflight: 4})
	rc, _ := rawConnect(t, b.addr, packet.V5, "rm-bypass", true, nil)
	id := uint16(1)
	qos2 := func() (cut bool) {
		rc.send(&packet.Publish{Topic: "x", QoS: 2, PacketID: id})
		id++
		if p := rc.next(10 * time.Second); p.Type() != packet.PUBREC {
			if d, ok := p.(*packet.Disconnect); ok && d.ReasonCode == packet.ReceiveMaximumExceeded {
				return true // enforced
			}
			t.Fatalf("got %T", p)
		}
		return false
	}
	for range 3 { // 3 open QoS 2 flows (no PUBREL)
		qos2()
	}
	for range 5 { // each refused publish "closes" a flow that was never open
		rc.send(&packet.Publish{Topic: "$SYS/x", QoS: 1, PacketID: 1000 + id})
		switch p := rc.next(10 * time.Second).(type) {
		case *packet.Puback:
		case *packet.Disconnect:
			if p.ReasonCode == packet.ReceiveMaximumExceeded {
				return // the refused publish counted too: enforced
			}
			t.Fatalf("disconnect %v", p.ReasonCode)
		default:
			t.Fatalf("got %T", p)
		}
		if qos2() {
			return
		}
	}
	rc.send(&packet.Pingreq{})
	expect[*packet.Pingresp](t, rc, 10*time.Second)
	t.Fatalf("%d QoS 2 flows open (no PUBREL sent) with Receive Maximum 4, and no DISCONNECT 0x93", id-1)
}
