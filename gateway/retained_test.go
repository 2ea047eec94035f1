package gateway_test

import (
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/internal/testutil"
)

// publishRetained sends n QoS 0 retained messages topic(i) with a 64-byte
// payload over one connection, in batches, then waits for a PINGRESP:
// the broker has handled them all.
func publishRetained(t *testing.T, addr string, n int, topic func(int) string) {
	t.Helper()
	pub, _ := rawConnect(t, addr, packet.V311, "", true, nil)
	var buf []byte
	for i := range n {
		var err error
		buf, err = packet.Append(buf, &packet.Publish{Retain: true, Topic: topic(i), Payload: []byte(fmt.Sprintf("old-%060d", i))}, packet.V311)
		if err != nil {
			t.Fatal(err)
		}
		if len(buf) > 64<<10 || i == n-1 {
			if err := pub.write(buf); err != nil {
				t.Fatal(err)
			}
			buf = buf[:0]
		}
	}
	pub.send(&packet.Pingreq{})
	expect[*packet.Pingresp](t, pub, 30*time.Second)
	pub.disconnect()
}

// A new subscriber to '#' gets every one of 100,000 retained messages,
// fed into its queue as the queue drains: the queue's limit (1,000) holds
// throughout and nothing is dropped. Topics that get a live message while
// the feed runs never get their (older) retained message after it.
func TestRetainedSetSentAsQueueDrains(t *testing.T) {
	const n, live = 100_000, 300
	const limit = 1000
	b := startBroker(t, gateway.Options{AllowAnonymous: true, MaxQueuedMessages: limit})
	topic := func(i int) string { return fmt.Sprintf("r/%d/v", i) }
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before := heap()
	publishRetained(t, b.addr, n, topic)
	t.Logf("%d retained messages of 64 B: the heap grew %.1f MiB", n, float64(heap()-before)/(1<<20))
	if got := b.srv.Stats().Retained; got != n {
		t.Fatalf("%d retained, want %d", got, n)
	}

	// The subscriber's reader stops taking packets once rc.in (8,192) is
	// full: the broker's writer blocks, the queue fills and the feed waits.
	sub, _ := rawConnect(t, b.addr, packet.V5, "dashboard", true, nil)
	sub.send(&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: "#", QoS: 0}}})
	var peak atomic.Int64
	sample := func() {
		if q := b.srv.Stats().QueuedMessages; q > peak.Load() {
			peak.Store(q)
		}
	}
	testutil.Eventually(t, 30*time.Second, "the subscriber's reader is full", func() bool {
		sample()
		return len(sub.in) == cap(sub.in)
	})
	// Live messages for topics whose retained message may not have been
	// sent yet.
	pub, _ := rawConnect(t, b.addr, packet.V311, "", true, nil)
	for i := range live {
		pub.send(&packet.Publish{Topic: topic(i), Payload: []byte("new")})
	}
	pub.send(&packet.Pingreq{})
	expect[*packet.Pingresp](t, pub, 10*time.Second)

	seen := make(map[string]int, n)
	fresh := make(map[string]bool, live)
	updated := make(map[string]bool, live)
	for i := range live {
		updated[topic(i)] = true
	}
	news, others := 0, 0
	for others < n-live || news < live {
		sample()
		pk, err := sub.nextErr(30 * time.Second)
		if err != nil {
			t.Fatalf("after %d retained and %d live: %v (stats %+v)", len(seen), news, err, b.srv.Stats())
		}
		switch p := pk.(type) {
		case *packet.Suback:
		case *packet.Publish:
			if string(p.Payload) == "new" {
				fresh[p.Topic] = true
				news++
				continue
			}
			if fresh[p.Topic] {
				t.Fatalf("%s: its older retained message arrived after a newer live one", p.Topic)
			}
			if !p.Retain || !strings.HasPrefix(string(p.Payload), "old-") {
				t.Fatalf("%s: retain %v payload %.10q", p.Topic, p.Retain, p.Payload)
			}
			if seen[p.Topic]++; seen[p.Topic] == 1 && !updated[p.Topic] {
				others++
			}
		default:
			t.Fatalf("got %T", p)
		}
	}
	// Topics with a live message may have had their retained message
	// before it, or not at all; every other one exactly once.
	for i := live; i < n; i++ {
		if c := seen[topic(i)]; c != 1 {
			t.Fatalf("%s received %d times", topic(i), c)
		}
	}
	st := b.srv.Stats()
	for reason, d := range st.Drops {
		if d != 0 {
			t.Errorf("%d dropped (%s)", d, reason)
		}
	}
	if peak.Load() > limit {
		t.Errorf("the queue held %d messages, over its limit %d", peak.Load(), limit)
	}
	t.Logf("%d retained messages of 64 B to a new '#' subscriber: %d retained and %d live received (%d retained skipped as older than a live one), queue peak %d (limit %d)",
		n, len(seen), news, n-len(seen), peak.Load(), limit)
}

// The retained store keeps at most limits.max_retained_messages topics: a
// flood of new topics past it is delivered but not retained and counted
// (retained_refused); a stored topic's update and deletion still apply,
// and a deletion makes room for a new topic.
func TestRetainedStoreBound(t *testing.T) {
	const bound, flood = 500, 5000
	b := startBroker(t, gateway.Options{AllowAnonymous: true, MaxRetainedMessages: bound})
	var delivered atomic.Int64
	watcher := rawDial(t, b.addr, packet.V311)
	watcher.hook = func(_ *rawClient, p packet.Packet) bool {
		_, pub := p.(*packet.Publish)
		if pub {
			delivered.Add(1)
		}
		return pub
	}
	watcher.connect(&packet.Connect{ClientID: "watcher", CleanStart: true, KeepAlive: 60})
	watcher.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "flood/#"})
	publishRetained(t, b.addr, flood, func(i int) string { return fmt.Sprintf("flood/%d", i) })
	st := b.srv.Stats()
	if st.Retained != bound || st.RetainedRefused != flood-bound {
		t.Fatalf("retained %d, refused %d; want %d and %d", st.Retained, st.RetainedRefused, bound, flood-bound)
	}
	// Routed all the same: each one delivered or (QoS 0 to a subscriber
	// behind) counted as dropped.
	testutil.Eventually(t, 10*time.Second, "every flood message delivered or dropped", func() bool {
		return delivered.Load()+drops(b, "queue_full") == flood
	})
	if delivered.Load() <= bound {
		t.Fatalf("%d of %d delivered: no more than the retained bound", delivered.Load(), flood)
	}

	pub, _ := rawConnect(t, b.addr, packet.V311, "", true, nil)
	pub.send(&packet.Publish{QoS: 1, PacketID: 1, Retain: true, Topic: "flood/0", Payload: []byte("updated")})
	expect[*packet.Puback](t, pub, 10*time.Second)
	pub.send(&packet.Publish{QoS: 1, PacketID: 2, Retain: true, Topic: "flood/1"}) // deleted: room for one
	expect[*packet.Puback](t, pub, 10*time.Second)
	pub.send(&packet.Publish{QoS: 1, PacketID: 3, Retain: true, Topic: "late/topic", Payload: []byte("fits")})
	expect[*packet.Puback](t, pub, 10*time.Second)
	if st := b.srv.Stats(); st.Retained != bound || st.RetainedRefused != flood-bound {
		t.Fatalf("after update, delete and add: retained %d, refused %d", st.Retained, st.RetainedRefused)
	}
	sub, _ := rawConnect(t, b.addr, packet.V311, "", true, nil)
	sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "flood/0"}, packet.Subscription{Filter: "late/topic"})
	got := map[string]string{}
	for range 2 {
		p := sub.nextPublish(10 * time.Second)
		got[p.Topic] = string(p.Payload)
	}
	if got["flood/0"] != "updated" || got["late/topic"] != "fits" {
		t.Fatalf("retained after the flood: %v", got)
	}

	// The bytes bound: room for 10 messages of 100 B (and their overhead).
	b2 := startBroker(t, gateway.Options{AllowAnonymous: true, MaxRetainedBytes: 10 * (512 + 100 + 9)})
	pub2, _ := rawConnect(t, b2.addr, packet.V311, "", true, nil)
	for i := range 20 {
		pub2.send(&packet.Publish{QoS: 1, PacketID: uint16(i + 1), Retain: true, Topic: fmt.Sprintf("big/%04d", i), Payload: make([]byte, 100)})
		expect[*packet.Puback](t, pub2, 10*time.Second)
	}
	if st := b2.srv.Stats(); st.Retained != 10 || st.RetainedRefused != 10 {
		t.Fatalf("under the bytes bound: retained %d, refused %d; want 10 and 10", st.Retained, st.RetainedRefused)
	}
}

// TestRetainedBeforeLaterLive: retained messages that fit in half the
// queue are queued at SUBSCRIBE: a message published after the SUBSCRIBE
// (here by the subscriber itself, in the same write, so it is routed
// before the broker writes anything) comes after all of them.
func TestRetainedBeforeLaterLive(t *testing.T) {
	const n = 400 // under half of the default 1,000
	b := startBroker(t, gateway.Options{AllowAnonymous: true})
	publishRetained(t, b.addr, n, func(i int) string { return fmt.Sprintf("r/%d", i) })
	sub, _ := rawConnect(t, b.addr, packet.V311, "", true, nil)
	both, _ := packet.Append(nil, &packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: "r/#"}, {Filter: "marker"}}}, packet.V311)
	both, _ = packet.Append(both, &packet.Publish{Topic: "marker", Payload: []byte("m")}, packet.V311)
	if err := sub.write(both); err != nil {
		t.Fatal(err)
	}
	expect[*packet.Suback](t, sub, 10*time.Second)
	for i := range n {
		if p := sub.nextPublish(10 * time.Second); p.Topic == "marker" {
			t.Fatalf("the later message arrived after %d of %d retained messages", i, n)
		}
	}
	if p := sub.nextPublish(10 * time.Second); p.Topic != "marker" {
		t.Fatalf("got %s, want the marker", p.Topic)
	}
}
