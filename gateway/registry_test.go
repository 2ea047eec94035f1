package gateway_test

// The life of sessions (registry.go): persistence while offline, clean
// start, takeover, races for one client id, v5 session expiry, and wills
// (normal, v5 delay, v5 DISCONNECT 0x04).

import (
	"sync"
	"testing"
	"time"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/internal/testutil"
)

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

// willObserver subscribes to will/# and marker; it sees wills in order.
func willObserver(t *testing.T, b *broker) *rawClient {
	t.Helper()
	obs, _ := rawConnect(t, b.addr, packet.V311, "observer-"+t.Name(), true, nil)
	obs.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "will/#"}, packet.Subscription{Filter: "marker"})
	return obs
}

func withWill(topic, payload string, delay uint32) func(*packet.Connect) {
	return func(cp *packet.Connect) {
		cp.Will = &packet.Will{Topic: topic, Payload: []byte(payload)}
		if delay > 0 {
			cp.Will.Props.WillDelay = delay
			cp.Will.Props.Set(packet.PropWillDelay)
		}
	}
}

// expectWillMsg waits for the will on topic.
func expectWillMsg(t *testing.T, obs *rawClient, topic string, d time.Duration) {
	t.Helper()
	p := obs.nextPublish(d)
	if p.Topic != topic {
		t.Fatalf("observer got %q (%q), want will on %q", p.Topic, p.Payload, topic)
	}
}

// expectNoWill publishes a marker once the client's connection is gone and
// checks it is the next thing the observer sees.
func expectNoWill(t *testing.T, b *broker, obs *rawClient, conns int64) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, "connection gone", func() bool { return b.srv.Stats().Connections == conns })
	m, _ := rawConnect(t, b.addr, packet.V311, "marker-"+t.Name(), true, nil)
	m.send(&packet.Publish{Topic: "marker", Payload: []byte("m")})
	m.disconnect()
	if p := obs.nextPublish(10 * time.Second); p.Topic != "marker" {
		t.Fatalf("observer got %q (%q), want no will and the marker", p.Topic, p.Payload)
	}
}

func TestWill(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true})
	obs := willObserver(t, b)
	conns := b.srv.Stats().Connections

	for _, v := range []packet.Version{packet.V31, packet.V311, packet.V5} {
		t.Run(v.String()+"/abnormal_close", func(t *testing.T) {
			topic := "will/" + t.Name()
			c, _ := rawConnect(t, b.addr, v, "w1", true, withWill(topic, "gone", 0))
			c.conn.Close() // no DISCONNECT
			expectWillMsg(t, obs, topic, 10*time.Second)
		})
		t.Run(v.String()+"/clean_disconnect", func(t *testing.T) {
			c, _ := rawConnect(t, b.addr, v, "w2", true, withWill("will/"+t.Name(), "gone", 0))
			c.disconnect()
			expectNoWill(t, b, obs, conns)
		})
		t.Run(v.String()+"/taken_over", func(t *testing.T) {
			topic := "will/" + t.Name()
			rawConnect(t, b.addr, v, "w3", true, withWill(topic, "gone", 0))
			c2, _ := rawConnect(t, b.addr, v, "w3", true, nil)
			expectWillMsg(t, obs, topic, 10*time.Second)
			c2.disconnect()
		})
	}

	t.Run("v5/disconnect_with_will", func(t *testing.T) {
		topic := "will/" + t.Name()
		c, _ := rawConnect(t, b.addr, packet.V5, "w4", true, withWill(topic, "gone", 0))
		c.send(&packet.Disconnect{ReasonCode: packet.DisconnectWithWill})
		c.expectClose(10 * time.Second)
		expectWillMsg(t, obs, topic, 10*time.Second)
	})

	t.Run("v5/will_delay_elapses", func(t *testing.T) {
		topic := "will/" + t.Name()
		c, _ := rawConnect(t, b.addr, packet.V5, "w5", false, both(withExpiry(60), withWill(topic, "gone", 1)))
		closed := time.Now()
		c.conn.Close()
		expectWillMsg(t, obs, topic, 10*time.Second)
		if d := time.Since(closed); d < 900*time.Millisecond {
			t.Errorf("will with delay 1s published after %s", d)
		}
		// Clean up the persistent session.
		c2, _ := rawConnect(t, b.addr, packet.V5, "w5", true, nil)
		c2.disconnect()
	})

	t.Run("v5/will_delay_cut_by_session_expiry", func(t *testing.T) {
		topic := "will/" + t.Name()
		c, _ := rawConnect(t, b.addr, packet.V5, "w6", false, both(withExpiry(1), withWill(topic, "gone", 30)))
		c.conn.Close()
		expectWillMsg(t, obs, topic, 10*time.Second) // the session ends after 1s, before the delay
	})

	t.Run("v5/will_delay_reconnect_in_time", func(t *testing.T) {
		topic := "will/" + t.Name()
		c, _ := rawConnect(t, b.addr, packet.V5, "w7", false, both(withExpiry(60), withWill(topic, "gone", 1)))
		c.conn.Close()
		testutil.Eventually(t, 10*time.Second, "disconnected session", func() bool { return b.srv.Stats().Connections == conns })
		c2, ack := rawConnect(t, b.addr, packet.V5, "w7", false, withExpiry(60))
		if !ack.SessionPresent {
			t.Fatal("session not present on reconnect")
		}
		// Let the will delay pass: the resumed session cancelled it.
		<-time.After(1500 * time.Millisecond)
		c2.send(&packet.Disconnect{Props: packet.Properties{Present: 1 << packet.PropSessionExpiry}}) // expiry 0: end the session
		c2.expectClose(10 * time.Second)
		expectNoWill(t, b, obs, conns)
	})

	t.Run("v5/takeover_persistent_with_delay", func(t *testing.T) {
		// A session taken over by a resuming connection goes on: a delayed
		// will is not published [MQTT-3.1.3-9].
		topic := "will/" + t.Name()
		rawConnect(t, b.addr, packet.V5, "w8", false, both(withExpiry(60), withWill(topic, "gone", 1)))
		c2, _ := rawConnect(t, b.addr, packet.V5, "w8", false, withExpiry(60))
		<-time.After(1500 * time.Millisecond)
		c2.send(&packet.Disconnect{Props: packet.Properties{Present: 1 << packet.PropSessionExpiry}})
		c2.expectClose(10 * time.Second)
		expectNoWill(t, b, obs, conns)
	})
}
