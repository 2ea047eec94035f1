package gateway_test

import (
	"testing"
	"time"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/packet"
)

// TestSysVersion: $SYS/broker/version reports Options.Version (cmd/edgegw
// sets "edgegw <build version>", docs/metrics.md), and "edgegw" without one.
func TestSysVersion(t *testing.T) {
	for _, tc := range []struct{ opt, want string }{
		{"edgegw 1.2.3-test", "edgegw 1.2.3-test"},
		{"", "edgegw"},
	} {
		b := startBroker(t, gateway.Options{AllowAnonymous: true, SysInterval: 50 * time.Millisecond, Version: tc.opt})
		rc, _ := rawConnect(t, b.addr, packet.V311, "sysver", true, nil)
		rc.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "$SYS/broker/version"})
		p := rc.nextPublish(10 * time.Second)
		if p.Topic != "$SYS/broker/version" || string(p.Payload) != tc.want {
			t.Errorf("Version %q: got %s = %q, want %q", tc.opt, p.Topic, p.Payload, tc.want)
		}
		rc.disconnect()
		b.stop()
	}
}

// TestSysNotCountedAsReceived: the broker's own $SYS reports are not
// messages received (docs/metrics.md: "PUBLISH messages accepted from
// clients and bridges"): with only $SYS traffic the count stays 0, and a
// client's publish counts one.
func TestSysNotCountedAsReceived(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true, SysInterval: 20 * time.Millisecond})
	rc, _ := rawConnect(t, b.addr, packet.V311, "sysrecv", true, nil)
	rc.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "$SYS/broker/uptime"})
	for range 3 { // three rounds of reports routed
		rc.nextPublish(10 * time.Second)
	}
	if n := b.srv.Stats().MessagesReceived; n != 0 {
		t.Fatalf("messages received %d after $SYS reports only, want 0", n)
	}
	pub, _ := rawConnect(t, b.addr, packet.V311, "sysrecv-pub", true, nil)
	pub.send(&packet.Publish{Topic: "a/b", Payload: []byte("x"), QoS: 1, PacketID: 1})
	expect[*packet.Puback](t, pub, 10*time.Second)
	if n := b.srv.Stats().MessagesReceived; n != 1 {
		t.Fatalf("messages received %d after one publish, want 1", n)
	}
}

// TestMaxPacketSizeHoldsForSentPackets: limits.max_packet_size is the
// largest packet accepted or sent (docs/config.md). A message that did not
// come in through a listener (a bridge's, via Publish) is not held to it
// on its way in, so it is held to it on its way out: a 3.1.1 subscriber,
// which cannot say what it takes, is not sent a larger PUBLISH; it is
// dropped as too_large and the next message goes through.
func TestMaxPacketSizeHoldsForSentPackets(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true, MaxPacketSize: 1024})
	for _, v := range []packet.Version{packet.V311, packet.V5} {
		t.Run(v.String(), func(t *testing.T) {
			// A topic of its own: the other subtest's subscriber may still be
			// connected, and a drop of its copy would count too.
			top := "cmd/" + v.String()
			sub, _ := rawConnect(t, b.addr, v, "big-sub-"+v.String(), true, nil)
			sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: top + "/#", QoS: 1})
			before := b.srv.Stats().Drops["too_large"]
			if err := b.srv.Publish(&gateway.Message{Topic: top + "/big", Payload: make([]byte, 2000), QoS: 1, Origin: "$bridge/cloud"}); err != nil {
				t.Fatal(err)
			}
			if err := b.srv.Publish(&gateway.Message{Topic: top + "/small", Payload: []byte("ok"), QoS: 1, Origin: "$bridge/cloud"}); err != nil {
				t.Fatal(err)
			}
			p := sub.nextPublish(10 * time.Second)
			if p.Topic != top+"/small" {
				t.Fatalf("first delivery %q (%d bytes), want %s/small: the 2000-byte message exceeds max_packet_size 1024", p.Topic, len(p.Payload), top)
			}
			if n := b.srv.Stats().Drops["too_large"]; n != before+1 {
				t.Fatalf("too_large drops %d, want %d", n, before+1)
			}
		})
	}
}
