package gateway_test

import (
	"testing"
	"time"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/internal/testutil"
)

// TestSplitPacketDoesNotHoldWrites: a publisher whose next packet arrives
// only in part must not hold up what its reader already routed or owes.
// The reader writes the work of its input when the input is drained
// (writer.go); a buffer that ends mid-packet is not drained, and the read
// for the rest may wait as long as the client likes. The message to the
// subscriber and the publisher's own PUBACK go out before that wait.
func TestSplitPacketDoesNotHoldWrites(t *testing.T) {
	for _, qos := range []byte{0, 1} {
		t.Run(map[byte]string{0: "qos0", 1: "qos1"}[qos], func(t *testing.T) {
			b := startBroker(t, gateway.Options{AllowAnonymous: true})
			sub, _ := rawConnect(t, b.addr, packet.V311, "sub", true, nil)
			sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "split/#", QoS: qos})
			pub, _ := rawConnect(t, b.addr, packet.V311, "pub", true, nil)

			first, err := packet.Append(nil, &packet.Publish{QoS: qos, PacketID: 1, Topic: "split/a", Payload: []byte("first")}, packet.V311)
			if err != nil {
				t.Fatal(err)
			}
			second, err := packet.Append(nil, &packet.Publish{QoS: qos, PacketID: 2, Topic: "split/a", Payload: []byte("second")}, packet.V311)
			if err != nil {
				t.Fatal(err)
			}
			// One write: the first PUBLISH and half of the second.
			splitDelivery(t, sub, pub, qos, first, second, func() {})
		})
	}
}

// TestSplitPacketAfterPipelinedConnect: a client may send packets right
// behind its CONNECT, before the CONNACK. When the same first read also
// ends inside a packet, the reader waits for the rest while holding what it
// routed from the complete ones: the subscriber must get its message
// before the publisher sends the rest.
func TestSplitPacketAfterPipelinedConnect(t *testing.T) {
	for _, qos := range []byte{0, 1} {
		t.Run(map[byte]string{0: "qos0", 1: "qos1"}[qos], func(t *testing.T) {
			b := startBroker(t, gateway.Options{AllowAnonymous: true})
			sub, _ := rawConnect(t, b.addr, packet.V311, "sub", true, nil)
			sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "split/#", QoS: qos})

			pub := rawDial(t, b.addr, packet.V311)
			var head []byte
			for _, p := range []packet.Packet{
				&packet.Connect{ProtocolName: "MQTT", Version: packet.V311, ClientID: "pub", CleanStart: true, KeepAlive: 60},
				&packet.Publish{QoS: qos, PacketID: uint16(qos), Topic: "split/a", Payload: []byte("first")},
			} {
				var err error
				if head, err = packet.Append(head, p, packet.V311); err != nil {
					t.Fatal(err)
				}
			}
			second, err := packet.Append(nil, &packet.Publish{QoS: qos, PacketID: 2 * uint16(qos), Topic: "split/a", Payload: []byte("second")}, packet.V311)
			if err != nil {
				t.Fatal(err)
			}
			// One write: CONNECT, the first PUBLISH and half of the second.
			splitDelivery(t, sub, pub, qos, head, second, func() {
				pub.start()
				expect[*packet.Connack](t, pub, 5*time.Second)
			})
		})
	}
}

// splitDelivery writes head and half of second in one write, then (after
// afterWrite) wants "first" at the subscriber and, at QoS 1, its PUBACK
// (packet id 1) before it sends the rest of second, which must then be
// delivered too.
func splitDelivery(t *testing.T, sub, pub *rawClient, qos byte, head, second []byte, afterWrite func()) {
	t.Helper()
	half := len(second) / 2
	if err := pub.write(append(head, second[:half]...)); err != nil {
		t.Fatal(err)
	}
	afterWrite()
	if p := sub.nextPublish(5 * time.Second); string(p.Payload) != "first" {
		t.Fatalf("subscriber got %q, want first", p.Payload)
	}
	if qos == 1 {
		if a := expect[*packet.Puback](t, pub, 5*time.Second); a.PacketID != 1 {
			t.Fatalf("PUBACK for %d, want 1", a.PacketID)
		}
	}
	// The rest arrives: the second message is delivered too.
	if err := pub.write(second[half:]); err != nil {
		t.Fatal(err)
	}
	if p := sub.nextPublish(5 * time.Second); string(p.Payload) != "second" {
		t.Fatalf("subscriber got %q, want second", p.Payload)
	}
}

func TestKeepAlive(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true})
	obs := willObserver(t, b)
	for _, v := range []packet.Version{packet.V311, packet.V5} {
		t.Run(v.String(), func(t *testing.T) {
			topic := "will/" + t.Name()
			before := closes(b, "keepalive_timeout")
			c, _ := rawConnect(t, b.addr, v, "ka-"+v.String(), true, both(withWill(topic, "dead", 0),
				func(cp *packet.Connect) { cp.KeepAlive = 1 }))
			start := time.Now()
			// Silent from here on: no PINGREQ.
			got := c.expectClose(10 * time.Second)
			if d := time.Since(start); d < 1*time.Second {
				t.Errorf("closed after %s, keepalive is 1s (1.5s allowed)", d)
			}
			if v == packet.V5 {
				if len(got) != 1 {
					t.Fatalf("got %v before close, want DISCONNECT", types(got))
				}
				if d, ok := got[0].(*packet.Disconnect); !ok || d.ReasonCode != packet.KeepAliveTimeout {
					t.Fatalf("got %+v, want DISCONNECT 0x8D", got[0])
				}
			}
			expectWillMsg(t, obs, topic, 10*time.Second)
			testutil.Eventually(t, 5*time.Second, "keepalive_timeout counted", func() bool {
				return closes(b, "keepalive_timeout") == before+1
			})
		})
	}
	t.Run("pings_keep_it_open", func(t *testing.T) {
		c, _ := rawConnect(t, b.addr, packet.V311, "ka-pinger", true, func(cp *packet.Connect) { cp.KeepAlive = 1 })
		deadline := time.Now().Add(2500 * time.Millisecond)
		for time.Now().Before(deadline) {
			c.send(&packet.Pingreq{})
			expect[*packet.Pingresp](t, c, 5*time.Second)
			<-time.After(500 * time.Millisecond) // the client's own ping period
		}
		c.disconnect()
	})
}

func TestConnectTimeout(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true, ConnectTimeout: 300 * time.Millisecond})
	for _, tc := range []struct {
		name string
		send []byte
	}{
		{"nothing", nil},
		{"partial_connect", []byte{0x10, 12, 0, 4, 'M'}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := closes(b, "connect_timeout")
			c := rawDial(t, b.addr, packet.V311)
			if tc.send != nil {
				if err := c.write(tc.send); err != nil {
					t.Fatal(err)
				}
			}
			c.start()
			if got := c.expectClose(10 * time.Second); len(got) != 0 {
				t.Fatalf("got %v", types(got))
			}
			testutil.Eventually(t, 5*time.Second, "connect_timeout counted", func() bool {
				return closes(b, "connect_timeout") == before+1
			})
		})
	}
}
