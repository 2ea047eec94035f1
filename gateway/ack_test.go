package gateway_test

import (
	"errors"
	"testing"
	"time"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/internal/testutil"
)

// TestAsyncSinkAcksInOrderWithoutBlocking: acknowledgements that wait for
// an asynchronous sink do not block the publisher's reader, and they go
// out in PUBLISH order whatever the order of the sink's verdicts.
func TestAsyncSinkAcksInOrderWithoutBlocking(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true})
	sink := &heldSink{}
	if err := b.srv.AddSink("cloud", "up/#", sink); err != nil {
		t.Fatal(err)
	}
	rc, _ := rawConnect(t, b.addr, packet.V311, "pub", true, nil)
	for id := uint16(1); id <= 3; id++ {
		rc.send(&packet.Publish{Topic: "up/x", QoS: 1, PacketID: id, Payload: []byte("m")})
	}
	testutil.Eventually(t, 5*time.Second, "three messages in the sink", func() bool { return sink.count() == 3 })

	// The reader is not blocked: a ping is answered while acks wait.
	rc.send(&packet.Pingreq{})
	expect[*packet.Pingresp](t, rc, 5*time.Second)
	rc.noPacket(100 * time.Millisecond)

	// Verdicts out of order; acks in PUBLISH order (as [MQTT-4.6.0-2] asks of
	// a client).
	sink.release(1, nil)
	rc.noPacket(100 * time.Millisecond)
	sink.release(0, nil)
	for id := uint16(1); id <= 2; id++ {
		if a := expect[*packet.Puback](t, rc, 5*time.Second); a.PacketID != id {
			t.Fatalf("puback %d, want %d", a.PacketID, id)
		}
	}
	sink.release(2, nil)
	if a := expect[*packet.Puback](t, rc, 5*time.Second); a.PacketID != 3 {
		t.Fatalf("puback %d, want 3", a.PacketID)
	}
}

// TestAsyncSinkNotStored: a message the sink could not keep is never
// acknowledged as kept: a v5 publisher gets a negative ack, a 3.1.1 one
// (which has none) is disconnected without an ack.
func TestAsyncSinkNotStored(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true})
	sink := &heldSink{}
	b.srv.AddSink("cloud", "up/#", sink)

	t.Run("v5 gets a negative ack", func(t *testing.T) {
		rc, _ := rawConnect(t, b.addr, packet.V5, "p5", true, nil)
		rc.send(&packet.Publish{Topic: "up/x", QoS: 2, PacketID: 9, Payload: []byte("m")})
		testutil.Eventually(t, 5*time.Second, "message in the sink", func() bool { return sink.count() == 1 })
		sink.release(0, errors.New("disk full"))
		rec := expect[*packet.Pubrec](t, rc, 5*time.Second)
		if rec.PacketID != 9 || rec.ReasonCode != packet.ImplementationSpecificError {
			t.Fatalf("pubrec %+v, want id 9 reason 0x83", rec)
		}
	})
	t.Run("v3 is closed without an ack", func(t *testing.T) {
		rc, _ := rawConnect(t, b.addr, packet.V311, "p3", true, nil)
		rc.send(&packet.Publish{Topic: "up/x", QoS: 1, PacketID: 4, Payload: []byte("m")})
		testutil.Eventually(t, 5*time.Second, "message in the sink", func() bool { return sink.count() == 2 })
		sink.release(1, errors.New("disk full"))
		for _, p := range rc.expectClose(5 * time.Second) {
			if p.Type() == packet.PUBACK {
				t.Fatal("a message that was not stored was acknowledged")
			}
		}
		testutil.Eventually(t, 5*time.Second, "close counted", func() bool { return closes(b, "not_stored") == 1 })
	})
}
