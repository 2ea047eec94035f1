package bridge

import (
	"bytes"
	"context"
	"io"
	"testing"
	"testing/synctest"
	"time"

	paho5 "github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/edgegw/edgegw/bridge/spool"
)

// TestWaitForIDBoundsOnlyRequests: a QoS 2 publish waiting for its packet
// id waits at most ack_timeout for a SUBSCRIBE holding it (a broker that
// never answers would stop the sender for good), then tears the uplink
// down; it waits for a flow 65535 records older as long as the flow takes.
// That flow is the acker's, whose watchdog trips only if nothing at all
// arrived from upstream since it was sent: on a slow link where acks take
// longer than ack_timeout while traffic flows, a bound on this wait would
// tear a healthy uplink down (docs/bridge.md, the ack watchdog). In a
// synctest bubble: its clock moves only when every goroutine waits.
func TestWaitForIDBoundsOnlyRequests(t *testing.T) {
	newUplink := func() *uplink {
		// published and Disconnected: teardown's setState publishes nothing.
		return &uplink{b: &Bridge{cfg: Config{AckTimeout: time.Second}, published: true, state: Disconnected}}
	}
	synctest.Test(t, func(t *testing.T) {
		s := newUplink()
		busy := make(chan struct{})
		got := make(chan bool, 1)
		go func() { got <- s.waitForID(context.Background(), busy, false) }()
		time.Sleep(10 * s.b.cfg.AckTimeout) // the bubble's clock: the flow's ack is slow
		synctest.Wait()
		if cause := s.getCause(); cause != nil {
			t.Fatalf("a wait for a slow flow's id tore the uplink down: %v", cause)
		}
		close(busy) // its ack
		if !<-got {
			t.Fatal("the wait for a flow's id failed after the flow ended")
		}
	})
	synctest.Test(t, func(t *testing.T) {
		s := newUplink()
		start := time.Now()
		if s.waitForID(context.Background(), make(chan struct{}), true) {
			t.Fatal("a wait for an unanswered SUBSCRIBE's id ended well")
		}
		if waited := time.Since(start); waited != s.b.cfg.AckTimeout {
			t.Fatalf("waited %v for an unanswered SUBSCRIBE's id, want ack_timeout %v", waited, s.b.cfg.AckTimeout)
		}
		if s.getCause() == nil || !s.slot.closed {
			t.Fatal("the uplink was not torn down after an unanswered SUBSCRIBE held the id for ack_timeout")
		}
	})
}

// TestRequestWait: the wait pickWire (3.1.1) or begin (5) returns is
// told apart: a request's or a flow's (waitForID bounds only the first).
func TestRequestWait(t *testing.T) {
	st := testStore(3) // publish flows hold wire ids 1, 2, 3
	_, wait := st.pickWire(2+65535, 2)
	if wait == nil || st.requestWait(wait) {
		t.Fatalf("3.1.1: QoS 2 record behind record 2's flow: wait %v, taken for a request's %v", wait != nil, wait != nil && st.requestWait(wait))
	}
	var b bytes.Buffer
	sub := &packets.SubscribePacket{FixedHeader: packets.FixedHeader{MessageType: packets.Subscribe, Qos: 1},
		MessageID: 9, Topics: []string{"cmd/#"}, Qoss: []byte{1}}
	if err := sub.Write(&b); err != nil {
		t.Fatal(err)
	}
	raw := b.Bytes()
	rewriteOutgoing(st, raw)
	_, hl := remainingLength(raw)
	held := uint16(raw[hl])<<8 | uint16(raw[hl+1])
	if _, wait = st.pickWire(spool.ID(held), 2); wait == nil || !st.requestWait(wait) {
		t.Fatalf("3.1.1: QoS 2 record whose id %d a SUBSCRIBE holds: wait %v, not taken for a request's", held, wait != nil)
	}

	s := newSession5(func(*flow5) {})
	s.conn = io.Discard
	if f, _ := s.begin(5, 2, 0, 10); f == nil {
		t.Fatal("5: record 5 got no flow")
	}
	if _, wait = s.begin(5+65535, 2, 0, 10); wait == nil || s.requestWait(wait) {
		t.Fatalf("5: QoS 2 record behind record 5's flow: wait %v, taken for a request's", wait != nil)
	}
	sub5 := &paho5.Subscribe{Subscriptions: []paho5.SubOptions{{Topic: "cmd/#", QoS: 1}}}
	if err := s.AddToSession(context.Background(), sub5, make(chan paho5.ControlPacket, 1)); err != nil {
		t.Fatal(err)
	}
	if _, wait = s.begin(spool.ID(sub5.PacketID)+65535, 2, 0, 10); wait == nil || !s.requestWait(wait) {
		t.Fatalf("5: QoS 2 record whose id %d a SUBSCRIBE holds: wait %v, not taken for a request's", sub5.PacketID, wait != nil)
	}
}
