package gateway_test

// Wills: normal, v5 delay, v5 DISCONNECT 0x04.

import (
	"testing"
	"time"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/internal/testutil"
)

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

func withExpiry(secs uint32) func(*packet.Connect) {
	return func(cp *packet.Connect) {
		cp.Props.SessionExpiry = secs
		cp.Props.Set(packet.PropSessionExpiry)
	}
}

func both(fs ...func(*packet.Connect)) func(*packet.Connect) {
	return func(cp *packet.Connect) {
		for _, f := range fs {
			f(cp)
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
