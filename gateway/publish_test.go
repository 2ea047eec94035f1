package gateway_test

import (
	"testing"
	"time"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/packet"
)

// TestNoMatchingSubscribers: a v5 QoS 1/2 publish that reached no
// subscriber and no sink is acknowledged with 0x10; with a subscriber, 0.
func TestNoMatchingSubscribers(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true})
	rc, _ := rawConnect(t, b.addr, packet.V5, "lonely", true, nil)
	rc.send(&packet.Publish{Topic: "nobody/here", QoS: 1, PacketID: 1})
	if a := expect[*packet.Puback](t, rc, 10*time.Second); a.ReasonCode != packet.NoMatchingSubscribers {
		t.Fatalf("puback %v, want no matching subscribers", a.ReasonCode)
	}
	rc.send(&packet.Publish{Topic: "nobody/here", QoS: 2, PacketID: 2})
	if a := expect[*packet.Pubrec](t, rc, 10*time.Second); a.ReasonCode != packet.NoMatchingSubscribers {
		t.Fatalf("pubrec %v, want no matching subscribers", a.ReasonCode)
	}
	rc.send(&packet.Pubrel{PacketID: 2})
	expect[*packet.Pubcomp](t, rc, 10*time.Second)
	rc.subscribe(3, packet.Properties{}, packet.Subscription{Filter: "nobody/here"})
	rc.send(&packet.Publish{Topic: "nobody/here", QoS: 1, PacketID: 4})
	for {
		switch p := rc.next(10 * time.Second).(type) {
		case *packet.Puback:
			if p.ReasonCode != 0 {
				t.Fatalf("puback %v with a subscriber, want success", p.ReasonCode)
			}
			return
		case *packet.Publish:
		default:
			t.Fatalf("unexpected %T", p)
		}
	}
}

func TestPublishToSysRefused(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true})
	sub, _ := rawConnect(t, b.addr, packet.V311, "sys-sub", true, nil)
	sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "$SYS/#"}, packet.Subscription{Filter: "marker"})
	c := v5Client(t, b, "sys-pub", nil)
	c.send(&packet.Publish{QoS: 1, PacketID: 1, Topic: "$SYS/broker/version", Payload: []byte("fake")})
	if a := expect[*packet.Puback](t, c, 10*time.Second); a.ReasonCode != packet.NotAuthorized {
		t.Fatalf("puback %v, want not authorized", a.ReasonCode)
	}
	c.send(&packet.Publish{Topic: "marker", Payload: []byte("m")})
	if p := sub.nextPublish(10 * time.Second); p.Topic != "marker" {
		t.Fatalf("got %q %q, want marker", p.Topic, p.Payload)
	}
}
