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
