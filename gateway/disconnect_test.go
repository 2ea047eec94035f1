package gateway_test

import (
	"testing"
	"time"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/internal/testutil"
)

// TestWillOnErrorDisconnect: an MQTT 5 client that ends with a
// DISCONNECT carrying an error reason code (0x80 Unspecified error) has
// not asked for its will to be dropped: only reason 0x00 deletes the will
// [MQTT-3.1.2-8], [MQTT-3.14.4-3], and docs/behaviour.md says wills are
// published "on any close that is not a normal DISCONNECT". Found by a
// conformance probe with python3-paho-mqtt, when only 0x04 kept the will.
func TestWillOnErrorDisconnect(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true})
	w := ackingSubscriber(t, b.addr, packet.V5, "watcher", packet.Subscription{Filter: "will/#", QoS: 1})
	c, _ := rawConnect(t, b.addr, packet.V5, "dying", true, func(cp *packet.Connect) {
		cp.Will = &packet.Will{Topic: "will/dying", QoS: 1, Payload: []byte("gone")}
	})
	c.send(&packet.Disconnect{ReasonCode: packet.UnspecifiedError})
	c.expectClose(5 * time.Second)
	p, err := w.nextErr(5 * time.Second)
	if err != nil {
		t.Fatalf("no will after DISCONNECT 0x80: %v ([MQTT-3.1.2-8]: only 0x00 deletes it)", err)
	}
	if pp, ok := p.(*packet.Publish); !ok || pp.Topic != "will/dying" {
		t.Fatalf("got %T %+v, want the will", p, p)
	}
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
