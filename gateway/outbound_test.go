package gateway_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/internal/testutil"
)

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

func TestQoS2OutboundResumeSendsPubrel(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true})
	sub, _ := rawConnect(t, b.addr, packet.V311, "q2-out", false, nil)
	sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "q2o/t", QoS: 2})
	publishN(t, b, "q2o/t", 2) // QoS 1 from the publisher: delivered at QoS 1
	pub, _ := rawConnect(t, b.addr, packet.V311, "q2o-pub", true, nil)
	pub.send(&packet.Publish{QoS: 2, PacketID: 1, Topic: "q2o/t", Payload: []byte("x")})
	expect[*packet.Pubrec](t, pub, 10*time.Second)
	pub.send(&packet.Pubrel{PacketID: 1})
	expect[*packet.Pubcomp](t, pub, 10*time.Second)

	var q2 *packet.Publish
	for range 3 {
		p := sub.nextPublish(10 * time.Second)
		if p.QoS == 2 {
			q2 = p
		} else {
			sub.ackPublish(p)
		}
	}
	if q2 == nil {
		t.Fatal("no QoS 2 delivery")
	}
	sub.send(&packet.Pubrec{PacketID: q2.PacketID})
	if r := expect[*packet.Pubrel](t, sub, 10*time.Second); r.PacketID != q2.PacketID {
		t.Fatalf("pubrel %d, want %d", r.PacketID, q2.PacketID)
	}
	sub.conn.Close() // no PUBCOMP

	sub2, ack := rawConnect(t, b.addr, packet.V311, "q2-out", false, nil)
	if !ack.SessionPresent {
		t.Fatal("session not present")
	}
	// [MQTT-4.4.0-1]: the PUBREL is sent again, not the PUBLISH.
	if r := expect[*packet.Pubrel](t, sub2, 10*time.Second); r.PacketID != q2.PacketID {
		t.Fatalf("pubrel %d, want %d", r.PacketID, q2.PacketID)
	}
	sub2.send(&packet.Pubcomp{PacketID: q2.PacketID})
	testutil.Eventually(t, 5*time.Second, "nothing in flight", func() bool { return b.srv.Stats().Inflight == 0 })
	sub2.send(&packet.Disconnect{})
	sub2.expectClose(10 * time.Second)
	c, _ := rawConnect(t, b.addr, packet.V311, "q2-out", true, nil)
	c.disconnect()
}

// TestInflightWindowHonoursReceiveMaximum: the in-flight window toward a
// v5 client is the smaller of its Receive Maximum and max_inflight; what
// is past it waits in the queue until an acknowledgement, in order.
func TestInflightWindowHonoursReceiveMaximum(t *testing.T) {
	for _, tc := range []struct {
		name        string
		maxInflight int
		recvMax     uint16
		want        int
	}{
		{"client_receive_maximum_3", 0, 3, 3},
		{"broker_max_inflight_2", 2, 10, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := startBroker(t, gateway.Options{AllowAnonymous: true, MaxInflight: tc.maxInflight})
			sub := rawDial(t, b.addr, packet.V5)
			cp := &packet.Connect{ClientID: "rm", CleanStart: true, KeepAlive: 60}
			cp.Props.ReceiveMaximum = tc.recvMax
			cp.Props.Set(packet.PropReceiveMaximum)
			sub.connect(cp)
			sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "rm/+", QoS: 1})
			pub := v5Client(t, b, "rm-pub", nil)
			const n = 10
			for i := range n {
				pub.pub1(uint16(i+1), &packet.Publish{Topic: "rm/t", Payload: []byte(strconv.Itoa(i))})
			}
			var got []*packet.Publish
			for range tc.want {
				got = append(got, sub.nextPublish(10*time.Second))
			}
			// The window is full: nothing more until an ack.
			testutil.Eventually(t, 5*time.Second, "the rest queued", func() bool {
				return b.srv.Stats().QueuedMessages == int64(n-tc.want)
			})
			if st := b.srv.Stats(); st.Inflight != int64(tc.want) {
				t.Fatalf("in flight %d, want %d", st.Inflight, tc.want)
			}
			for len(got) < n {
				sub.ackPublish(got[len(got)-tc.want])
				got = append(got, sub.nextPublish(10*time.Second))
			}
			for i, p := range got {
				if string(p.Payload) != strconv.Itoa(i) {
					t.Fatalf("message %d is %q", i, p.Payload)
				}
			}
		})
	}
}

// TestQoS0NotGatedByWindow: "Flow control (in-flight windows) limits only
// new outgoing PUBLISH packets" of QoS 1/2; takeSendable says QoS 0 is not
// gated by the window. A QoS 0 message queued behind QoS 1 messages that wait
// for the window must still go out.
func TestQoS0NotGatedByWindow(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true})
	sub := rawDial(t, b.addr, packet.V5)
	cp := &packet.Connect{ClientID: "q0w", CleanStart: true, KeepAlive: 60}
	cp.Props.ReceiveMaximum = 1
	cp.Props.Set(packet.PropReceiveMaximum)
	sub.connect(cp)
	sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "q0w/#", QoS: 1})
	pub := v5Client(t, b, "q0w-pub", nil)
	pub.pub1(1, &packet.Publish{Topic: "q0w/q1", Payload: []byte("a")})
	pub.pub1(2, &packet.Publish{Topic: "q0w/q1", Payload: []byte("b")}) // waits for the window
	first := sub.nextPublish(10 * time.Second)
	pub.send(&packet.Publish{Topic: "q0w/q0", Payload: []byte("q0")})
	if p := sub.nextPublish(10 * time.Second); p.Topic != "q0w/q0" {
		t.Fatalf("got %q %q with a full window, want the QoS 0 message", p.Topic, p.Payload)
	}
	sub.ackPublish(first)
	if p := sub.nextPublish(10 * time.Second); string(p.Payload) != "b" {
		t.Fatalf("got %q, want b", p.Payload)
	}
}
