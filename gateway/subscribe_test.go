package gateway_test

import (
	"fmt"
	"strings"
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

// TestSubscriptionMemoryBudget: the topic tree's memory is counted against
// limits.memory_budget (subscriptions may take half of it): past it a new
// subscription gets SUBACK 0x97 (v5) / 0x80 (3.1.1), and the memory is given
// back when the client goes, so others can subscribe again.
func TestSubscriptionMemoryBudget(t *testing.T) {
	const budget = 1 << 20
	b := startBroker(t, gateway.Options{AllowAnonymous: true, MemoryBudget: budget, MaxSubscriptions: 100000})
	deep := strings.Repeat("l/", 63) // 64 levels
	fill := func(v packet.Version, id string) (granted int, code packet.ReasonCode) {
		rc, _ := rawConnect(t, b.addr, v, id, true, nil)
		for i := 1; i < 1000; i++ {
			rc.send(&packet.Subscribe{PacketID: uint16(i), Subscriptions: []packet.Subscription{{Filter: fmt.Sprintf("%s%d", deep, i)}}})
			ack := expect[*packet.Suback](t, rc, 10*time.Second)
			if c := ack.ReasonCodes[0]; c >= 0x80 {
				rc.disconnect()
				return granted, c
			}
			granted++
		}
		t.Fatalf("%s: 1,000 deep subscriptions within a %d-byte budget", id, budget)
		return 0, 0
	}
	n5, code := fill(packet.V5, "greedy5")
	if code != packet.QuotaExceeded {
		t.Fatalf("v5 refusal %v, want quota exceeded", code)
	}
	if n5 == 0 {
		t.Fatal("no subscription granted")
	}
	testutil.Eventually(t, 10*time.Second, "subscription memory given back", func() bool { return b.srv.Stats().SubscriptionBytes == 0 })
	n3, code := fill(packet.V311, "greedy3")
	if code != packet.V3SubackFailure || n3 != n5 {
		t.Fatalf("3.1.1: %d granted then %v; want %d then 0x80", n3, code, n5)
	}
	t.Logf("%d subscriptions of 64 levels fit in half of a %d-byte budget", n5, budget)
}
