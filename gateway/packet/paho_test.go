package packet_test

// Differential test against github.com/eclipse/paho.mqtt.golang/packets, the
// 3.1.1 codec the bridge uses: what we encode paho must read field for field,
// and what paho encodes we must read back into the packet it was built from.

import (
	"bufio"
	"bytes"
	"reflect"
	"testing"

	"github.com/eclipse/paho.mqtt.golang/packets"
	"pgregory.net/rapid"

	"github.com/edgegw/edgegw/gateway/packet"
)

// toPaho builds the paho packet equivalent to p. The two codecs number the
// packet types alike (the fixed header's type, 3.1.1 §2.2.1).
func toPaho(t *rapid.T, p packet.Packet) packets.ControlPacket {
	cp := packets.NewControlPacket(byte(p.Type()))
	switch p := p.(type) {
	case *packet.Connect:
		c := cp.(*packets.ConnectPacket)
		c.ProtocolName, c.ProtocolVersion = p.ProtocolName, byte(p.Version)
		c.CleanSession, c.Keepalive, c.ClientIdentifier = p.CleanStart, p.KeepAlive, p.ClientID
		if w := p.Will; w != nil {
			c.WillFlag, c.WillQos, c.WillRetain, c.WillTopic, c.WillMessage = true, w.QoS, w.Retain, w.Topic, w.Payload
		}
		c.UsernameFlag, c.Username = p.UsernameFlag, p.Username
		c.PasswordFlag, c.Password = p.PasswordFlag, p.Password
	case *packet.Connack:
		c := cp.(*packets.ConnackPacket)
		c.SessionPresent, c.ReturnCode = p.SessionPresent, byte(p.ReasonCode)
	case *packet.Publish:
		c := cp.(*packets.PublishPacket)
		c.Dup, c.Qos, c.Retain = p.Dup, p.QoS, p.Retain
		c.TopicName, c.MessageID, c.Payload = p.Topic, p.PacketID, p.Payload
	case *packet.Puback, *packet.Pubrec, *packet.Pubrel, *packet.Pubcomp, *packet.Unsuback:
		// At 3.1.1 the packet id is all these carry.
		id := reflect.ValueOf(p).Elem().FieldByName("PacketID").Uint()
		reflect.ValueOf(cp).Elem().FieldByName("MessageID").SetUint(id)
	case *packet.Subscribe:
		c := cp.(*packets.SubscribePacket)
		c.MessageID = p.PacketID
		for _, s := range p.Subscriptions {
			c.Topics = append(c.Topics, s.Filter)
			c.Qoss = append(c.Qoss, s.QoS)
		}
	case *packet.Suback:
		c := cp.(*packets.SubackPacket)
		c.MessageID = p.PacketID
		for _, rc := range p.ReasonCodes {
			c.ReturnCodes = append(c.ReturnCodes, byte(rc))
		}
	case *packet.Unsubscribe:
		c := cp.(*packets.UnsubscribePacket)
		c.MessageID, c.Topics = p.PacketID, p.Filters
	case *packet.Pingreq, *packet.Pingresp, *packet.Disconnect:
	default:
		t.Fatalf("no paho equivalent of %T", p)
	}
	return cp
}

// samePaho compares a packet paho decoded with the one we encoded, field by
// field (paho's own fixed header fields such as RemainingLength excluded).
func samePaho(t *rapid.T, got packets.ControlPacket, want packets.ControlPacket) {
	clearHeader := func(cp packets.ControlPacket) {
		v := reflect.ValueOf(cp).Elem().FieldByName("FixedHeader")
		fh := v.Addr().Interface().(*packets.FixedHeader)
		fh.RemainingLength = 0
	}
	clearHeader(got)
	clearHeader(want)
	normalize := func(cp packets.ControlPacket) {
		// paho decodes zero-length byte fields as empty slices; we use nil.
		switch c := cp.(type) {
		case *packets.ConnectPacket:
			if len(c.WillMessage) == 0 {
				c.WillMessage = nil
			}
			if len(c.Password) == 0 {
				c.Password = nil
			}
		case *packets.PublishPacket:
			if len(c.Payload) == 0 {
				c.Payload = nil
			}
		}
	}
	normalize(got)
	normalize(want)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("paho decoded\n%#v\nwant\n%#v", got, want)
	}
}

func TestDifferentialPaho(t *testing.T) {
	for _, typ := range typesFor(packet.V311) {
		t.Run(typ.String(), func(t *testing.T) {
			rapid.Check(t, func(rt *rapid.T) {
				p := genPacket(rt, typ, packet.V311)

				// Ours encodes, paho decodes.
				b, err := packet.Append(nil, p, packet.V311)
				if err != nil {
					rt.Fatal(err)
				}
				cp, err := packets.ReadPacket(bytes.NewReader(b))
				if err != nil {
					rt.Fatalf("paho ReadPacket(% x): %v", b, err)
				}
				samePaho(rt, cp, toPaho(rt, p))

				// Paho encodes, ours decodes.
				var buf bytes.Buffer
				if err := toPaho(rt, p).Write(&buf); err != nil {
					rt.Fatalf("paho Write: %v", err)
				}
				if !bytes.Equal(buf.Bytes(), b) {
					rt.Fatalf("paho encodes\n% x\nwe encode\n% x", buf.Bytes(), b)
				}
				dv := packet.V311
				if typ == packet.CONNECT {
					dv = 0
				}
				got, err := packet.Decode(bufio.NewReader(&buf), dv, 0)
				if err != nil {
					rt.Fatalf("Decode(paho bytes): %v", err)
				}
				if !reflect.DeepEqual(got, p) {
					rt.Fatalf("from paho bytes\n got %#v\nwant %#v", got, p)
				}
			})
		})
	}
}
