package gateway_test

import (
	"testing"
	"time"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/packet"
)

func TestOverlappingSubscriptions(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true})
	c, _ := rawConnect(t, b.addr, packet.V311, "ovl", true, nil)
	c.subscribe(1, packet.Properties{},
		packet.Subscription{Filter: "ovl/#", QoS: 0},
		packet.Subscription{Filter: "ovl/+", QoS: 1},
		packet.Subscription{Filter: "ovl/a", QoS: 0})
	publishN(t, b, "ovl/a", 1)
	publishN(t, b, "ovl/b/c", 1)
	p := c.nextPublish(10 * time.Second)
	if p.Topic != "ovl/a" || p.QoS != 1 {
		t.Fatalf("got %q qos %d, want ovl/a once at the highest granted qos 1", p.Topic, p.QoS)
	}
	c.ackPublish(p)
	if p := c.nextPublish(10 * time.Second); p.Topic != "ovl/b/c" || p.QoS != 0 {
		t.Fatalf("got %q qos %d, want ovl/b/c qos 0 (one copy of ovl/a only)", p.Topic, p.QoS)
	}
	// Unsubscribe: ovl/a now only matches ovl/# at QoS 0.
	c.send(&packet.Unsubscribe{PacketID: 2, Filters: []string{"ovl/+", "ovl/a", "never/subscribed"}})
	expect[*packet.Unsuback](t, c, 10*time.Second)
	publishN(t, b, "ovl/a", 1)
	if p := c.nextPublish(10 * time.Second); p.Topic != "ovl/a" || p.QoS != 0 {
		t.Fatalf("got %q qos %d after unsubscribe, want qos 0", p.Topic, p.QoS)
	}
}
