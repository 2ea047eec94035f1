package bridge

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/eclipse/paho.mqtt.golang/packets"
)

// packetStream encodes a random sequence of packets a broker sends a
// client (with paho's encoder, so the lengths are real), and the PUBREC ids
// in it.
func packetStream(r *rand.Rand, n int) ([]byte, []uint16) {
	var buf bytes.Buffer
	var ids []uint16
	for range n {
		var p packets.ControlPacket
		switch r.IntN(6) {
		case 0:
			pub := packets.NewControlPacket(packets.Publish).(*packets.PublishPacket)
			pub.Qos = byte(r.IntN(3))
			pub.TopicName = "t/" + string(rune('a'+r.IntN(26)))
			if pub.Qos > 0 {
				pub.MessageID = uint16(r.IntN(65535) + 1)
			}
			// Payloads long enough for 1- to 3-byte remaining lengths,
			// and bytes that look like PUBREC headers.
			pub.Payload = bytes.Repeat([]byte{0x50, 0x02}, r.IntN(20000))
			p = pub
		case 1:
			rec := packets.NewControlPacket(packets.Pubrec).(*packets.PubrecPacket)
			rec.MessageID = uint16(r.IntN(65535) + 1)
			ids = append(ids, rec.MessageID)
			p = rec
		case 2:
			p = &packets.PubackPacket{FixedHeader: packets.FixedHeader{MessageType: packets.Puback}, MessageID: uint16(r.IntN(65535) + 1)}
		case 3:
			p = &packets.PubcompPacket{FixedHeader: packets.FixedHeader{MessageType: packets.Pubcomp}, MessageID: uint16(r.IntN(65535) + 1)}
		case 4:
			p = packets.NewControlPacket(packets.Pingresp)
		case 5:
			sa := packets.NewControlPacket(packets.Suback).(*packets.SubackPacket)
			sa.MessageID = uint16(r.IntN(65535) + 1)
			sa.ReturnCodes = []byte{0, 1, 2, 0x80}
			p = sa
		}
		if err := p.Write(&buf); err != nil {
			panic(err)
		}
	}
	return buf.Bytes(), ids
}

// TestPubrecScanner feeds random broker streams in random read sizes (as
// the network delivers them) and checks that exactly the PUBREC ids are
// reported, in order.
func TestPubrecScanner(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		stream, want := packetStream(r, 1+r.IntN(40))
		var got []uint16
		s := pubrecScanner{onPubrec: func(id uint16) { got = append(got, id) }}
		for rest := stream; len(rest) > 0; {
			n := min(len(rest), 1+r.IntN(3000))
			if r.IntN(4) == 0 {
				n = 1 // paho reads headers byte by byte
			}
			s.scan(rest[:n])
			rest = rest[n:]
		}
		if !slices.Equal(got, want) {
			t.Fatalf("round %d: got PUBREC ids %v, want %v", round, got, want)
		}
		if s.state != scanHeader {
			t.Fatalf("round %d: scanner not at a packet boundary after a whole stream", round)
		}
	}
}

// FuzzPubrecScanner checks that no input makes the scanner panic or loop,
// and that a well-formed PUBREC after any prefix that ends on a packet
// boundary is found.
func FuzzPubrecScanner(f *testing.F) {
	f.Add([]byte{0x50, 0x02, 0x00, 0x01})
	f.Add([]byte{0x30, 0xff, 0xff, 0xff, 0xff, 0x50})
	f.Add([]byte{0x62, 0x02, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		var n int
		s := pubrecScanner{onPubrec: func(uint16) { n++ }}
		s.scan(b)
		if s.state == scanHeader {
			before := n
			s.scan([]byte{0x50, 0x02, 0x12, 0x34})
			if n != before+1 {
				t.Fatalf("a PUBREC on a packet boundary was not reported")
			}
		}
	})
}
