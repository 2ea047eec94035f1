package gateway_test

// Delivery guarantees: QoS 2 exactly once across duplicates and reconnects,
// receive maximum, overflow policy, overlapping subscriptions; and CONNECT
// refusals.

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/internal/testutil"
)

func TestQoS2InboundDuplicate(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true})
	sub := rawDial(t, b.addr, packet.V311)
	sub.hook = autoAck
	sub.connect(&packet.Connect{ClientID: "q2-sub", CleanStart: true, KeepAlive: 60})
	sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "q2/#", QoS: 2})

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

func TestReceiveMaximum(t *testing.T) {
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

func TestQueueOverflowDropsOldest(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true, MaxQueuedMessages: 5})
	c, _ := rawConnect(t, b.addr, packet.V311, "ovf", false, nil)
	c.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "ovf/t", QoS: 1})
	c.disconnect()
	before := drops(b, "queue_full")
	publishN(t, b, "ovf/t", 12)
	if got := drops(b, "queue_full") - before; got != 7 {
		t.Errorf("queue_full drops %d, want 7", got)
	}
	c2, _ := rawConnect(t, b.addr, packet.V311, "ovf", false, nil)
	for i := 7; i < 12; i++ {
		p := c2.nextPublish(10 * time.Second)
		c2.ackPublish(p)
		if string(p.Payload) != fmt.Sprint(i) {
			t.Fatalf("got %q, want %d (the oldest are dropped)", p.Payload, i)
		}
	}
	c2.send(&packet.Disconnect{})
	c2.expectClose(10 * time.Second)
	c3, _ := rawConnect(t, b.addr, packet.V311, "ovf", true, nil)
	c3.disconnect()
}

func TestOverlappingSubscriptions(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true})
	c, _ := rawConnect(t, b.addr, packet.V311, "ovl", true, nil)
	c.subscribe(1, packet.Properties{},
		packet.Subscription{Filter: "ovl/#", QoS: 0},
		packet.Subscription{Filter: "ovl/+", QoS: 1},
		packet.Subscription{Filter: "ovl/a", QoS: 0})
	publishN(t, b, "ovl/a", 1)
	publishN(t, b, "ovl/b/c", 1)
	p := c.nextPublish(10 * time.Second)
	if p.Topic != "ovl/a" || p.QoS != 1 {
		t.Fatalf("got %q qos %d, want ovl/a once at the highest granted qos 1", p.Topic, p.QoS)
	}
	c.ackPublish(p)
	if p := c.nextPublish(10 * time.Second); p.Topic != "ovl/b/c" || p.QoS != 0 {
		t.Fatalf("got %q qos %d, want ovl/b/c qos 0 (one copy of ovl/a only)", p.Topic, p.QoS)
	}
	// Unsubscribe: ovl/a now only matches ovl/# at QoS 0.
	c.send(&packet.Unsubscribe{PacketID: 2, Filters: []string{"ovl/+", "ovl/a", "never/subscribed"}})
	expect[*packet.Unsuback](t, c, 10*time.Second)
	publishN(t, b, "ovl/a", 1)
	if p := c.nextPublish(10 * time.Second); p.Topic != "ovl/a" || p.QoS != 0 {
		t.Fatalf("got %q qos %d after unsubscribe, want qos 0", p.Topic, p.QoS)
	}
}

func TestConnectRefused(t *testing.T) {
	t.Run("anonymous_not_allowed", func(t *testing.T) {
		b := startBroker(t, gateway.Options{AllowAnonymous: false})
		for _, tc := range []struct {
			v    packet.Version
			want packet.ReasonCode
		}{
			{packet.V31, packet.V3RefusedNotAuthorized},
			{packet.V311, packet.V3RefusedNotAuthorized},
			{packet.V5, packet.NotAuthorized},
		} {
			t.Run(tc.v.String(), func(t *testing.T) {
				rc := rawDial(t, b.addr, tc.v)
				rc.send(&packet.Connect{ProtocolName: map[bool]string{true: "MQIsdp", false: "MQTT"}[tc.v == packet.V31],
					Version: tc.v, ClientID: "anon", CleanStart: true})
				rc.start()
				got := rc.expectClose(10 * time.Second)
				if len(got) != 1 {
					t.Fatalf("got %v, want CONNACK", types(got))
				}
				if a, ok := got[0].(*packet.Connack); !ok || a.ReasonCode != tc.want {
					t.Fatalf("got %+v, want CONNACK %v", got[0], tc.want)
				}
			})
		}
		if st := b.srv.Stats(); st.SessionsConnected+st.SessionsDisconnected != 0 {
			t.Fatalf("sessions left by refused connects: %+v", st)
		}
	})
	t.Run("client_ids", func(t *testing.T) {
		b := startBroker(t, gateway.Options{AllowAnonymous: true})
		for _, tc := range []struct {
			name  string
			v     packet.Version
			clean bool
			want  packet.ReasonCode
		}{
			{"v31_empty", packet.V31, true, packet.V3RefusedIdentifierRejected},
			{"v311_empty_persistent", packet.V311, false, packet.V3RefusedIdentifierRejected},
			{"v311_empty_clean", packet.V311, true, 0},
			{"v5_empty", packet.V5, false, 0},
		} {
			t.Run(tc.name, func(t *testing.T) {
				rc := rawDial(t, b.addr, tc.v)
				rc.send(&packet.Connect{ProtocolName: map[bool]string{true: "MQIsdp", false: "MQTT"}[tc.v == packet.V31],
					Version: tc.v, CleanStart: tc.clean})
				rc.start()
				a := expect[*packet.Connack](t, rc, 10*time.Second)
				if a.ReasonCode != tc.want {
					t.Fatalf("connack %v, want %v", a.ReasonCode, tc.want)
				}
				if tc.want != 0 {
					rc.expectClose(10 * time.Second)
					return
				}
				if tc.v == packet.V5 && (!a.Props.Has(packet.PropAssignedClientID) || a.Props.AssignedClientID == "") {
					t.Fatal("no assigned client identifier")
				}
				rc.disconnect()
			})
		}
	})
	t.Run("max_connections", func(t *testing.T) {
		b := startBroker(t, gateway.Options{AllowAnonymous: true, MaxConnections: 2})
		rawConnect(t, b.addr, packet.V311, "mc1", true, nil)
		rawConnect(t, b.addr, packet.V311, "mc2", true, nil)
		rc := rawDial(t, b.addr, packet.V311)
		rc.sendErr(&packet.Connect{ProtocolName: "MQTT", Version: packet.V311, ClientID: "mc3", CleanStart: true})
		rc.start()
		if got := rc.expectClose(10 * time.Second); len(got) != 0 {
			t.Fatalf("got %v", types(got))
		}
		if st := b.srv.Stats(); st.Refused != 1 || st.Connections != 2 {
			t.Fatalf("refused %d connections %d, want 1 and 2", st.Refused, st.Connections)
		}
	})
}

func TestV5DisconnectProtocolRules(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true})
	obs := willObserver(t, b)
	// Session expiry 0 on CONNECT, non-zero on DISCONNECT: protocol error
	// (5.0 §3.14.2.2.2); the DISCONNECT does not count as normal, so the will
	// is published.
	c, _ := rawConnect(t, b.addr, packet.V5, "dexp", true, withWill("will/dexp", "x", 0))
	d := &packet.Disconnect{}
	d.Props.SessionExpiry = 30
	d.Props.Set(packet.PropSessionExpiry)
	c.send(d)
	got := c.expectClose(10 * time.Second)
	if len(got) != 1 {
		t.Fatalf("got %v, want DISCONNECT 0x82", types(got))
	}
	if d, ok := got[0].(*packet.Disconnect); !ok || d.ReasonCode != packet.ProtocolError {
		t.Fatalf("got %+v, want DISCONNECT 0x82", got[0])
	}
	expectWillMsg(t, obs, "will/dexp", 10*time.Second)
	testutil.Eventually(t, 5*time.Second, "no sessions", func() bool { c, d := sessions(b); return c == 1 && d == 0 })
}

func TestPublishToSysRefused(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true})
	sub, _ := rawConnect(t, b.addr, packet.V311, "sys-sub", true, nil)
	sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "$SYS/#"}, packet.Subscription{Filter: "marker"})
	c := v5Client(t, b, "sys-pub", nil)
	c.send(&packet.Publish{QoS: 1, PacketID: 1, Topic: "$SYS/broker/version", Payload: []byte("fake")})
	if a := expect[*packet.Puback](t, c, 10*time.Second); a.ReasonCode != packet.NotAuthorized {
		t.Fatalf("puback %v, want not authorized", a.ReasonCode)
	}
	c.send(&packet.Publish{Topic: "marker", Payload: []byte("m")})
	if p := sub.nextPublish(10 * time.Second); p.Topic != "marker" {
		t.Fatalf("got %q %q, want marker", p.Topic, p.Payload)
	}
}

func TestShutdown(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true})
	c5, _ := rawConnect(t, b.addr, packet.V5, "sd5", false, withExpiry(60))
	c3, _ := rawConnect(t, b.addr, packet.V311, "sd3", true, nil)
	done := make(chan struct{})
	go func() { b.stop(); close(done) }()
	got := c5.expectClose(15 * time.Second)
	if len(got) != 1 {
		t.Fatalf("v5 got %v, want DISCONNECT 0x8B", types(got))
	}
	if d, ok := got[0].(*packet.Disconnect); !ok || d.ReasonCode != packet.ServerShuttingDown {
		t.Fatalf("v5 got %+v, want DISCONNECT 0x8B", got[0])
	}
	if got := c3.expectClose(15 * time.Second); len(got) != 0 {
		t.Fatalf("v3.1.1 got %v", types(got))
	}
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("broker did not stop")
	}
	if st := b.srv.Stats(); st.Connections != 0 || st.Closes["shutdown"] != 2 {
		t.Fatalf("after shutdown: connections %d, shutdown closes %d", st.Connections, st.Closes["shutdown"])
	}
}
