package gateway_test

import (
	"errors"
	"testing"
	"time"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/internal/testutil"
)

// TestQoS2DuplicateWaitsForTheSink: a QoS 2 message resent (DUP) on a new
// connection while the sink still has not kept the original is not
// acknowledged before the sink's verdict; if the sink fails, the resend is
// refused, so nothing acknowledged is lost.
func TestQoS2DuplicateWaitsForTheSink(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true})
	sink := &heldSink{}
	b.srv.AddSink("cloud", "up/#", sink)

	rc, _ := rawConnect(t, b.addr, packet.V5, "p", false, func(cp *packet.Connect) {
		cp.Props.SessionExpiry = 60
		cp.Props.Set(packet.PropSessionExpiry)
	})
	rc.send(&packet.Publish{Topic: "up/x", QoS: 2, PacketID: 7, Payload: []byte("m")})
	testutil.Eventually(t, 5*time.Second, "message in the sink", func() bool { return sink.count() == 1 })
	rc.close()

	rc2, ack := rawConnect(t, b.addr, packet.V5, "p", false, func(cp *packet.Connect) {
		cp.Props.SessionExpiry = 60
		cp.Props.Set(packet.PropSessionExpiry)
	})
	if !ack.SessionPresent {
		t.Fatal("session not resumed")
	}
	rc2.send(&packet.Publish{Topic: "up/x", QoS: 2, PacketID: 7, Dup: true, Payload: []byte("m")})
	rc2.noPacket(200 * time.Millisecond) // no PUBREC before the verdict
	sink.release(0, errors.New("disk full"))
	rec := expect[*packet.Pubrec](t, rc2, 5*time.Second)
	if rec.PacketID != 7 || !rec.ReasonCode.IsError() {
		t.Fatalf("pubrec %+v after the sink failed, want id 7 with an error reason", rec)
	}
	// The client sends it again: now it is a fresh message, kept this time.
	rc2.send(&packet.Publish{Topic: "up/x", QoS: 2, PacketID: 7, Dup: true, Payload: []byte("m")})
	testutil.Eventually(t, 5*time.Second, "message in the sink again", func() bool { return sink.count() == 2 })
	sink.release(1, nil)
	if rec := expect[*packet.Pubrec](t, rc2, 5*time.Second); rec.PacketID != 7 || rec.ReasonCode.IsError() {
		t.Fatalf("pubrec %+v, want success", rec)
	}
}

// TestReceiveMaximumCountsDeniedPublishes: a refused QoS 1/2 PUBLISH
// (denied: $SYS or ACL, or over the topic limits) is a flow of its own
// until its ack, and its ack closes only that flow, never one it did not
// open: a client interleaving denied publishes cannot keep more QoS 2
// flows open than the Receive Maximum it was told, and is cut (0x93) at
// the latest on its fifth open flow. Found in review, when the ack of a
// refused publish closed an open flow.
func TestReceiveMaximumCountsDeniedPublishes(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true, MaxInflight: 4})
	rc, _ := rawConnect(t, b.addr, packet.V5, "rm-bypass", true, nil)
	id := uint16(1)
	qos2 := func() (cut bool) {
		rc.send(&packet.Publish{Topic: "x", QoS: 2, PacketID: id})
		id++
		if p := rc.next(10 * time.Second); p.Type() != packet.PUBREC {
			if d, ok := p.(*packet.Disconnect); ok && d.ReasonCode == packet.ReceiveMaximumExceeded {
				return true // enforced
			}
			t.Fatalf("got %T", p)
		}
		return false
	}
	for range 3 { // 3 open QoS 2 flows (no PUBREL)
		qos2()
	}
	for range 5 { // each refused publish "closes" a flow that was never open
		rc.send(&packet.Publish{Topic: "$SYS/x", QoS: 1, PacketID: 1000 + id})
		switch p := rc.next(10 * time.Second).(type) {
		case *packet.Puback:
		case *packet.Disconnect:
			if p.ReasonCode == packet.ReceiveMaximumExceeded {
				return // the refused publish counted too: enforced
			}
			t.Fatalf("disconnect %v", p.ReasonCode)
		default:
			t.Fatalf("got %T", p)
		}
		if qos2() {
			return
		}
	}
	rc.send(&packet.Pingreq{})
	expect[*packet.Pingresp](t, rc, 10*time.Second)
	t.Fatalf("%d QoS 2 flows open (no PUBREL sent) with Receive Maximum 4, and no DISCONNECT 0x93", id-1)
}

// TestReceiveMaximumEnforced: a v5 client that keeps more QoS 2 flows open
// than the Receive Maximum in CONNACK is disconnected with 0x93
// [MQTT-3.3.4-7]; one that stays within it is not. QoS 1 counts until the
// PUBACK is sent (here held by a sink).
func TestReceiveMaximumEnforced(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true, MaxInflight: 4})
	t.Run("qos2_over", func(t *testing.T) {
		rc, ack := rawConnect(t, b.addr, packet.V5, "rm-over", true, nil)
		if ack.Props.ReceiveMaximum != 4 {
			t.Fatalf("receive maximum %d, want 4", ack.Props.ReceiveMaximum)
		}
		for id := uint16(1); id <= 4; id++ {
			rc.send(&packet.Publish{Topic: "x", QoS: 2, PacketID: id})
			expect[*packet.Pubrec](t, rc, 10*time.Second)
		}
		// A resend of an open flow is not a new one.
		rc.send(&packet.Publish{Topic: "x", QoS: 2, PacketID: 4, Dup: true})
		expect[*packet.Pubrec](t, rc, 10*time.Second)
		rc.send(&packet.Publish{Topic: "x", QoS: 2, PacketID: 5})
		d := expect[*packet.Disconnect](t, rc, 10*time.Second)
		if d.ReasonCode != packet.ReceiveMaximumExceeded {
			t.Fatalf("disconnect reason %v, want receive maximum exceeded", d.ReasonCode)
		}
	})
	t.Run("qos2_within", func(t *testing.T) {
		rc, _ := rawConnect(t, b.addr, packet.V5, "rm-within", true, nil)
		for round := range 3 {
			for i := range 4 {
				rc.send(&packet.Publish{Topic: "x", QoS: 2, PacketID: uint16(round*4 + i + 1)})
			}
			for range 4 {
				expect[*packet.Pubrec](t, rc, 10*time.Second)
			}
			for i := range 4 {
				rc.send(&packet.Pubrel{PacketID: uint16(round*4 + i + 1)})
			}
			for range 4 {
				expect[*packet.Pubcomp](t, rc, 10*time.Second)
			}
		}
		rc.send(&packet.Pingreq{})
		expect[*packet.Pingresp](t, rc, 10*time.Second)
	})
	t.Run("qos1_held_by_sink", func(t *testing.T) {
		sink := &heldSink{}
		if err := b.srv.AddSink("held", "held/#", sink); err != nil {
			t.Fatal(err)
		}
		defer b.srv.RemoveSink("held", "held/#")
		rc, _ := rawConnect(t, b.addr, packet.V5, "rm-qos1", true, nil)
		for id := uint16(1); id <= 4; id++ {
			rc.send(&packet.Publish{Topic: "held/x", QoS: 1, PacketID: id})
		}
		testutil.Eventually(t, 10*time.Second, "four messages held", func() bool { return sink.count() == 4 })
		sink.release(0, nil) // one PUBACK out: one more may come
		expect[*packet.Puback](t, rc, 10*time.Second)
		rc.send(&packet.Publish{Topic: "held/x", QoS: 1, PacketID: 5})
		testutil.Eventually(t, 10*time.Second, "the fifth held", func() bool { return sink.count() == 5 })
		rc.send(&packet.Publish{Topic: "held/x", QoS: 1, PacketID: 6})
		d := expect[*packet.Disconnect](t, rc, 10*time.Second)
		if d.ReasonCode != packet.ReceiveMaximumExceeded {
			t.Fatalf("disconnect reason %v, want receive maximum exceeded", d.ReasonCode)
		}
		for i := 1; i < 5; i++ {
			sink.release(i, nil)
		}
	})
}

func TestQoS2InboundDuplicate(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true})
	sub := ackingSubscriber(t, b.addr, packet.V311, "q2-sub", packet.Subscription{Filter: "q2/#", QoS: 2})

	for _, v := range []packet.Version{packet.V311, packet.V5} {
		t.Run(v.String(), func(t *testing.T) {
			topic := "q2/" + v.String()
			id := "q2-pub-" + v.String()
			var mod func(*packet.Connect)
			if v == packet.V5 {
				mod = withExpiry(60)
			}
			pub, _ := rawConnect(t, b.addr, v, id, false, mod)
			m := &packet.Publish{QoS: 2, PacketID: 7, Topic: topic, Payload: []byte("one")}
			pub.send(m)
			expect[*packet.Pubrec](t, pub, 10*time.Second)
			dup := *m
			dup.Dup = true
			pub.send(&dup) // PUBREC lost, say: sent again
			expect[*packet.Pubrec](t, pub, 10*time.Second)

			// Reconnect (persistent) before PUBREL: still the same message.
			pub.conn.Close()
			pub2, ack := rawConnect(t, b.addr, v, id, false, mod)
			if !ack.SessionPresent {
				t.Fatal("session not present")
			}
			pub2.send(&dup)
			expect[*packet.Pubrec](t, pub2, 10*time.Second)
			pub2.send(&packet.Pubrel{PacketID: 7})
			if c := expect[*packet.Pubcomp](t, pub2, 10*time.Second); c.PacketID != 7 || c.ReasonCode != 0 {
				t.Fatalf("pubcomp %+v", c)
			}
			// The id is free again: a new message with it is delivered.
			pub2.send(&packet.Publish{QoS: 2, PacketID: 7, Topic: topic, Payload: []byte("two")})
			expect[*packet.Pubrec](t, pub2, 10*time.Second)
			pub2.send(&packet.Pubrel{PacketID: 7})
			expect[*packet.Pubcomp](t, pub2, 10*time.Second)

			for _, want := range []string{"one", "two"} {
				if p := sub.nextPublish(10 * time.Second); string(p.Payload) != want || p.Topic != topic {
					t.Fatalf("got %q on %q, want %q (exactly once)", p.Payload, p.Topic, want)
				}
			}
			pub2.send(&packet.Disconnect{Props: packet.Properties{Present: 1 << packet.PropSessionExpiry}})
			pub2.expectClose(10 * time.Second)
			c, _ := rawConnect(t, b.addr, v, id, true, nil)
			c.disconnect()
		})
	}
	// Nothing else came.
	m, _ := rawConnect(t, b.addr, packet.V311, "q2-marker", true, nil)
	m.send(&packet.Publish{Topic: "q2/marker", Payload: []byte("m")})
	if p := sub.nextPublish(10 * time.Second); p.Topic != "q2/marker" {
		t.Fatalf("got %q %q, want the marker", p.Topic, p.Payload)
	}
}
