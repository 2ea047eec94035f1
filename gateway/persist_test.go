package gateway_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/gateway/store"
	"github.com/edgegw/edgegw/internal/testutil"
)

// stateBroker is a broker whose state lives in dir.
func stateBroker(t *testing.T, dir string, sync store.Sync) (*broker, *store.Store) {
	t.Helper()
	return stateBrokerWindow(t, dir, sync, 5*time.Millisecond)
}

func stateBrokerWindow(t *testing.T, dir string, sync store.Sync, window time.Duration) (*broker, *store.Store) {
	t.Helper()
	return stateBrokerOpts(t, dir, sync, window, gateway.Options{AllowAnonymous: true})
}

// stateBrokerOpts is stateBrokerWindow with options besides the store.
func stateBrokerOpts(t *testing.T, dir string, sync store.Sync, window time.Duration, opts gateway.Options) (*broker, *store.Store) {
	t.Helper()
	st, loaded, err := store.Open(store.Options{Dir: dir, Sync: sync, SyncInterval: window})
	if err != nil {
		t.Fatal(err)
	}
	opts.Store = st
	b := startBroker(t, opts)
	b.srv.Restore(loaded)
	t.Cleanup(func() { b.stop(); st.Close() })
	return b, st
}

// crashCopy copies the state directory as it is now: what a kill -9 at
// this moment would leave (records are written before they are promised).
func crashCopy(t *testing.T, dir string) string {
	t.Helper()
	dst := t.TempDir()
	b, err := os.ReadFile(filepath.Join(dir, "state.log"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dst, "state.log"), b, 0o600)
	return dst
}

// A persistent session's subscriptions and its queued QoS 1 and QoS 2
// messages survive a crash right after the publisher's acks, in every
// sync mode; the subscriber gets them once, in order.
func TestStateQueuedSurviveCrash(t *testing.T) {
	for _, mode := range []store.Sync{store.SyncAlways, store.SyncBatch, store.SyncNone} {
		t.Run(mode.String(), func(t *testing.T) {
			dir := t.TempDir()
			b, _ := stateBroker(t, dir, mode)
			sub := pahoClient(t, b.addr, "actuator", false, nil)
			waitTok(t, sub.Subscribe("cmd/#", 2, func(mqtt.Client, mqtt.Message) {}), "subscribe")
			sub.Disconnect(50)
			pub := pahoClient(t, b.addr, "pub", true, nil)
			for i := range 10 {
				waitTok(t, pub.Publish("cmd/valve", byte(1+i%2), false, fmt.Sprint("open-", i)), "publish")
			}
			waitTok(t, pub.Publish("cfg/mode", 1, true, "eco"), "retained")
			crashed := crashCopy(t, dir) // every ack above has been received

			b2, _ := stateBroker(t, crashed, mode)
			var got collector
			pahoClient(t, b2.addr, "actuator", false, func(o *mqtt.ClientOptions) { o.SetDefaultPublishHandler(got.handle) })
			testutil.Eventually(t, 10*time.Second, "10 queued messages", func() bool { return got.len() >= 10 })
			for i, p := range got.payloads() {
				if p != fmt.Sprint("open-", i) {
					t.Fatalf("after restart got %q", got.payloads())
				}
			}
			// The subscription itself survived: a new message arrives too.
			pub2 := pahoClient(t, b2.addr, "pub", true, nil)
			waitTok(t, pub2.Publish("cmd/valve", 1, false, "after"), "publish")
			testutil.Eventually(t, 10*time.Second, "live message", func() bool { return got.len() == 11 })
			if st := b2.srv.Stats(); st.Retained != 1 {
				t.Fatalf("retained after crash = %d", st.Retained)
			}
		})
	}
}

// Write amplification of the state store: bytes written to the disk per
// payload byte queued for a persistent subscriber that is online (each
// message is queued, sent, acknowledged) and one that was offline.
func TestStateWriteAmplification(t *testing.T) {
	const size = 200
	payload := strings.Repeat("x", size)
	for _, online := range []bool{true, false} {
		n := 2000
		if !online {
			n = 900 // below max_queued_messages (1000): nothing dropped
		}
		t.Run(fmt.Sprint("online=", online), func(t *testing.T) {
			dir := t.TempDir()
			// A race-detector run on a loaded machine may keep the paho
			// subscriber from acking within flow control's 250 ms: the
			// overflow policy would then drop messages, which is not what
			// this test measures.
			b, st := stateBrokerOpts(t, dir, store.SyncBatch, 5*time.Millisecond,
				gateway.Options{AllowAnonymous: true, FlowStall: 30 * time.Second, WriteTimeout: time.Minute})
			var got collector
			sub := pahoClient(t, b.addr, "actuator", false, func(o *mqtt.ClientOptions) { o.SetDefaultPublishHandler(got.handle) })
			waitTok(t, sub.Subscribe("cmd/#", 1, got.handle), "subscribe")
			if !online {
				sub.Disconnect(50)
			}
			pub := pahoClient(t, b.addr, "pub", true, nil)
			toks := make([]mqtt.Token, 0, n)
			for range n {
				toks = append(toks, pub.Publish("cmd/valve", 1, false, payload))
			}
			for _, tok := range toks {
				waitTok(t, tok, "publish")
			}
			if !online {
				pahoClient(t, b.addr, "actuator", false, func(o *mqtt.ClientOptions) { o.SetDefaultPublishHandler(got.handle) })
			}
			testutil.Eventually(t, 20*time.Second, "all delivered", func() bool { return got.len() >= n })
			testutil.Eventually(t, 10*time.Second, "queue empty", func() bool { return b.srv.Stats().Inflight == 0 })
			b.stop()
			st.Close()
			s := st.Stats()
			amp := float64(s.BytesWritten) / float64(n*size)
			t.Logf("online=%v: %d QoS 1 messages of %d B: %d bytes written (%.2f x payload), %d records, %d fsyncs (%.3f per message), %d compactions, log %d B",
				online, n, size, s.BytesWritten, amp, s.Records, s.Fsyncs, float64(s.Fsyncs)/float64(n), s.Compactions, s.LogBytes)
			// Bounded: each record once, plus at most 1/(ratio-1) of it again
			// in snapshots, plus the final snapshot of what is live.
			if s.BytesWritten > s.RecordBytes*4/3+s.LiveBytes+64<<10 {
				t.Fatalf("wrote %d bytes for %d bytes of records", s.BytesWritten, s.RecordBytes)
			}
		})
	}
}

// persistentV5 connects a v5 client with a session expiry of an hour.
func persistentV5(t *testing.T, b *broker, id string, mod func(*packet.Connect)) (*rawClient, *packet.Connack) {
	t.Helper()
	return rawConnect(t, b.addr, packet.V5, id, false, func(cp *packet.Connect) {
		cp.Props.SessionExpiry = 3600
		cp.Props.Set(packet.PropSessionExpiry)
		if mod != nil {
			mod(cp)
		}
	})
}

// QoS 2 state crosses a restart in both directions: an inbound packet id
// awaiting PUBREL is not delivered twice when the publisher resends it,
// and outgoing messages resume where they were: the PUBREL of a released
// one, the PUBLISH (DUP, same packet id, subscription identifier) of an
// unacknowledged one [MQTT-4.4.0-1].
func TestStateQoS2AcrossRestart(t *testing.T) {
	dir := t.TempDir()
	b, st := stateBroker(t, dir, store.SyncBatch)
	sub, _ := persistentV5(t, b, "sub", nil)
	sub.subscribe(1, subID(5), packet.Subscription{Filter: "q2/#", QoS: 2})
	pub, _ := persistentV5(t, b, "pub", nil)
	pub.send(&packet.Publish{QoS: 2, PacketID: 7, Topic: "q2/a", Payload: []byte("A")})
	if r := expect[*packet.Pubrec](t, pub, 10*time.Second); r.PacketID != 7 {
		t.Fatalf("pubrec %+v", r)
	}
	// No PUBREL for 7: the id waits across the restart.
	pub.send(&packet.Publish{QoS: 2, PacketID: 8, Topic: "q2/b", Payload: []byte("B")})
	expect[*packet.Pubrec](t, pub, 10*time.Second)
	pub.send(&packet.Pubrel{PacketID: 8})
	expect[*packet.Pubcomp](t, pub, 10*time.Second)

	a := sub.nextPublish(10 * time.Second)
	bb := sub.nextPublish(10 * time.Second)
	if string(a.Payload) != "A" || string(bb.Payload) != "B" || a.QoS != 2 {
		t.Fatalf("subscriber got %q %q", a.Payload, bb.Payload)
	}
	sub.send(&packet.Pubrec{PacketID: a.PacketID}) // A released, no PUBCOMP; B unacknowledged
	if r := expect[*packet.Pubrel](t, sub, 10*time.Second); r.PacketID != a.PacketID {
		t.Fatalf("pubrel %+v", r)
	}
	sub.close()
	pub.close()
	testutil.Eventually(t, 10*time.Second, "both offline", func() bool { return b.srv.Stats().SessionsConnected == 0 })
	b.stop()
	st.Close() // SIGTERM

	b2, _ := stateBroker(t, dir, store.SyncBatch)
	pub2, ack := persistentV5(t, b2, "pub", nil)
	if !ack.SessionPresent {
		t.Fatal("publisher's session not present after restart")
	}
	sub2, ack := persistentV5(t, b2, "sub", nil)
	if !ack.SessionPresent {
		t.Fatal("subscriber's session not present after restart")
	}
	if r := expect[*packet.Pubrel](t, sub2, 10*time.Second); r.PacketID != a.PacketID {
		t.Fatalf("first after restart: pubrel %+v, want id %d", r, a.PacketID)
	}
	sub2.send(&packet.Pubcomp{PacketID: a.PacketID})
	p := sub2.nextPublish(10 * time.Second)
	if string(p.Payload) != "B" || !p.Dup || p.PacketID != bb.PacketID || len(p.Props.SubscriptionIDs) != 1 || p.Props.SubscriptionIDs[0] != 5 {
		t.Fatalf("resent %+v, want B with DUP, id %d, subscription id 5", p, bb.PacketID)
	}
	sub2.send(&packet.Pubrec{PacketID: p.PacketID})
	expect[*packet.Pubrel](t, sub2, 10*time.Second)
	sub2.send(&packet.Pubcomp{PacketID: p.PacketID})

	// The publisher resends 7: acknowledged again, not delivered again
	// [MQTT-4.3.3-10]; the marker behind it is the next thing delivered.
	pub2.send(&packet.Publish{Dup: true, QoS: 2, PacketID: 7, Topic: "q2/a", Payload: []byte("A")})
	expect[*packet.Pubrec](t, pub2, 10*time.Second)
	pub2.send(&packet.Pubrel{PacketID: 7})
	expect[*packet.Pubcomp](t, pub2, 10*time.Second)
	pub2.pub1(9, &packet.Publish{Topic: "q2/marker", Payload: []byte("M")})
	if m := sub2.nextPublish(10 * time.Second); string(m.Payload) != "M" {
		t.Fatalf("after the resent id 7 the subscriber got %q, want only the marker", m.Payload)
	}
}

// A delayed will and the session expiry deadline are kept: after a
// restart the will is published when due and the session expires.
func TestStateWillAndExpiryAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	b, st := stateBroker(t, dir, store.SyncBatch)
	w, _ := rawConnect(t, b.addr, packet.V5, "dev", false, func(cp *packet.Connect) {
		cp.Props.SessionExpiry = 2
		cp.Props.Set(packet.PropSessionExpiry)
		cp.Will = &packet.Will{Topic: "will/dev", Payload: []byte("gone"), QoS: 1}
		cp.Will.Props.WillDelay = 1
		cp.Will.Props.Set(packet.PropWillDelay)
	})
	w.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "x", QoS: 1})
	w.close() // abnormal: the will waits 1s
	testutil.Eventually(t, 10*time.Second, "offline", func() bool { return b.srv.Stats().SessionsDisconnected == 1 })
	b.stop()
	st.Close()

	b2, _ := stateBroker(t, dir, store.SyncBatch)
	if got := b2.srv.Stats().SessionsDisconnected; got != 1 {
		t.Fatalf("restored %d sessions", got)
	}
	var got collector
	watcher := pahoClient(t, b2.addr, "watcher", true, nil)
	waitTok(t, watcher.Subscribe("will/#", 1, got.handle), "subscribe")
	testutil.Eventually(t, 10*time.Second, "will after restart", func() bool { return got.len() == 1 })
	testutil.Eventually(t, 10*time.Second, "session expiry after restart", func() bool { return b2.srv.Stats().Expired == 1 })
}

// Deadlines are wall-clock: a session whose expiry passed while the broker
// was down expires at start and its will is published; one that was
// connected when the broker stopped counts its expiry from the restart.
// $SYS retained messages are not kept (they are regenerated).
func TestStateDeadlinesPassedWhileDown(t *testing.T) {
	dir := t.TempDir()
	st, _, err := store.Open(store.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	long := time.Now().Add(-2 * time.Hour).UnixNano()
	st.SessionPut("gone-while-down", store.SessionMeta{Expiry: time.Hour, DisconnectedAt: long,
		Will: &store.Msg{Topic: "will/gone", Payload: []byte("bye"), QoS: 1, Retain: true}, WillAt: long})
	st.SubPut("gone-while-down", store.Sub{Filter: "a/#", QoS: 1})
	st.SessionPut("was-connected", store.SessionMeta{Expiry: time.Hour})
	st.Close()

	b, bst := stateBroker(t, dir, store.SyncBatch)
	s := b.srv.Stats()
	if s.Expired != 1 || s.SessionsDisconnected != 1 || s.Subscriptions != 0 || s.Retained != 1 {
		t.Fatalf("after restore: %+v (want the expired session gone, its retained will published, the other kept)", s)
	}
	b.srv.Publish(&gateway.Message{Topic: "$SYS/broker/x", Payload: []byte("1"), Retain: true})
	b.stop()
	bst.Close()
	b2, _ := stateBroker(t, dir, store.SyncBatch)
	if s := b2.srv.Stats(); s.Retained != 1 || s.SessionsDisconnected != 1 {
		t.Fatalf("second restart: %+v (want the will only, not $SYS; was-connected still there)", s)
	}
}

// A publisher whose messages reach only clean sessions waits for nothing:
// with a group commit that would take an hour its PUBACK still comes.
func TestStateCleanSessionsWaitForNothing(t *testing.T) {
	b, _ := stateBrokerWindow(t, t.TempDir(), store.SyncBatch, time.Hour)
	var got collector
	sub := pahoClient(t, b.addr, "clean-sub", true, nil)
	waitTok(t, sub.Subscribe("x/#", 1, got.handle), "subscribe")
	pub := pahoClient(t, b.addr, "pub", true, nil)
	waitTok(t, pub.Publish("x/1", 1, false, "v"), "publish to a clean session")
	testutil.Eventually(t, 10*time.Second, "delivery", func() bool { return got.len() == 1 })
}
