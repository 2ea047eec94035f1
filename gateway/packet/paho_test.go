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

// toPaho builds the paho packet equivalent to p.
func toPaho(t *rapid.T, p packet.Packet) packets.ControlPacket {
	switch p := p.(type) {
	case *packet.Connect:
		c := packets.NewControlPacket(packets.Connect).(*packets.ConnectPacket)
		c.ProtocolName, c.ProtocolVersion = p.ProtocolName, byte(p.Version)
		c.CleanSession, c.Keepalive, c.ClientIdentifier = p.CleanStart, p.KeepAlive, p.ClientID
		if w := p.Will; w != nil {
			c.WillFlag, c.WillQos, c.WillRetain, c.WillTopic, c.WillMessage = true, w.QoS, w.Retain, w.Topic, w.Payload
		}
		c.UsernameFlag, c.Username = p.UsernameFlag, p.Username
		c.PasswordFlag, c.Password = p.PasswordFlag, p.Password
		return c
	case *packet.Connack:
		c := packets.NewControlPacket(packets.Connack).(*packets.ConnackPacket)
		c.SessionPresent, c.ReturnCode = p.SessionPresent, byte(p.ReasonCode)
		return c
	case *packet.Publish:
		c := packets.NewControlPacket(packets.Publish).(*packets.PublishPacket)
		c.Dup, c.Qos, c.Retain = p.Dup, p.QoS, p.Retain
		c.TopicName, c.MessageID, c.Payload = p.Topic, p.PacketID, p.Payload
		return c
	case *packet.Puback:
		c := packets.NewControlPacket(packets.Puback).(*packets.PubackPacket)
		c.MessageID = p.PacketID
		return c
	case *packet.Pubrec:
		c := packets.NewControlPacket(packets.Pubrec).(*packets.PubrecPacket)
		c.MessageID = p.PacketID
		return c
	case *packet.Pubrel:
		c := packets.NewControlPacket(packets.Pubrel).(*packets.PubrelPacket)
		c.MessageID = p.PacketID
		return c
	case *packet.Pubcomp:
		c := packets.NewControlPacket(packets.Pubcomp).(*packets.PubcompPacket)
		c.MessageID = p.PacketID
		return c
	case *packet.Subscribe:
		c := packets.NewControlPacket(packets.Subscribe).(*packets.SubscribePacket)
		c.MessageID = p.PacketID
		for _, s := range p.Subscriptions {
			c.Topics = append(c.Topics, s.Filter)
			c.Qoss = append(c.Qoss, s.QoS)
		}
		return c
	case *packet.Suback:
		c := packets.NewControlPacket(packets.Suback).(*packets.SubackPacket)
		c.MessageID = p.PacketID
		for _, rc := range p.ReasonCodes {
			c.ReturnCodes = append(c.ReturnCodes, byte(rc))
		}
		return c
	case *packet.Unsubscribe:
		c := packets.NewControlPacket(packets.Unsubscribe).(*packets.UnsubscribePacket)
		c.MessageID, c.Topics = p.PacketID, p.Filters
		return c
	case *packet.Unsuback:
		c := packets.NewControlPacket(packets.Unsuback).(*packets.UnsubackPacket)
		c.MessageID = p.PacketID
		return c
	case *packet.Pingreq:
		return packets.NewControlPacket(packets.Pingreq)
	case *packet.Pingresp:
		return packets.NewControlPacket(packets.Pingresp)
	case *packet.Disconnect:
		return packets.NewControlPacket(packets.Disconnect)
	}
	t.Fatalf("no paho equivalent of %T", p)
	return nil
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
