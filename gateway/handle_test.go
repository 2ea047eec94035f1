package gateway_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/gateway/store"
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

// A PUBREL to a persistent session goes out only once the record of its
// PUBREC is on disk: after the PUBREL the device may complete and forget
// the id, and a restart that had lost the record would send the PUBLISH
// again, which the device would take for a new message. A kill -9 the
// moment the PUBREL arrives (a crash copy taken then) restarts with the
// flow released: the device is sent the PUBREL again, not the PUBLISH.
func TestPubrelWaitsForItsRecord(t *testing.T) {
	dir := t.TempDir()
	// A long commit window: a PUBREL sent at once would arrive long
	// before the PUBREC's record is written.
	b, _ := stateBrokerWindow(t, dir, store.SyncBatch, 300*time.Millisecond)
	dev, _ := rawConnect(t, b.addr, packet.V5, "device", true, withExpiry(3600))
	dev.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "cmd/#", QoS: 2})
	pub, _ := rawConnect(t, b.addr, packet.V5, "pub", true, nil)
	const n = 3
	for i := range n {
		pub.send(&packet.Publish{QoS: 2, PacketID: uint16(i + 1), Topic: "cmd/x", Payload: []byte(fmt.Sprint("c", i))})
		expect[*packet.Pubrec](t, pub, 10*time.Second)
	}
	var ids []uint16
	for range n {
		p := dev.nextPublish(10 * time.Second)
		ids = append(ids, p.PacketID)
		dev.send(&packet.Pubrec{PacketID: p.PacketID})
	}
	for i := range n { // in PUBREC order
		if r := expect[*packet.Pubrel](t, dev, 10*time.Second); r.PacketID != ids[i] {
			t.Fatalf("PUBREL %d for id %d, want %d", i, r.PacketID, ids[i])
		}
	}
	crashed := crashCopy(t, dir)
	dev.close()

	b2, _ := stateBroker(t, crashed, store.SyncBatch)
	dev2, _ := rawConnect(t, b2.addr, packet.V5, "device", false, withExpiry(3600))
	for i := range n {
		switch p := dev2.next(10 * time.Second).(type) {
		case *packet.Pubrel:
			if p.PacketID != ids[i] {
				t.Fatalf("after the crash: PUBREL for id %d, want %d", p.PacketID, ids[i])
			}
		default:
			t.Fatalf("after the crash the device got %T %+v, want the PUBREL of id %d", p, p, ids[i])
		}
	}
}
