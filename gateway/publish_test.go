package gateway_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/internal/testutil"
)

// TestNoMatchingSubscribers: a v5 QoS 1/2 publish that reached no
// subscriber and no sink is acknowledged with 0x10; with a subscriber, 0.
func TestNoMatchingSubscribers(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true})
	rc, _ := rawConnect(t, b.addr, packet.V5, "lonely", true, nil)
	rc.send(&packet.Publish{Topic: "nobody/here", QoS: 1, PacketID: 1})
	if a := expect[*packet.Puback](t, rc, 10*time.Second); a.ReasonCode != packet.NoMatchingSubscribers {
		t.Fatalf("puback %v, want no matching subscribers", a.ReasonCode)
	}
	rc.send(&packet.Publish{Topic: "nobody/here", QoS: 2, PacketID: 2})
	if a := expect[*packet.Pubrec](t, rc, 10*time.Second); a.ReasonCode != packet.NoMatchingSubscribers {
		t.Fatalf("pubrec %v, want no matching subscribers", a.ReasonCode)
	}
	rc.send(&packet.Pubrel{PacketID: 2})
	expect[*packet.Pubcomp](t, rc, 10*time.Second)
	rc.subscribe(3, packet.Properties{}, packet.Subscription{Filter: "nobody/here"})
	rc.send(&packet.Publish{Topic: "nobody/here", QoS: 1, PacketID: 4})
	for {
		switch p := rc.next(10 * time.Second).(type) {
		case *packet.Puback:
			if p.ReasonCode != 0 {
				t.Fatalf("puback %v with a subscriber, want success", p.ReasonCode)
			}
			return
		case *packet.Publish:
		default:
			t.Fatalf("unexpected %T", p)
		}
	}
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

// TestTopicOverLimitRefusedVisibly: a PUBLISH whose topic is over
// limits.max_topic_length (here 1024) is refused where the client sees it:
// MQTT 5 QoS 1 gets PUBACK 0x90, MQTT 5 QoS 0 (which has no ack) a
// DISCONNECT 0x90 and the close; a 3.1.1 client (no negative ack) is
// closed without an ack. Each close has a log line and the close reason
// topic_limit. The default limit is MQTT's own: a 65,535-byte topic is
// delivered.
func TestTopicOverLimitRefusedVisibly(t *testing.T) {
	var logs testutil.LogBuffer
	b := startBrokerLog(t, gateway.Options{AllowAnonymous: true, MaxTopicLength: 1024},
		slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})))
	long := "long/" + strings.Repeat("x", 1100)

	v5, _ := rawConnect(t, b.addr, packet.V5, "v5-pub", true, nil)
	v5.send(&packet.Publish{QoS: 1, PacketID: 1, Topic: long, Payload: []byte("x")})
	if a := expect[*packet.Puback](t, v5, 10*time.Second); a.ReasonCode != packet.TopicNameInvalid {
		t.Fatalf("v5 QoS 1: PUBACK %v, want 0x90", a.ReasonCode)
	}
	v5.send(&packet.Publish{Topic: long, Payload: []byte("x")})
	got := v5.expectClose(10 * time.Second)
	if len(got) != 1 {
		t.Fatalf("v5 QoS 0: got %v before the close, want one DISCONNECT", types(got))
	}
	if d, ok := got[0].(*packet.Disconnect); !ok || d.ReasonCode != packet.TopicNameInvalid {
		t.Fatalf("v5 QoS 0: got %+v, want DISCONNECT 0x90", got[0])
	}

	for _, qos := range []byte{0, 1} {
		before := closes(b, "topic_limit")
		v3, _ := rawConnect(t, b.addr, packet.V311, "v3-pub", true, nil)
		v3.send(&packet.Publish{QoS: qos, PacketID: 1, Topic: long, Payload: []byte("x")})
		if got := v3.expectClose(10 * time.Second); len(got) != 0 {
			t.Fatalf("3.1.1 QoS %d: got %v before the close, want nothing", qos, types(got))
		}
		testutil.Eventually(t, 5*time.Second, "the close counted as topic_limit", func() bool { return closes(b, "topic_limit") == before+1 })
	}
	if n := strings.Count(logs.String(), "publish topic over the limits; closing"); n != 3 {
		t.Fatalf("%d log lines for the three closes, want 3:\n%s", n, logs.String())
	}

	// The default: MQTT's own maximum.
	d := startBroker(t, gateway.Options{AllowAnonymous: true})
	longest := "a/" + strings.Repeat("z", 65533)
	sub := ackingSubscriber(t, d.addr, packet.V5, "longest-sub", packet.Subscription{Filter: "a/+", QoS: 1})
	pub, _ := rawConnect(t, d.addr, packet.V5, "longest-pub", true, nil)
	pub.send(&packet.Publish{QoS: 1, PacketID: 1, Topic: longest, Payload: []byte("x")})
	if a := expect[*packet.Puback](t, pub, 10*time.Second); a.ReasonCode != packet.Success {
		t.Fatalf("a 65,535-byte topic under the default limit: PUBACK %v", a.ReasonCode)
	}
	if p := sub.nextPublish(10 * time.Second); p.Topic != longest {
		t.Fatalf("got a %d-byte topic, want the 65,535-byte one", len(p.Topic))
	}
}
