package bridge

import (
	"context"
	"io"
	"testing"

	"github.com/eclipse/paho.golang/packets"

	"github.com/edgegw/edgegw/bridge/spool"
)

// TestSession5PublishAvoidsRequestIDs: over MQTT 5 a SUBSCRIBE holds its
// packet id until its SUBACK or the connection's end; meanwhile a QoS 1
// publish whose own id (wireID of its record) that is takes another, and
// a QoS 2 one waits for it [MQTT-2.2.1-3].
func TestSession5PublishAvoidsRequestIDs(t *testing.T) {
	s := newSession5(func(*flow5) {})
	s.conn = io.Discard // connected (ConAckReceived)
	subscribe := func() uint16 {
		sub := &packets.Subscribe{Subscriptions: []packets.SubOptions{{Topic: "cmd/#", QoS: 1}}}
		if err := s.AddToSession(context.Background(), sub, make(chan packets.ControlPacket, 1)); err != nil {
			t.Fatal(err)
		}
		return sub.PacketID
	}
	id := subscribe()
	rec := spool.ID(id) // wireID(rec) == id
	if f, wait := s.begin(rec, 1, 0, 10); f == nil || f.id == id || wait != nil {
		t.Fatalf("QoS 1 record %d while a SUBSCRIBE holds id %d: flow %+v, wait %v", rec, id, f, wait)
	}
	f, wait := s.begin(rec+65535, 2, 0, 10)
	if f != nil || wait == nil {
		t.Fatalf("QoS 2 record %d while a SUBSCRIBE holds its id %d: flow %+v, want to wait", rec+65535, id, f)
	}
	suback := packets.NewControlPacket(packets.SUBACK)
	suback.Content.(*packets.Suback).PacketID = id
	if err := s.PacketReceived(suback, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wait:
	default:
		t.Fatal("the QoS 2 publish still waits after the SUBACK")
	}
	if f, wait := s.begin(rec+65535, 2, 0, 10); f == nil || f.id != id || wait != nil {
		t.Fatalf("after the SUBACK QoS 2 record %d: flow %+v, wait %v; want id %d", rec+65535, f, wait, id)
	}

	id = subscribe()
	_, wait = s.begin(spool.ID(id)+2*65535, 2, 0, 10)
	if wait == nil {
		t.Fatalf("QoS 2 publish of id %d did not wait for the SUBSCRIBE holding it", id)
	}
	if err := s.ConnectionLost(nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wait:
	default:
		t.Fatal("the connection's end did not release a publish waiting for a request's id")
	}
}
