package gateway_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/internal/testutil"
)

// TestFlowControlNoLossWhileSubscriberKeepsUp: fan-in of QoS 1 and 2 much
// faster than one subscriber's window drains. Acknowledged messages are
// never dropped: the publishers' acks wait for the subscriber's queue to
// drain (their own windows slow them down) instead of the queue overflowing.
//
// "Keeps up" is the stall guard (FlowStall, at most WriteTimeout): a
// subscriber whose oldest unacknowledged message is older is given up on,
// and then the overflow policy rightly drops (TestFlowControlStuckSubscriber's
// subject, not this one's). Any such bound is a wall-clock race with the
// paho subscriber's acks, which a loaded machine loses now and then (QoS 2
// most, with two round trips a message). So the guard is an hour, far past
// this test's own deadlines: the subscriber keeps up by definition whatever
// the machine's speed, and the outcome depends only on the events
// (publishes, acks, the queue draining). That the guard never fired is
// checked too.
func TestFlowControlNoLossWhileSubscriberKeepsUp(t *testing.T) {
	for _, qos := range []byte{1, 2} {
		t.Run(fmt.Sprintf("qos%d", qos), func(t *testing.T) {
			b := startBroker(t, gateway.Options{AllowAnonymous: true, MaxQueuedMessages: 40, MaxInflight: 4,
				FlowStall: time.Hour, WriteTimeout: time.Hour})
			var got collector
			sub := pahoClient(t, b.addr, "sink", true, nil)
			waitTok(t, sub.Subscribe("fan/#", qos, got.handle), "subscribe")

			const pubs, each = 4, 300
			var wg sync.WaitGroup
			errs := make(chan error, pubs)
			for p := 0; p < pubs; p++ {
				pub := pahoClient(t, b.addr, fmt.Sprintf("pub%d", p), true, nil)
				wg.Add(1)
				go func() {
					defer wg.Done()
					toks := make([]mqtt.Token, 0, each)
					for i := 0; i < each; i++ { // all in flight at once: no client-side window
						toks = append(toks, pub.Publish(fmt.Sprintf("fan/%d", p), qos, false, fmt.Sprint(i)))
					}
					for _, tok := range toks {
						if !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
							errs <- fmt.Errorf("publish not acknowledged: %v", tok.Error())
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			// A drop ends the wait at once: a message dropped and one stuck in
			// a queue without a writer are different failures.
			testutil.Eventually(t, 30*time.Second, "every acknowledged message delivered", func() bool {
				return got.len() >= pubs*each || drops(b, "queue_full") > 0
			})
			if n := drops(b, "queue_full"); n != 0 {
				st := b.srv.Stats()
				t.Fatalf("%d acknowledged messages dropped (queue_full) while the subscriber kept up (slow consumers %d, received %d)", n, st.SlowConsumers, got.len())
			}
			if got.len() != pubs*each {
				t.Fatalf("received %d, want %d", got.len(), pubs*each)
			}
			if st := b.srv.Stats(); st.SlowConsumers != 0 {
				t.Fatalf("the subscriber was judged slow (%d) with an hour's stall guard", st.SlowConsumers)
			}
		})
	}
}

// TestFlowControlStuckSubscriber: a subscriber that reads but never acks
// cannot hold publishers: after write_timeout without progress it is marked
// slow, the waiting acks go out and the overflow policy applies. FlowStall
// (limits.slow_subscriber_after) of an hour: at most write_timeout takes
// effect (docs/config.md), or the publishes below would wait an hour.
func TestFlowControlStuckSubscriber(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true, MaxQueuedMessages: 20, MaxInflight: 2,
		WriteTimeout: 300 * time.Millisecond, FlowStall: time.Hour})
	stuck, _ := rawConnect(t, b.addr, packet.V311, "stuck", true, nil)
	stuck.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "s/#", QoS: 1})
	// Its reader (started by connect) keeps reading, so writes never time
	// out, but it never acks.

	pub := pahoClient(t, b.addr, "pub", true, nil)
	toks := make([]mqtt.Token, 0, 200)
	for i := 0; i < 200; i++ {
		toks = append(toks, pub.Publish("s/x", 1, false, fmt.Sprint(i)))
	}
	for i, tok := range toks {
		if !tok.WaitTimeout(20*time.Second) || tok.Error() != nil {
			t.Fatalf("publish %d held by a stuck subscriber: %v", i, tok.Error())
		}
	}
	st := b.srv.Stats()
	if st.SlowConsumers < 1 {
		t.Fatalf("SlowConsumers = %d, want the stuck subscriber counted", st.SlowConsumers)
	}
	if st.Drops["queue_full"] == 0 {
		t.Fatal("no queue_full drops for a subscriber that never acks")
	}
	if st.QueuedMessages > 20 {
		t.Fatalf("queue of a slow subscriber holds %d, above max_queued_messages 20", st.QueuedMessages)
	}
}

// TestFlowControlNotForOfflineSessions: publishers never wait for a
// subscriber that is not connected; its persistent session gets the
// overflow policy.
func TestFlowControlNotForOfflineSessions(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true, MaxQueuedMessages: 20})
	away := pahoClient(t, b.addr, "away", false, nil)
	waitTok(t, away.Subscribe("o/#", 1, nil), "subscribe")
	away.Disconnect(50)
	testutil.Eventually(t, 5*time.Second, "session offline", func() bool { return b.srv.Stats().SessionsDisconnected == 1 })

	pub := pahoClient(t, b.addr, "pub", true, nil)
	for i := 0; i < 100; i++ {
		waitTok(t, pub.Publish("o/x", 1, false, fmt.Sprint(i)), "publish")
	}
	if n := drops(b, "queue_full"); n != 80 {
		t.Fatalf("queue_full drops = %d, want 80 (100 published, 20 kept)", n)
	}
}

// TestNoDeadlockFlowControlAndFailingSink: the lock order (doc.go) holds
// with one v5 client subscribed to a topic it publishes to (flow
// control opens its ack slots while routing) and QoS 2 messages whose sink
// fails from another goroutine (negative acks and QoS 2 state updates).
// The broker must stay responsive.
func TestNoDeadlockFlowControlAndFailingSink(t *testing.T) {
	// The client floods without waiting for acks: it is allowed to by a
	// Receive Maximum above what it sends (the broker enforces it).
	b := startBroker(t, gateway.Options{AllowAnonymous: true, MaxInflight: 1, ReceiveMaximum: 65535, MaxQueuedMessages: 4})
	sink := &failingSink{}
	// The broker first: its readers may still be handing the flood's last
	// messages to the sink (wg.Add) when the test returns, and a
	// WaitGroup must not be waited on while it can still be added to.
	defer func() { b.stop(); sink.wg.Wait() }()
	b.srv.AddSink("cloud", "s", sink)
	rc := ackingSubscriber(t, b.addr, packet.V5, "loop", packet.Subscription{Filter: "t", QoS: 1})
	for i := 0; i < 2000; i++ {
		id := uint16(i%60000 + 1)
		if i%2 == 0 {
			rc.send(&packet.Publish{Topic: "s", QoS: 2, PacketID: id, Payload: []byte("x")})
		} else {
			rc.send(&packet.Publish{Topic: "t", QoS: 1, PacketID: id, Payload: []byte("y")})
		}
	}
	// Responsive: Stats takes every session lock; a ping needs the reader.
	done := make(chan struct{})
	go func() { b.srv.Stats(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Stats blocked: the broker is deadlocked")
	}
	rc.send(&packet.Pingreq{})
	deadline := time.After(15 * time.Second)
	for {
		select {
		case p := <-rc.in:
			if p.Type() == packet.PINGRESP {
				return
			}
		case <-deadline:
			t.Fatal("no PINGRESP: the connection is wedged")
		}
	}
}
