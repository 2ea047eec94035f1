package gateway_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/packet"
)

// Regression (review): a PUBREL the old connection reads after the takeover (now longer
// likely: the drain lets it read on) finds the session no longer its own;
// forgetQoS2 returns found = false and the reader still answers PUBCOMP,
// success in 3.1.1. The client takes the flow as complete, but the session
// keeps the packet id: the client's next QoS 2 message with that id is
// taken for a duplicate, acknowledged, and never delivered.
func TestPubrelOnTakenOverConnection(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true})
	watch, _ := rawConnect(t, b.addr, packet.V311, "watcher", true, nil)
	watch.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "q2/#", QoS: 2})
	watch.hook = autoAck
	old, _ := rawConnect(t, b.addr, packet.V311, "q2pub", false, nil)
	lost := 0
	for i := range 30 {
		old.send(&packet.Publish{Topic: "q2/a", QoS: 2, PacketID: 1, Payload: []byte(fmt.Sprintf("first-%d", i))})
		expect[*packet.Pubrec](t, old, 10*time.Second)
		if p := watch.nextPublish(10 * time.Second); string(p.Payload) != fmt.Sprintf("first-%d", i) {
			t.Fatalf("got %q", p.Payload)
		}
		old.send(&packet.Pubrel{PacketID: 1})
		nw, _ := rawConnect(t, b.addr, packet.V311, "q2pub", false, nil)
		got := old.expectClose(10 * time.Second)
		completed := false
		for _, p := range got {
			if _, ok := p.(*packet.Pubcomp); ok {
				completed = true
			}
		}
		if !completed {
			// No PUBCOMP on the old connection: a client resends PUBREL on the new one.
			nw.send(&packet.Pubrel{PacketID: 1})
			expect[*packet.Pubcomp](t, nw, 10*time.Second)
		}
		// The client believes id 1 is free: a new message with it.
		want := fmt.Sprintf("second-%d", i)
		nw.send(&packet.Publish{Topic: "q2/a", QoS: 2, PacketID: 1, Payload: []byte(want)})
		expect[*packet.Pubrec](t, nw, 10*time.Second)
		nw.send(&packet.Pubrel{PacketID: 1})
		expect[*packet.Pubcomp](t, nw, 10*time.Second)
		nw.send(&packet.Publish{Topic: "q2/marker", Payload: []byte("m")})
		p := watch.nextPublish(10 * time.Second)
		if string(p.Payload) != want {
			lost++
			for p.Topic != "q2/marker" {
				p = watch.nextPublish(10 * time.Second)
			}
		} else {
			watch.nextPublish(10 * time.Second) // the marker
		}
		old = nw
	}
	if lost > 0 {
		t.Fatalf("%d of 30 acknowledged QoS 2 messages never delivered (PUBCOMP from a taken-over connection)", lost)
	}
}
