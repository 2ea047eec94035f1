package gateway_test

// A session's queue (session.go deliver): the overflow policy.

import (
	"fmt"
	"testing"
	"time"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/packet"
)

// TestQueueOverflowDropsOldest: an offline persistent session keeps at
// most max_queued_messages; the oldest are dropped (queue_full) and the
// rest delivered in order on resume.
func TestQueueOverflowDropsOldest(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true, MaxQueuedMessages: 5})
	c, _ := rawConnect(t, b.addr, packet.V311, "ovf", false, nil)
	c.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "ovf/t", QoS: 1})
	c.disconnect()
	before := drops(b, "queue_full")
	publishN(t, b, "ovf/t", 12)
	if got := drops(b, "queue_full") - before; got != 7 {
		t.Errorf("queue_full drops %d, want 7", got)
	}
	c2, _ := rawConnect(t, b.addr, packet.V311, "ovf", false, nil)
	for i := 7; i < 12; i++ {
		p := c2.nextPublish(10 * time.Second)
		c2.ackPublish(p)
		if string(p.Payload) != fmt.Sprint(i) {
			t.Fatalf("got %q, want %d (the oldest are dropped)", p.Payload, i)
		}
	}
	c2.send(&packet.Disconnect{})
	c2.expectClose(10 * time.Second)
	c3, _ := rawConnect(t, b.addr, packet.V311, "ovf", true, nil)
	c3.disconnect()
}
