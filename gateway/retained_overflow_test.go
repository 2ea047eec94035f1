package gateway_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/internal/testutil"
)

// TestRetainedOnSubscribeBoundedByQueue holds docs/behaviour.md's
// "Retained messages sent on SUBSCRIBE go through the same queue and the
// same limits: a subscription matching more retained messages than
// limits.max_queued_messages receives as many as fit, and the rest are
// dropped and counted as queue_full": 50 retained messages, a queue of 10,
// a subscriber that acknowledges nothing gets 10 and 40 are counted.
func TestRetainedOnSubscribeBoundedByQueue(t *testing.T) {
	const retained, limit = 50, 10
	b := startBroker(t, gateway.Options{AllowAnonymous: true, MaxQueuedMessages: limit})
	pub, _ := rawConnect(t, b.addr, packet.V311, "", true, nil)
	for i := range retained {
		pub.send(&packet.Publish{QoS: 1, PacketID: uint16(i + 1), Retain: true, Topic: fmt.Sprintf("r/%d", i), Payload: []byte("x")})
		expect[*packet.Puback](t, pub, 10*time.Second)
	}
	pub.disconnect()
	before := drops(b, "queue_full")

	sub, _ := rawConnect(t, b.addr, packet.V311, "retained-sub", true, nil)
	sub.send(&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: "r/#", QoS: 1}}})
	// Every retained message is either queued or dropped at SUBSCRIBE.
	testutil.Eventually(t, 10*time.Second, "the retained messages past the queue counted", func() bool {
		return drops(b, "queue_full")-before == retained-limit
	})
	got := 0
	for got < limit {
		switch p := sub.next(10 * time.Second).(type) {
		case *packet.Suback:
		case *packet.Publish:
			if !p.Retain {
				t.Fatalf("PUBLISH %s without the retain flag", p.Topic)
			}
			got++ // not acknowledged: the queue stays full
		default:
			t.Fatalf("got %T", p)
		}
	}
	if n := drops(b, "queue_full") - before; n != retained-limit {
		t.Errorf("queue_full drops %d, want %d", n, retained-limit)
	}
}
