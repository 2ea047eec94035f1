package gateway_test

// Topic limits: names and filters deeper than
// max_topic_levels or longer than max_topic_length are refused before they
// reach the topic tree or the retained store; the subscriptions' memory is
// bounded by limits.memory_budget.

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/internal/testutil"
)

// heapInUse is the live heap after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestLimitsSubscriptionBomb: one SUBSCRIBE of 16 filters of 60,000 empty
// levels (960 KB, under max_packet_size): every filter is refused with a
// SUBACK failure code and nothing is kept (such a SUBSCRIBE once took the
// broker's RSS from 9 to 359 MiB for good).
func TestLimitsSubscriptionBomb(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true})
	before := heapInUse()
	for _, v := range []packet.Version{packet.V311, packet.V5} {
		want := packet.V3SubackFailure
		if v == packet.V5 {
			want = packet.TopicFilterInvalid
		}
		rc, _ := rawConnect(t, b.addr, v, "bomber-"+v.String(), true, nil)
		subs := make([]packet.Subscription, 16)
		for i := range subs {
			// distinct filters: identical ones would share their nodes
			subs[i] = packet.Subscription{Filter: string(rune('a'+i)) + strings.Repeat("/", 60000-1), QoS: 1}
		}
		rc.send(&packet.Subscribe{PacketID: 1, Subscriptions: subs})
		sa := expect[*packet.Suback](t, rc, 30*time.Second)
		for i, c := range sa.ReasonCodes {
			if c != want {
				t.Fatalf("%v: filter %d: %v, want %v", v, i, c, want)
			}
		}
		if n := b.srv.Stats().Subscriptions; n != 0 {
			t.Fatalf("%v: %d subscriptions kept", v, n)
		}
		rc.disconnect()
	}
	if grown := int64(heapInUse()) - int64(before); grown > 4<<20 {
		t.Fatalf("live heap grew by %d KiB after the refused subscription bombs", grown>>10)
	}
}

// The limits (64 levels, the default, and 1024 bytes): within them passes,
// one more of either is refused, for filters (SUBACK 0x80 / 0x8F) and
// names (v5 PUBACK 0x90; 3.1.1 closed without an ack), live and retained.
func TestLimitsTopicLevelsAndLength(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true, MaxTopicLength: 1024})
	levelsOf := func(l string, n int) string { return l + strings.Repeat("/"+l, n-1) }
	lengthOf := func(l string, n int) string { return l + "/" + strings.Repeat(l, n-2) }
	levels := func(n int) string { return levelsOf("a", n) }
	length := func(n int) string { return lengthOf("b", n) }
	watcher, _ := rawConnect(t, b.addr, packet.V311, "watcher", true, nil)
	watcher.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "#", QoS: 1})

	for _, v := range []packet.Version{packet.V311, packet.V5} {
		subFail := packet.V3SubackFailure
		if v == packet.V5 {
			subFail = packet.TopicFilterInvalid
		}
		rc, _ := rawConnect(t, b.addr, v, "limits-"+v.String(), true, nil)
		rc.send(&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{
			// (filters that match none of the names published below)
			{Filter: levelsOf("f", 64)}, {Filter: levelsOf("f", 65)}, {Filter: lengthOf("f", 1024)}, {Filter: lengthOf("f", 1025)},
			{Filter: "$share/g/" + levelsOf("f", 64)}, {Filter: "$share/g/" + levelsOf("f", 65)},
		}})
		sa := expect[*packet.Suback](t, rc, 10*time.Second)
		if want := []packet.ReasonCode{0, subFail, 0, subFail, 0, subFail}; !equalCodes(sa.ReasonCodes, want) {
			t.Fatalf("%v: suback %v, want %v", v, sa.ReasonCodes, want)
		}
		for i, topic := range []string{levels(64), length(1024)} {
			rc.send(&packet.Publish{QoS: 1, PacketID: uint16(10 + i), Topic: topic, Retain: true, Payload: []byte("x")})
			if a := expect[*packet.Puback](t, rc, 10*time.Second); a.ReasonCode != 0 {
				t.Fatalf("%v: publish %d levels, %d bytes: puback %v", v, strings.Count(topic, "/")+1, len(topic), a.ReasonCode)
			}
		}
		rc.disconnect()
		for _, topic := range []string{levels(65), length(1025)} {
			rc, _ := rawConnect(t, b.addr, v, "limits-"+v.String(), true, nil)
			rc.send(&packet.Publish{QoS: 1, PacketID: 1, Topic: topic, Retain: true, Payload: []byte("x")})
			if v == packet.V5 {
				if a := expect[*packet.Puback](t, rc, 10*time.Second); a.ReasonCode != packet.TopicNameInvalid {
					t.Fatalf("%v: publish %d levels, %d bytes: puback %v, want 0x90", v, strings.Count(topic, "/")+1, len(topic), a.ReasonCode)
				}
				rc.disconnect()
				continue
			}
			if got := rc.expectClose(10 * time.Second); len(got) != 0 {
				t.Fatalf("%v: publish %d levels, %d bytes: got %v, want the close without an ack", v, strings.Count(topic, "/")+1, len(topic), types(got))
			}
		}
		// The watcher gets only the two within the limits.
		for _, want := range []string{levels(64), length(1024)} {
			p := watcher.nextPublish(10 * time.Second)
			watcher.ackPublish(p)
			if p.Topic != want {
				t.Fatalf("watcher got a %d-level, %d-byte topic, want %d levels, %d bytes",
					strings.Count(p.Topic, "/")+1, len(p.Topic), strings.Count(want, "/")+1, len(want))
			}
		}
	}
	if n := b.srv.Stats().Retained; n != 2 {
		t.Fatalf("%d retained messages, want the 2 within the limits", n)
	}
	// A will on a topic over the limits refuses the CONNECT.
	for _, v := range []packet.Version{packet.V311, packet.V5} {
		want := packet.V3RefusedNotAuthorized
		if v == packet.V5 {
			want = packet.TopicNameInvalid
		}
		refusedWith(t, b, &packet.Connect{Version: v, ClientID: "w", CleanStart: true,
			Will: &packet.Will{Topic: levels(65), Payload: []byte("w")}}, want)
	}
	// 3 filters and 2 names per version, and the 2 wills.
	if n := b.srv.Stats().Denied["topic_limit"]; n != 12 {
		t.Fatalf("topic_limit refusals %d, want 12", n)
	}
}

func equalCodes(a, b []packet.ReasonCode) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// max_subscriptions: a session holds at most that many subscriptions; a
// new one past it gets SUBACK 0x97 (v5) / 0x80 (3.1.1), replacing one it
// has still works, and an unsubscribe makes room. Leaving gives the
// memory back: the tree is empty once the clean session ends.
func TestLimitsSubscriptionsPerSession(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true, MaxSubscriptions: 3})
	for _, v := range []packet.Version{packet.V311, packet.V5} {
		full := packet.V3SubackFailure
		if v == packet.V5 {
			full = packet.QuotaExceeded
		}
		rc, _ := rawConnect(t, b.addr, v, "subs-"+v.String(), true, nil)
		sub := func(id uint16, want []packet.ReasonCode, filters ...string) {
			t.Helper()
			subs := make([]packet.Subscription, len(filters))
			for i, f := range filters {
				subs[i] = packet.Subscription{Filter: f, QoS: 1}
			}
			rc.send(&packet.Subscribe{PacketID: id, Subscriptions: subs})
			if sa := expect[*packet.Suback](t, rc, 10*time.Second); !equalCodes(sa.ReasonCodes, want) {
				t.Fatalf("%v: subscribe %q: %v, want %v", v, filters, sa.ReasonCodes, want)
			}
		}
		sub(1, []packet.ReasonCode{1, 1, 1, full}, "a", "b", "$share/g/c", "d")
		sub(2, []packet.ReasonCode{1, full}, "a", "$share/h/c") // a replacement fits; another group is another subscription
		rc.send(&packet.Unsubscribe{PacketID: 3, Filters: []string{"b"}})
		expect[*packet.Unsuback](t, rc, 10*time.Second)
		sub(4, []packet.ReasonCode{1}, "d")
		rc.disconnect()
	}
	waitSubs(t, b, 0)
	if n := b.srv.Stats().Denied["subscription_limit"]; n != 4 {
		t.Fatalf("subscription_limit refusals %d, want 4", n)
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
