package gateway_test

import (
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
	a, _ := rawConnect(t, b.addr, packet.V5, "member-a", true, func(cp *packet.Connect) {
		cp.Props.ReceiveMaximum = 1
		cp.Props.Set(packet.PropReceiveMaximum)
		cp.Props.SessionExpiry = 1
		cp.Props.Set(packet.PropSessionExpiry)
	})
	a.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "$share/g/job/#", QoS: 1})
	pub := v5Client(t, b, "producer", nil)
	pub.pub1(1, &packet.Publish{Topic: "job/1", Payload: []byte("m0")})
	pub.pub1(2, &packet.Publish{Topic: "job/1", Payload: []byte("m1")})
	if p := a.nextPublish(5 * time.Second); string(p.Payload) != "m0" {
		t.Fatalf("member a got %q first, want m0", p.Payload)
	}
	m := rawDial(t, b.addr, packet.V5)
	m.hook = autoAck
	m.connect(&packet.Connect{ClientID: "member-b", CleanStart: true, KeepAlive: 60})
	m.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "$share/g/job/#", QoS: 1})
	a.close() // the session waits 1 s for its client, then expires
	var got []string
	for len(got) < 2 {
		p, err := m.nextErr(10 * time.Second)
		if err != nil {
			t.Fatalf("member b got %v after member a's session expired: %v", got, err)
		}
		if pp, ok := p.(*packet.Publish); ok {
			got = append(got, string(pp.Payload))
		}
	}
	if got[0] != "m0" || got[1] != "m1" {
		t.Fatalf("member b got %v, want [m0 m1]: the one in flight first", got)
	}
}
