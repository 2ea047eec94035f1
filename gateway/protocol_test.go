package gateway_test

// Protocol errors from raw bytes: the broker closes cleanly, tells a v5
// client why (DISCONNECT with a reason code) and leaves nothing behind.

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/packet"
	. "github.com/edgegw/edgegw/gateway/packet/packettest"
	"github.com/edgegw/edgegw/internal/testutil"
)

const protoMaxPacket = 512

func protoBroker(t *testing.T) *broker {
	return startBroker(t, gateway.Options{AllowAnonymous: true, MaxPacketSize: protoMaxPacket, TopicAliasMaximum: 10})
}

// v5Publish encodes a v5 PUBLISH with props.
func v5Publish(t *testing.T, topic string, props packet.Properties, payload []byte) []byte {
	t.Helper()
	b, err := packet.Append(nil, &packet.Publish{Topic: topic, Props: props, Payload: payload}, packet.V5)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func aliasProps(a uint16) packet.Properties {
	p := packet.Properties{TopicAlias: a}
	p.Set(packet.PropTopicAlias)
	return p
}

// checkProtocolClose sends bad after connecting at level v (0: no CONNECT)
// and checks how the broker ends the connection. want is the v5 DISCONNECT
// reason, or 0 for "closed without a DISCONNECT".
func checkProtocolClose(t *testing.T, b *broker, v packet.Version, bad []byte, want packet.ReasonCode) {
	t.Helper()
	before := closes(b, "protocol_error")
	var rc *rawClient
	if v == 0 {
		rc = rawDial(t, b.addr, packet.V311)
		rc.start()
	} else {
		rc, _ = rawConnect(t, b.addr, v, "", true, nil)
	}
	if err := rc.write(bad); err != nil {
		t.Fatal(err)
	}
	got := rc.expectClose(10 * time.Second)
	switch {
	case want == 0 && len(got) != 0:
		t.Fatalf("got %v before close, want nothing", types(got))
	case want != 0:
		if len(got) != 1 {
			t.Fatalf("got %v before close, want one DISCONNECT", types(got))
		}
		d, ok := got[0].(*packet.Disconnect)
		if !ok || d.ReasonCode != want {
			t.Fatalf("got %+v, want DISCONNECT %#x (%v)", got[0], byte(want), want)
		}
	}
	testutil.Eventually(t, 5*time.Second, "protocol_error counted", func() bool {
		return closes(b, "protocol_error") >= before+1
	})
}

func TestProtocolErrors(t *testing.T) {
	b := protoBroker(t)
	connect311 := B(0x10, 12, S("MQTT"), 4, 0x02, 0, 60, S(""))
	connect5 := B(0x10, 13, S("MQTT"), 5, 0x02, 0, 60, 0, S(""))
	big := bytes.Repeat([]byte{'x'}, protoMaxPacket)
	for _, tc := range []struct {
		name string
		v    packet.Version
		bad  []byte
		want packet.ReasonCode
	}{
		{"v311/second_connect", packet.V311, connect311, 0},
		{"v5/second_connect", packet.V5, connect5, packet.ProtocolError},
		{"publish_before_connect", 0, B(0x30, 3, S("t"), "x"), 0},
		{"subscribe_before_connect", 0, B(0x82, 6, 0, 1, S("t"), 0), 0},
		{"v311/publish_wildcard_plus", packet.V311, B(0x30, 6, S("a/+"), "x"), 0},
		{"v5/publish_wildcard_plus", packet.V5, B(0x30, 7, S("a/+"), 0, "x"), packet.TopicNameInvalid},
		{"v5/publish_wildcard_hash", packet.V5, B(0x30, 5, S("#"), 0, "x"), packet.TopicNameInvalid},
		{"v311/puback_flags", packet.V311, B(0x41, 2, 0, 1), 0},
		{"v5/pingreq_flags", packet.V5, B(0xC1, 0), packet.MalformedPacket},
		{"v5/subscribe_flags", packet.V5, B(0x80, 7, 0, 1, 0, S("t"), 0), packet.MalformedPacket},
		{"v5/publish_qos3", packet.V5, B(0x36, 6, S("t"), 0, 1, 0), packet.MalformedPacket},
		{"v311/oversized", packet.V311, v5Publish(t, "t", packet.Properties{}, big), 0},
		{"v5/oversized", packet.V5, v5Publish(t, "t", packet.Properties{}, big), packet.PacketTooLarge},
		{"v5/oversized_length_only", packet.V5, B(0x30, 0xFF, 0xFF, 0x7F), packet.PacketTooLarge},
		{"v5/unknown_topic_alias", packet.V5, v5Publish(t, "", aliasProps(3), []byte("x")), packet.ProtocolError},
		{"v5/topic_alias_above_maximum", packet.V5, v5Publish(t, "t", aliasProps(11), []byte("x")), packet.TopicAliasInvalid},
		{"v5/topic_alias_0", packet.V5, B(0x30, 8, S("t"), 3, 0x23, 0, 0, "x"), packet.TopicAliasInvalid},
		{"v5/connack_from_client", packet.V5, B(0x20, 3, 0, 0, 0), packet.ProtocolError},
		{"v5/auth_without_method", packet.V5, B(0xF0, 0), packet.ProtocolError},
		{"v5/no_local_on_shared", packet.V5, B(0x82, 16, 0, 1, 0, S("$share/g/t"), 0x04), packet.ProtocolError},
		{"v311/reserved_type_0", packet.V311, B(0x00, 0), 0},
		{"v5/reserved_type_0", packet.V5, B(0x00, 0), packet.MalformedPacket},
		{"v5/remaining_length_5_bytes", packet.V5, B(0x30, 0xFF, 0xFF, 0xFF, 0xFF, 0x01), packet.MalformedPacket},
	} {
		t.Run(tc.name, func(t *testing.T) { checkProtocolClose(t, b, tc.v, tc.bad, tc.want) })
	}
}

func TestProtocolHTTPOnMQTTPort(t *testing.T) {
	b := protoBroker(t)
	for _, req := range []string{"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "POST /mqtt HTTP/1.1\r\n\r\n", "GET /mqtt HTTP/1.1\r\nUpgrade: websocket\r\n\r\n"} {
		t.Run(strings.Fields(req)[0]+strings.Fields(req)[1], func(t *testing.T) {
			checkProtocolClose(t, b, 0, []byte(req), 0)
		})
	}
}

// TestProtocolGoldenInvalid sends every invalid packet of packettest at the
// level it is defined for and expects the reason code the codec reports.
func TestProtocolGoldenInvalid(t *testing.T) {
	b := protoBroker(t)
	for _, bad := range Invalid {
		t.Run(bad.Name, func(t *testing.T) {
			switch bad.Version {
			case 0:
				before := closes(b, "protocol_error") + closes(b, "not_authorized")
				rc := rawDial(t, b.addr, packet.V311)
				rc.start()
				if err := rc.write(bad.Bytes); err != nil {
					t.Fatal(err)
				}
				got := rc.expectClose(10 * time.Second)
				if bad.Code == packet.UnsupportedProtocolVersion {
					// [MQTT-3.1.2-2](3.1.1): CONNACK 0x01, then close.
					if len(got) != 1 {
						t.Fatalf("got %v, want CONNACK", types(got))
					}
					if a, ok := got[0].(*packet.Connack); !ok || a.ReasonCode != packet.V3RefusedProtocolVersion {
						t.Fatalf("got %+v, want CONNACK 0x01", got[0])
					}
					return
				}
				if len(got) != 0 {
					t.Fatalf("got %v before close, want nothing", types(got))
				}
				// >=: a previous case's connection may finish its cleanup
				// (and be counted) after before was read.
				testutil.Eventually(t, 5*time.Second, "close counted", func() bool {
					return closes(b, "protocol_error")+closes(b, "not_authorized") >= before+1
				})
			case packet.V5:
				checkProtocolClose(t, b, packet.V5, bad.Bytes, bad.Code)
			default:
				checkProtocolClose(t, b, bad.Version, bad.Bytes, 0)
			}
		})
	}
}

// TestProtocolGoldenValid replays every valid client packet of packettest
// that a client may send after CONNECT; the broker must stay up and answer
// PINGREQ afterwards (except after DISCONNECT).
func TestProtocolGoldenValid(t *testing.T) {
	b := protoBroker(t)
	for i, f := range Golden {
		switch f.Packet.(type) {
		case *packet.Connect, *packet.Connack, *packet.Suback, *packet.Unsuback, *packet.Pingresp, *packet.Auth, *packet.Disconnect:
			continue // not sent by a client after CONNECT, or ends the connection
		}
		if len(f.Bytes) > protoMaxPacket {
			continue
		}
		t.Run(f.Name, func(t *testing.T) {
			rc, _ := rawConnect(t, b.addr, f.Version, fmt.Sprintf("golden%d", i), true, nil)
			if p, ok := f.Packet.(*packet.Publish); ok && p.Topic == "" {
				// An empty topic needs its alias set first.
				rc.send(&packet.Publish{Topic: "alias/t", Props: aliasProps(p.Props.TopicAlias)})
			}
			if err := rc.write(f.Bytes); err != nil {
				t.Fatal(err)
			}
			rc.send(&packet.Pingreq{})
			for {
				p, err := rc.nextErr(10 * time.Second)
				if err != nil {
					t.Fatalf("after %s: %v", f.Name, err)
				}
				if _, ok := p.(*packet.Pingresp); ok {
					break
				}
				if d, ok := p.(*packet.Disconnect); ok {
					t.Fatalf("after %s: DISCONNECT %v", f.Name, d.ReasonCode)
				}
			}
			rc.disconnect()
		})
	}
}

// TestProtocolShortFirstPacket: a first packet shorter than 4 bytes that is
// not CONNECT (PINGREQ, DISCONNECT) must be refused at once, not when
// connect_timeout ends.
func TestProtocolShortFirstPacket(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true, ConnectTimeout: time.Minute})
	for _, tc := range []struct {
		name string
		bad  []byte
	}{
		{"pingreq", B(0xC0, 0)},
		{"disconnect", B(0xE0, 0)},
		{"puback_3_bytes", B(0x40, 1, 0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := closes(b, "protocol_error")
			rc := rawDial(t, b.addr, packet.V311)
			rc.start()
			if err := rc.write(tc.bad); err != nil {
				t.Fatal(err)
			}
			if got := rc.expectClose(5 * time.Second); len(got) != 0 {
				t.Fatalf("got %v", types(got))
			}
			testutil.Eventually(t, 5*time.Second, "protocol_error counted", func() bool {
				return closes(b, "protocol_error") >= before+1
			})
		})
	}
}
