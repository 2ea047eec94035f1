package gateway_test

// MQTT 5 features through a raw v5 client.

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/internal/testutil"
)

func v5Client(t *testing.T, b *broker, id string, mod func(*packet.Connect)) *rawClient {
	t.Helper()
	c, _ := rawConnect(t, b.addr, packet.V5, id, true, mod)
	return c
}

func subID(id uint32) packet.Properties {
	var p packet.Properties
	p.SubscriptionIDs = []uint32{id}
	p.Set(packet.PropSubscriptionID)
	return p
}

// pub1 publishes a QoS 1 message and waits for PUBACK.
func (rc *rawClient) pub1(id uint16, p *packet.Publish) {
	rc.t.Helper()
	p.QoS, p.PacketID = 1, id
	rc.send(p)
	a := expect[*packet.Puback](rc.t, rc, 10*time.Second)
	if a.PacketID != id || a.ReasonCode.IsError() {
		rc.t.Fatalf("puback %+v", a)
	}
}

func TestV5SubscriptionIdentifiers(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true})
	c := v5Client(t, b, "sid", nil)
	c.subscribe(1, subID(7), packet.Subscription{Filter: "sid/+"})
	c.subscribe(2, subID(300000), packet.Subscription{Filter: "sid/#"})
	c.subscribe(3, packet.Properties{}, packet.Subscription{Filter: "nosid/#"})
	pub := v5Client(t, b, "sid-pub", nil)
	for _, tc := range []struct {
		topic string
		want  []uint32
	}{
		{"sid/a", []uint32{7, 300000}},
		{"sid/a/b", []uint32{300000}},
		{"nosid/x", nil},
	} {
		t.Run(tc.topic, func(t *testing.T) {
			pub.send(&packet.Publish{Topic: tc.topic, Payload: []byte("x")})
			p := c.nextPublish(10 * time.Second)
			got := slices.Clone(p.Props.SubscriptionIDs)
			slices.Sort(got)
			if p.Topic != tc.topic || !slices.Equal(got, tc.want) {
				t.Fatalf("got %q ids %v, want %q ids %v", p.Topic, got, tc.topic, tc.want)
			}
		})
	}
}

func TestV5NoLocal(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true})
	for _, noLocal := range []bool{true, false} {
		t.Run(fmt.Sprintf("no_local=%v", noLocal), func(t *testing.T) {
			c := v5Client(t, b, "nl", nil)
			c.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "nl/t", QoS: 1, NoLocal: noLocal})
			c.pub1(1, &packet.Publish{Topic: "nl/t", Payload: []byte("own")})
			other := v5Client(t, b, "nl-other", nil)
			other.pub1(1, &packet.Publish{Topic: "nl/t", Payload: []byte("other")})
			var want []string
			if !noLocal {
				want = append(want, "own")
			}
			want = append(want, "other")
			for _, w := range want {
				p := c.nextPublish(10 * time.Second)
				c.ackPublish(p)
				if string(p.Payload) != w {
					t.Fatalf("got %q, want %q", p.Payload, w)
				}
			}
			c.disconnect()
			other.disconnect()
		})
	}
}

func TestV5RetainOptions(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true})
	pub := v5Client(t, b, "ret-pub", nil)
	pub.pub1(1, &packet.Publish{Topic: "ro/t", Retain: true, Payload: []byte("kept")})

	t.Run("retain_as_published", func(t *testing.T) {
		rap := v5Client(t, b, "rap", nil)
		rap.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "ro/live", RetainAsPublished: true})
		plain := v5Client(t, b, "norap", nil)
		plain.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "ro/live"})
		pub.pub1(2, &packet.Publish{Topic: "ro/live", Retain: true, Payload: []byte("r")})
		if p := rap.nextPublish(10 * time.Second); !p.Retain {
			t.Error("retain-as-published subscriber got retain=0")
		}
		if p := plain.nextPublish(10 * time.Second); p.Retain {
			t.Error("plain subscriber got retain=1 on a live message [MQTT-3.3.1-12]")
		}
		pub.pub1(3, &packet.Publish{Topic: "ro/live", Retain: true}) // clear
	})

	for _, tc := range []struct {
		rh           byte
		first, again bool // a retained message on the first / a repeated subscribe
	}{
		{rh: 0, first: true, again: true},
		{rh: 1, first: true, again: false},
		{rh: 2, first: false, again: false},
	} {
		t.Run(fmt.Sprintf("retain_handling_%d", tc.rh), func(t *testing.T) {
			c := v5Client(t, b, fmt.Sprintf("rh%d", tc.rh), nil)
			marker := fmt.Sprintf("ro/marker%d", tc.rh)
			c.subscribe(1, packet.Properties{}, packet.Subscription{Filter: marker})
			for i, want := range []bool{tc.first, tc.again} {
				c.subscribe(uint16(i+2), packet.Properties{}, packet.Subscription{Filter: "ro/t", RetainHandling: tc.rh})
				pub.pub1(uint16(10+i), &packet.Publish{Topic: marker, Payload: []byte("m")})
				p := c.nextPublish(10 * time.Second)
				if got := p.Topic == "ro/t"; got != want {
					t.Fatalf("subscribe #%d: got retained=%v (%q), want %v", i+1, got, p.Topic, want)
				}
				if p.Topic == "ro/t" {
					if !p.Retain || string(p.Payload) != "kept" {
						t.Fatalf("retained message %+v", p)
					}
					if m := c.nextPublish(10 * time.Second); m.Topic != marker {
						t.Fatalf("got %q, want marker", m.Topic)
					}
				}
			}
		})
	}
}

func TestV5SharedSubscription(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true})
	const n = 40
	var members []*rawClient
	for i := range 2 {
		members = append(members, ackingSubscriber(t, b.addr, packet.V5, fmt.Sprintf("member%d", i), packet.Subscription{Filter: "$share/g/sh/+", QoS: 1}))
	}
	all := v5Client(t, b, "all", nil)
	all.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "sh/+"})
	pub := v5Client(t, b, "sh-pub", nil)
	for i := range n {
		pub.pub1(uint16(i+1), &packet.Publish{Topic: "sh/t", Payload: []byte(fmt.Sprint(i))})
	}
	for i := range n {
		if p := all.nextPublish(10 * time.Second); string(p.Payload) != fmt.Sprint(i) {
			t.Fatalf("non-shared subscriber: message %d is %q", i, p.Payload)
		}
	}
	testutil.Eventually(t, 10*time.Second, "all shared deliveries", func() bool {
		return len(members[0].in)+len(members[1].in) >= n
	})
	seen := map[string]int{}
	for i, m := range members {
		count := len(m.in)
		for range count {
			p := m.nextPublish(time.Second)
			seen[string(p.Payload)]++
		}
		// Round robin between two connected members: an even split.
		if count != n/2 {
			t.Errorf("member %d got %d of %d, want %d (round robin)", i, count, n, n/2)
		}
	}
	for i := range n {
		if seen[fmt.Sprint(i)] != 1 {
			t.Errorf("message %d delivered %d times to the group, want exactly once", i, seen[fmt.Sprint(i)])
		}
	}
}

func TestV5MessageExpiry(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true})
	c, _ := rawConnect(t, b.addr, packet.V5, "mexp", false, withExpiry(60))
	c.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "mexp/t", QoS: 1})
	c.disconnect()

	expiry := func(secs uint32) packet.Properties {
		var p packet.Properties
		p.MessageExpiry = secs
		p.Set(packet.PropMessageExpiry)
		return p
	}
	pub := v5Client(t, b, "mexp-pub", nil)
	pub.pub1(1, &packet.Publish{Topic: "mexp/t", Payload: []byte("short"), Props: expiry(1)})
	pub.pub1(2, &packet.Publish{Topic: "mexp/t", Payload: []byte("long"), Props: expiry(60)})
	pub.pub1(3, &packet.Publish{Topic: "mexp/t", Payload: []byte("forever")})
	before := drops(b, "expired")
	<-time.After(2 * time.Second) // let the 1s expiry pass while the session is offline

	c2, ack := rawConnect(t, b.addr, packet.V5, "mexp", false, withExpiry(0))
	if !ack.SessionPresent {
		t.Fatal("session not present")
	}
	p := c2.nextPublish(10 * time.Second)
	c2.ackPublish(p)
	if string(p.Payload) != "long" {
		t.Fatalf("first message %q, want long (short expired)", p.Payload)
	}
	if !p.Props.Has(packet.PropMessageExpiry) || p.Props.MessageExpiry > 59 || p.Props.MessageExpiry == 0 {
		t.Errorf("message expiry %d (present %v), want the remaining time, 58..59", p.Props.MessageExpiry, p.Props.Has(packet.PropMessageExpiry))
	}
	p = c2.nextPublish(10 * time.Second)
	c2.ackPublish(p)
	if string(p.Payload) != "forever" || p.Props.Has(packet.PropMessageExpiry) {
		t.Fatalf("second message %q expiry present %v", p.Payload, p.Props.Has(packet.PropMessageExpiry))
	}
	if got := drops(b, "expired"); got != before+1 {
		t.Errorf("expired drops %d, want %d", got, before+1)
	}
}

func TestV5PassThroughProperties(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true})
	sub := v5Client(t, b, "pt-sub", nil)
	sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "req/#", QoS: 1})
	pub := v5Client(t, b, "pt-pub", nil)
	var props packet.Properties
	props.ResponseTopic = "resp/pt-pub"
	props.CorrelationData = []byte{0, 1, 2, 0xFF}
	props.ContentType = "application/json"
	props.PayloadFormat = 1
	props.UserProperties = []packet.UserProperty{{Key: "k", Value: "v1"}, {Key: "k", Value: "v2"}, {Key: "ü", Value: ""}}
	for _, id := range []packet.PropID{packet.PropResponseTopic, packet.PropCorrelationData,
		packet.PropContentType, packet.PropPayloadFormat, packet.PropUserProperty} {
		props.Set(id)
	}
	for _, qos := range []byte{0, 1} {
		t.Run(fmt.Sprintf("qos%d", qos), func(t *testing.T) {
			m := &packet.Publish{Topic: "req/x", Payload: []byte(`{"a":1}`), Props: props}
			if qos == 1 {
				pub.pub1(1, m)
			} else {
				pub.send(m)
			}
			p := sub.nextPublish(10 * time.Second)
			sub.ackPublish(p)
			got := p.Props
			if got.ResponseTopic != props.ResponseTopic || !bytes.Equal(got.CorrelationData, props.CorrelationData) ||
				got.ContentType != props.ContentType || got.PayloadFormat != 1 ||
				!slices.Equal(got.UserProperties, props.UserProperties) {
				t.Fatalf("got props %+v, want %+v", got, props)
			}
			for _, id := range []packet.PropID{packet.PropResponseTopic, packet.PropCorrelationData,
				packet.PropContentType, packet.PropPayloadFormat} {
				if !got.Has(id) {
					t.Errorf("property %#x not present", byte(id))
				}
			}
		})
	}
}

func TestV5TopicAliases(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true})
	t.Run("from_client", func(t *testing.T) {
		sub := v5Client(t, b, "ta-sub", nil)
		sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "ta/#"})
		pub := v5Client(t, b, "ta-pub", nil)
		pub.send(&packet.Publish{Topic: "ta/one", Props: aliasProps(1), Payload: []byte("1")})
		pub.send(&packet.Publish{Props: aliasProps(1), Payload: []byte("2")})
		pub.send(&packet.Publish{Topic: "ta/two", Props: aliasProps(1), Payload: []byte("3")}) // remap
		pub.send(&packet.Publish{Props: aliasProps(1), Payload: []byte("4")})
		for _, want := range []string{"ta/one 1", "ta/one 2", "ta/two 3", "ta/two 4"} {
			p := sub.nextPublish(10 * time.Second)
			if got := p.Topic + " " + string(p.Payload); got != want {
				t.Fatalf("got %q, want %q", got, want)
			}
		}
	})
	t.Run("to_client", func(t *testing.T) {
		sub := v5Client(t, b, "ta-sub2", func(cp *packet.Connect) {
			cp.Props.TopicAliasMaximum = 2
			cp.Props.Set(packet.PropTopicAliasMaximum)
		})
		sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "tb/#"})
		pub := v5Client(t, b, "tb-pub", nil)
		topics := []string{"tb/a", "tb/a", "tb/b", "tb/c", "tb/a", "tb/b", "tb/c"}
		for _, tp := range topics {
			pub.send(&packet.Publish{Topic: tp, Payload: []byte(tp)})
		}
		aliases := map[uint16]string{}
		for i, want := range topics {
			p := sub.nextPublish(10 * time.Second)
			topic := p.Topic
			if p.Props.Has(packet.PropTopicAlias) {
				a := p.Props.TopicAlias
				if a == 0 || a > 2 {
					t.Fatalf("message %d: alias %d above the client's maximum 2", i, a)
				}
				if topic == "" {
					topic = aliases[a]
				} else {
					aliases[a] = topic
				}
			}
			if topic != want || string(p.Payload) != want {
				t.Fatalf("message %d: resolved topic %q payload %q, want %q", i, topic, p.Payload, want)
			}
		}
	})
}

func TestV5ClientMaximumPacketSize(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true})
	for _, qos := range []byte{0, 1, 2} {
		t.Run(fmt.Sprintf("qos%d", qos), func(t *testing.T) {
			before := drops(b, "too_large")
			sub := rawDial(t, b.addr, packet.V5)
			sub.hook = autoAck
			cp := &packet.Connect{ClientID: "mps", CleanStart: true, KeepAlive: 60}
			cp.Props.MaximumPacketSize = 100
			cp.Props.Set(packet.PropMaximumPacketSize)
			sub.connect(cp)
			sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "mps/t", QoS: qos})
			pub := v5Client(t, b, "mps-pub", nil)
			for i, size := range []int{10, 200, 80, 1000, 20} {
				pub.pub1(uint16(i+1), &packet.Publish{Topic: "mps/t", Payload: bytes.Repeat([]byte{'a' + byte(i)}, size)})
			}
			for _, want := range []int{10, 80, 20} {
				p := sub.nextPublish(10 * time.Second)
				if len(p.Payload) != want {
					t.Fatalf("got a %d byte payload, want %d", len(p.Payload), want)
				}
				if n := packet.Size(p, packet.V5); n > 100 {
					t.Fatalf("got a %d byte packet, client maximum is 100", n)
				}
			}
			testutil.Eventually(t, 5*time.Second, "too_large drops", func() bool { return drops(b, "too_large") == before+2 })
			testutil.Eventually(t, 5*time.Second, "nothing left in flight", func() bool {
				st := b.srv.Stats()
				return st.Inflight == 0 && st.QueuedMessages == 0 && st.QueuedBytes == 0
			})
			sub.disconnect()
			pub.disconnect()
		})
	}
}
