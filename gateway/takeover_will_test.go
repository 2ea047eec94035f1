package gateway_test

import (
	"testing"
	"time"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/packet"
)

// Regression (review): the takeover drain promises (docs/behaviour.md, Sessions) that a
// client that sends DISCONNECT, closes and reconnects at once does not
// have its will published "whichever connection the broker reads first".
// The drained reader stops (errClosed, close reason "unknown") at the
// first packet that touches the session (SUBSCRIBE, UNSUBSCRIBE, QoS 2
// PUBLISH): the session is already the new connection's, so it never
// reads the DISCONNECT and the will goes out. TestNoWillOnQuickReconnect
// sends only DISCONNECT, so it cannot see this.
func TestWillOnTakeoverDrain(t *testing.T) {
	for _, second := range []string{"subscribe", "qos2"} {
		t.Run(second, func(t *testing.T) {
			b := startBroker(t, gateway.Options{AllowAnonymous: true})
			watch, _ := rawConnect(t, b.addr, packet.V311, "watcher", true, nil)
			watch.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "will/#"})
			withWill := func(cp *packet.Connect) {
				cp.Will = &packet.Will{Topic: "will/flapper", Payload: []byte("died")}
			}
			var prev *rawClient
			for i := range 30 {
				rc := rawDial(t, b.addr, packet.V311)
				cp := &packet.Connect{ClientID: "flapper", CleanStart: true, KeepAlive: 60}
				withWill(cp)
				if prev != nil {
					var buf []byte
					if second == "subscribe" {
						buf, _ = packet.Append(buf, &packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: "a", QoS: 1}}}, packet.V311)
					} else {
						buf, _ = packet.Append(buf, &packet.Publish{Topic: "t", QoS: 2, PacketID: uint16(i), Payload: []byte("x")}, packet.V311)
					}
					buf, _ = packet.Append(buf, &packet.Disconnect{}, packet.V311)
					prev.write(buf)
					prev.conn.Close()
				}
				rc.connect(cp)
				prev = rc
			}
			prev.disconnect()
			pub, _ := rawConnect(t, b.addr, packet.V311, "", true, nil)
			pub.send(&packet.Publish{Topic: "will/marker", Payload: []byte("end")})
			wills := 0
			for {
				p := watch.nextPublish(10 * time.Second)
				if p.Topic == "will/marker" {
					break
				}
				wills++
			}
			if wills > 0 {
				t.Fatalf("%d of 29 quick reconnects after DISCONNECT published the will (closes by reason: %v)", wills, b.srv.Stats().Closes)
			}
		})
	}
}
