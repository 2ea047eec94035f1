package gateway_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/internal/testutil"
)

// TestWriterDrainsBacklogPastOneBatch: a QoS 0 backlog larger than one
// write batch (64 KiB) is sent whole, though no ack will wake the writer.
func TestWriterDrainsBacklogPastOneBatch(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true})
	payload := strings.Repeat("x", 2000)
	for i := 0; i < 100; i++ {
		if err := b.srv.Publish(&gateway.Message{Topic: fmt.Sprintf("r/%d", i), Payload: []byte(payload), Retain: true}); err != nil {
			t.Fatal(err)
		}
	}
	var got collector
	sub := pahoClient(t, b.addr, "sub", true, nil)
	waitTok(t, sub.Subscribe("r/#", 0, got.handle), "subscribe")
	testutil.Eventually(t, 10*time.Second, "all 100 retained messages", func() bool { return got.len() == 100 })
}

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

// failingSink keeps nothing: every verdict is an error, from its own
// goroutine, as a spool's flusher would report a disk failure.
type failingSink struct{ wg sync.WaitGroup }

func (f *failingSink) Accept(*gateway.Message) error { return errors.New("disk full") }

func (f *failingSink) AcceptAsync(_ *gateway.Message, done func(error)) {
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		done(errors.New("disk full"))
	}()
}

// TestNoDeadlockFlowControlAndFailingSink is the review's lock-order
// reproducer: one v5 client subscribed to a topic it publishes to (flow
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
	rc := rawDial(t, b.addr, packet.V5)
	rc.hook = autoAck // set before the reader starts
	rc.connect(&packet.Connect{ClientID: "loop", CleanStart: true, KeepAlive: 60})
	rc.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "t", QoS: 1})
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

// TestResendOnResumeHonoursReceiveMaximum: in-flight messages re-sent to a
// resumed v5 session count against the Receive Maximum of the new
// connection, even when it is smaller than the old one's.
func TestResendOnResumeHonoursReceiveMaximum(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true})
	connect := func(recvMax uint16) *rawClient {
		rc, _ := rawConnect(t, b.addr, packet.V5, "rm", false, func(cp *packet.Connect) {
			cp.Props.SessionExpiry = 60
			cp.Props.Set(packet.PropSessionExpiry)
			cp.Props.ReceiveMaximum = recvMax
			cp.Props.Set(packet.PropReceiveMaximum)
		})
		return rc
	}
	rc := connect(10)
	rc.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "rm/#", QoS: 1})
	pub := pahoClient(t, b.addr, "pub", true, nil)
	for i := 0; i < 10; i++ {
		waitTok(t, pub.Publish("rm/x", 1, false, fmt.Sprint(i)), "publish")
	}
	for i := 0; i < 10; i++ {
		rc.nextPublish(5 * time.Second) // received, never acked
	}
	rc.close()
	testutil.Eventually(t, 5*time.Second, "session offline", func() bool { return b.srv.Stats().SessionsDisconnected == 1 })

	rc2 := connect(2)
	var got []*packet.Publish
	for i := 0; i < 2; i++ {
		p := rc2.nextPublish(5 * time.Second)
		if !p.Dup {
			t.Fatalf("resend %d without DUP", i)
		}
		got = append(got, p)
	}
	rc2.noPacket(200 * time.Millisecond) // the window of 2 is full
	// Each ack lets exactly one more resend out, in order.
	for n := 2; n < 10; n++ {
		rc2.send(&packet.Puback{PacketID: got[0].PacketID})
		got = got[1:]
		p := rc2.nextPublish(5 * time.Second)
		if string(p.Payload) != fmt.Sprint(n) {
			t.Fatalf("resend %q, want %d (oldest first)", p.Payload, n)
		}
		got = append(got, p)
	}
}
