package gateway_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/internal/testutil"
)

// TestWrongAcknowledgementIsProtocolError: PUBREC or PUBCOMP for a QoS 1
// message, PUBACK or PUBCOMP (before PUBREC) for a QoS 2 one, PUBACK after
// PUBREL: v5 gets DISCONNECT 0x82, 3.1.1 is closed; counted as protocol
// errors.
func TestWrongAcknowledgementIsProtocolError(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true})
	for _, v := range []packet.Version{packet.V311, packet.V5} {
		for _, tc := range []struct {
			name  string
			qos   byte
			reply func(id uint16) []packet.Packet
		}{
			{"pubrec_for_qos1", 1, func(id uint16) []packet.Packet { return []packet.Packet{&packet.Pubrec{PacketID: id}} }},
			{"pubcomp_for_qos1", 1, func(id uint16) []packet.Packet { return []packet.Packet{&packet.Pubcomp{PacketID: id}} }},
			{"puback_for_qos2", 2, func(id uint16) []packet.Packet { return []packet.Packet{&packet.Puback{PacketID: id}} }},
			{"pubcomp_before_pubrec", 2, func(id uint16) []packet.Packet { return []packet.Packet{&packet.Pubcomp{PacketID: id}} }},
			{"puback_after_pubrel", 2, func(id uint16) []packet.Packet {
				return []packet.Packet{&packet.Pubrec{PacketID: id}, &packet.Puback{PacketID: id}}
			}},
		} {
			t.Run(fmt.Sprintf("%v/%s", v, tc.name), func(t *testing.T) {
				before := closes(b, "protocol_error")
				topic := "wrong/" + tc.name
				sub, _ := rawConnect(t, b.addr, v, "", true, nil)
				sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: topic, QoS: 2})
				pub, _ := rawConnect(t, b.addr, packet.V311, "", true, nil)
				pub.send(&packet.Publish{Topic: topic, QoS: tc.qos, PacketID: 1, Payload: []byte("m")})
				p := sub.nextPublish(10 * time.Second)
				replies := tc.reply(p.PacketID)
				for i, r := range replies {
					sub.send(r)
					if i < len(replies)-1 { // PUBREC first: the broker answers PUBREL
						expect[*packet.Pubrel](t, sub, 10*time.Second)
					}
				}
				got := sub.expectClose(10 * time.Second)
				if v == packet.V5 {
					if len(got) != 1 || got[0].(*packet.Disconnect).ReasonCode != packet.ProtocolError {
						t.Fatalf("got %v before close, want DISCONNECT protocol error", types(got))
					}
				} else if len(got) != 0 {
					t.Fatalf("got %v before close, want nothing (no PUBREL for a QoS 1 message)", types(got))
				}
				testutil.Eventually(t, 10*time.Second, "protocol error counted", func() bool { return closes(b, "protocol_error") > before })
			})
		}
	}
}
