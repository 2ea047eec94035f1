package gateway_test

// Sessions: persistence while offline, clean start, takeover, races for one
// client id, v5 session expiry.

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/internal/testutil"
)

// publishN publishes n QoS 1 messages "0".."n-1" to topic from a fresh
// client and waits for every PUBACK.
func publishN(t *testing.T, b *broker, topic string, n int) {
	t.Helper()
	p, _ := rawConnect(t, b.addr, packet.V311, "", true, nil)
	for i := range n {
		p.send(&packet.Publish{QoS: 1, PacketID: uint16(i + 1), Topic: topic, Payload: []byte(fmt.Sprint(i))})
		if a := expect[*packet.Puback](t, p, 10*time.Second); a.PacketID != uint16(i+1) {
			t.Fatalf("puback %d, want %d", a.PacketID, i+1)
		}
	}
	p.disconnect()
}

// receiveN reads n publishes, acks them and checks payloads "0".."n-1".
func receiveN(t *testing.T, rc *rawClient, n int, wantDup bool) {
	t.Helper()
	for i := range n {
		p := rc.nextPublish(10 * time.Second)
		if string(p.Payload) != fmt.Sprint(i) {
			t.Fatalf("message %d: payload %q", i, p.Payload)
		}
		if p.Dup != wantDup {
			t.Fatalf("message %d: dup %v, want %v", i, p.Dup, wantDup)
		}
		rc.ackPublish(p)
	}
}

// waitOneOffline waits until exactly one session is offline; what names it
// for the failure.
func waitOneOffline(t *testing.T, b *broker, what string) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, what, func() bool { _, d := sessions(b); return d == 1 })
}

func sessions(b *broker) (connected, disconnected int) {
	st := b.srv.Stats()
	return st.SessionsConnected, st.SessionsDisconnected
}

func TestSessionPersistent(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true})
	for _, v := range []packet.Version{packet.V31, packet.V311, packet.V5} {
		t.Run(v.String(), func(t *testing.T) {
			id := "persist-" + v.String()
			topic := "persist/" + v.String()
			var mod func(*packet.Connect)
			if v == packet.V5 {
				mod = withExpiry(60)
			}
			c, ack := rawConnect(t, b.addr, v, id, false, mod)
			if ack.SessionPresent {
				t.Fatal("session present on first connect")
			}
			c.subscribe(1, packet.Properties{}, packet.Subscription{Filter: topic, QoS: 1})
			c.disconnect()
			waitOneOffline(t, b, "session offline")

			publishN(t, b, topic, 10)
			if st := b.srv.Stats(); st.QueuedMessages != 10 {
				t.Fatalf("queued %d, want 10", st.QueuedMessages)
			}
			c2, ack := rawConnect(t, b.addr, v, id, false, mod)
			if want := v != packet.V31; ack.SessionPresent != want {
				t.Fatalf("session present = %v, want %v", ack.SessionPresent, want)
			}
			receiveN(t, c2, 10, false)

			// Delivered but not acknowledged: resent with DUP on resume.
			publishN(t, b, topic, 3)
			for range 3 {
				c2.nextPublish(10 * time.Second) // not acked
			}
			c2.conn.Close()
			testutil.Eventually(t, 5*time.Second, "session offline", func() bool { c, d := sessions(b); return c == 0 && d == 1 })
			if st := b.srv.Stats(); st.Inflight != 3 {
				t.Errorf("in flight %d, want 3", st.Inflight)
			}
			c3, _ := rawConnect(t, b.addr, v, id, false, mod)
			receiveN(t, c3, 3, true)
			testutil.Eventually(t, 5*time.Second, "acks processed", func() bool { return b.srv.Stats().Inflight == 0 })

			// A clean start discards the session.
			c3.disconnect()
			publishN(t, b, topic, 5)
			c4, ack := rawConnect(t, b.addr, v, id, true, nil)
			if ack.SessionPresent {
				t.Fatal("session present after clean start")
			}
			st := b.srv.Stats()
			if st.QueuedMessages != 0 || st.QueuedBytes != 0 || st.Inflight != 0 {
				t.Fatalf("clean start kept queued=%d bytes=%d inflight=%d", st.QueuedMessages, st.QueuedBytes, st.Inflight)
			}
			// Neither the queue nor the subscription survived.
			c4.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "marker", QoS: 1})
			publishN(t, b, topic, 1)
			publishN(t, b, "marker", 1)
			if p := c4.nextPublish(10 * time.Second); p.Topic != "marker" {
				t.Fatalf("got %q after clean start, want marker", p.Topic)
			}
			c4.disconnect()
			testutil.Eventually(t, 5*time.Second, "no sessions", func() bool { c, d := sessions(b); return c == 0 && d == 0 })
		})
	}
}

func TestSessionTakeover(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true})
	for _, v := range []packet.Version{packet.V311, packet.V5} {
		t.Run(v.String(), func(t *testing.T) {
			id := "take-" + v.String()
			topic := "take/" + v.String()
			var mod func(*packet.Connect)
			if v == packet.V5 {
				mod = withExpiry(60)
			}
			takeovers := b.srv.Stats().Takeovers
			before := closes(b, "session_taken_over")
			c1, _ := rawConnect(t, b.addr, v, id, false, mod)
			c1.subscribe(1, packet.Properties{}, packet.Subscription{Filter: topic, QoS: 1})

			c2, ack := rawConnect(t, b.addr, v, id, false, mod)
			if !ack.SessionPresent {
				t.Fatal("session not present on takeover")
			}
			got := c1.expectClose(10 * time.Second)
			if v == packet.V5 {
				if len(got) != 1 {
					t.Fatalf("first connection got %v, want DISCONNECT 0x8E", types(got))
				}
				if d, ok := got[0].(*packet.Disconnect); !ok || d.ReasonCode != packet.SessionTakenOver {
					t.Fatalf("first connection got %+v, want DISCONNECT 0x8E", got[0])
				}
			} else if len(got) != 0 {
				t.Fatalf("first connection got %v", types(got))
			}
			publishN(t, b, topic, 5)
			receiveN(t, c2, 5, false)
			// The publisher's session ends just after its socket closes.
			testutil.Eventually(t, 5*time.Second, "one session connected", func() bool { return b.srv.Stats().SessionsConnected == 1 })
			if st := b.srv.Stats(); st.Takeovers != takeovers+1 {
				t.Fatalf("takeovers %d, want %d", st.Takeovers, takeovers+1)
			}
			testutil.Eventually(t, 5*time.Second, "close counted", func() bool { return closes(b, "session_taken_over") == before+1 })
			c2.send(&packet.Disconnect{Props: packet.Properties{Present: 1 << packet.PropSessionExpiry}})
			c2.expectClose(10 * time.Second)
			// 3.1.1 persistent sessions outlive the connection; end it.
			c3, _ := rawConnect(t, b.addr, v, id, true, nil)
			c3.disconnect()
			testutil.Eventually(t, 5*time.Second, "no sessions", func() bool { c, d := sessions(b); return c == 0 && d == 0 })
		})
	}
}

// raceConnect dials and connects without failing the test (it runs on its
// own goroutine). It returns the client (its reader running) or an error
// when it could not even send CONNECT. A connection closed before CONNACK
// is not an error: it lost the race.
func raceConnect(t *testing.T, addr string, v packet.Version, id string, clean bool) (*rawClient, error) {
	rc := rawDial(t, addr, v)
	cp := &packet.Connect{ProtocolName: "MQTT", Version: v, ClientID: id, CleanStart: clean, KeepAlive: 60}
	if v == packet.V5 && !clean {
		cp.Props.SessionExpiry = 60
		cp.Props.Set(packet.PropSessionExpiry)
	}
	if err := rc.sendErr(cp); err != nil {
		return nil, err
	}
	rc.start()
	return rc, nil
}

// alive pings rc: true when PINGRESP comes back, false when the broker
// closed the connection.
func alive(t *testing.T, rc *rawClient) bool {
	t.Helper()
	rc.sendErr(&packet.Pingreq{}) // may fail on a closed connection
	for {
		p, err := rc.nextErr(10 * time.Second)
		if err != nil {
			select {
			case <-rc.done:
				return false
			default:
				t.Fatalf("neither PINGRESP nor close: %v", err)
			}
		}
		switch p.(type) {
		case *packet.Pingresp:
			return true
		case *packet.Connack, *packet.Disconnect:
		default:
			t.Fatalf("unexpected %T", p)
		}
	}
}

// settle waits until rc got its CONNACK or was closed.
func settle(t *testing.T, rc *rawClient) {
	t.Helper()
	p, err := rc.nextErr(10 * time.Second)
	if err != nil {
		select {
		case <-rc.done:
			return
		default:
			t.Fatalf("no CONNACK: %v", err)
		}
	}
	if a, ok := p.(*packet.Connack); !ok || a.ReasonCode != 0 {
		t.Fatalf("got %+v, want CONNACK", p)
	}
}

func TestSessionTakeoverRace(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true})
	const rounds = 50
	for i := range rounds {
		v := packet.V311
		if i%2 == 1 {
			v = packet.V5
		}
		cleanA, cleanB := i%4 < 2, i%3 == 0
		var wg sync.WaitGroup
		var ca, cb *rawClient
		var ea, eb error
		wg.Add(2)
		go func() { defer wg.Done(); ca, ea = raceConnect(t, b.addr, v, "racer", cleanA) }()
		go func() { defer wg.Done(); cb, eb = raceConnect(t, b.addr, v, "racer", cleanB) }()
		wg.Wait()
		if ea != nil || eb != nil {
			t.Fatalf("round %d: %v %v", i, ea, eb)
		}
		// Both CONNECTs have been handled once each got CONNACK or was closed.
		settle(t, ca)
		settle(t, cb)
		testutil.Eventually(t, 10*time.Second, "one connection left", func() bool {
			st := b.srv.Stats()
			return st.Connections == 1 && st.SessionsConnected == 1
		})
		aa, ab := alive(t, ca), alive(t, cb)
		if aa == ab {
			t.Fatalf("round %d (v%d clean %v/%v): alive a=%v b=%v, want exactly one", i, v, cleanA, cleanB, aa, ab)
		}
		if st := b.srv.Stats(); st.SessionsConnected != 1 || st.SessionsDisconnected != 0 {
			t.Fatalf("round %d: sessions connected %d disconnected %d, want 1 and 0",
				i, st.SessionsConnected, st.SessionsDisconnected)
		}
		winner := ca
		if ab {
			winner = cb
		}
		winner.send(&packet.Disconnect{})
		winner.expectClose(10 * time.Second)
		ca.close()
		cb.close()
		testutil.Eventually(t, 10*time.Second, "winner gone", func() bool {
			st := b.srv.Stats()
			return st.Connections == 0 && st.SessionsConnected == 0
		})
	}
}

func TestSessionExpiryV5(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true})
	for _, tc := range []struct {
		name   string
		expiry uint32
		onDisc *uint32 // session expiry on DISCONNECT
	}{
		{"connect_1s", 1, nil},
		{"disconnect_sets_1s", 3600, ptr[uint32](1)},
		{"abnormal_close_1s", 1, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			expired := b.srv.Stats().Expired
			c, _ := rawConnect(t, b.addr, packet.V5, "exp-"+tc.name, false, withExpiry(tc.expiry))
			c.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "exp/t", QoS: 1})
			switch {
			case tc.name == "abnormal_close_1s":
				c.conn.Close()
			case tc.onDisc != nil:
				d := &packet.Disconnect{}
				d.Props.SessionExpiry = *tc.onDisc
				d.Props.Set(packet.PropSessionExpiry)
				c.send(d)
				c.expectClose(10 * time.Second)
			default:
				c.disconnect()
			}
			testutil.Eventually(t, 5*time.Second, "session offline", func() bool { c, d := sessions(b); return c == 0 && d == 1 })
			publishN(t, b, "exp/t", 3) // queued, then released by the expiry
			if st := b.srv.Stats(); st.QueuedMessages != 3 {
				t.Fatalf("queued %d, want 3", st.QueuedMessages)
			}
			testutil.Eventually(t, 10*time.Second, "session expired", func() bool {
				st := b.srv.Stats()
				return st.Expired == expired+1 && st.SessionsDisconnected == 0
			})
			st := b.srv.Stats()
			if st.QueuedMessages != 0 || st.QueuedBytes != 0 || st.Subscriptions != 0 {
				t.Fatalf("after expiry queued=%d bytes=%d subscriptions=%d", st.QueuedMessages, st.QueuedBytes, st.Subscriptions)
			}
			_, ack := rawConnect(t, b.addr, packet.V5, "exp-"+tc.name, false, nil)
			if ack.SessionPresent {
				t.Fatal("session present after expiry")
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

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
