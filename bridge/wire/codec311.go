package wire

// MQTT 3.1.1 through eclipse/paho.mqtt.golang's public packets package:
// the design names paho for the 3.1.1 uplink, and its packets package is
// made to be used on its own. The mapping to and from the neutral type
// (gateway/packet) is field for field; nothing here depends on how paho's
// client uses those packets.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/edgegw/edgegw/gateway/packet"
)

// Codec311 is MQTT 3.1.1 (and its bridge variant, protocol level 0x84)
// through paho's packets package.
type Codec311 struct{}

// Version implements Codec.
func (Codec311) Version() packet.Version { return packet.V311 }

// appender is the io.Writer paho's packets write to: the caller's buffer.
type appender struct{ b []byte }

func (a *appender) Write(p []byte) (int, error) {
	a.b = append(a.b, p...)
	return len(p), nil
}

// The packets of every message (PUBLISH and its acknowledgements) and
// PINGREQ are encoded and decoded by gateway/packet's 3.1.1 codec, which
// writes the same bytes as paho's (gateway/packet's differential test
// against paho, and TestCodec311HotPacketsAsPaho here) without paho's
// intermediate buffers: paho's PUBLISH encoding alone made six
// allocations, the bridge's largest share of garbage per reading. The
// rest, once per connection, goes through paho's packets.

// hot reports whether packet type t (the fixed header's high nibble) is
// one gateway/packet encodes and decodes for Codec311.
func hot(t packet.Type) bool {
	switch t {
	case packet.PUBLISH, packet.PUBACK, packet.PUBREC, packet.PUBREL, packet.PUBCOMP, packet.PINGREQ, packet.PINGRESP:
		return true
	}
	return false
}

// Append implements Codec. A Connect's Version is written as its protocol
// level as is (4, or 0x84 for the bridge flag).
func (Codec311) Append(dst []byte, p packet.Packet) ([]byte, error) {
	if hot(p.Type()) {
		b, err := packet.Append(dst, p, packet.V311)
		if err != nil {
			return dst, fmt.Errorf("encode %s: %w", p.Type(), err)
		}
		return b, nil
	}
	cp, err := to311(p)
	if err != nil {
		return dst, err
	}
	a := appender{b: dst}
	if err := cp.Write(&a); err != nil {
		return dst, fmt.Errorf("encode %s: %w", p.Type(), err)
	}
	return a.b, nil
}

func to311(p packet.Packet) (packets.ControlPacket, error) {
	switch p := p.(type) {
	case *packet.Connect:
		c := packets.NewControlPacket(packets.Connect).(*packets.ConnectPacket)
		c.ProtocolName, c.ProtocolVersion = "MQTT", byte(p.Version)
		c.CleanSession, c.Keepalive, c.ClientIdentifier = p.CleanStart, p.KeepAlive, p.ClientID
		c.UsernameFlag, c.Username = p.UsernameFlag, p.Username
		c.PasswordFlag, c.Password = p.PasswordFlag, p.Password
		if w := p.Will; w != nil {
			c.WillFlag, c.WillQos, c.WillRetain, c.WillTopic, c.WillMessage = true, w.QoS, w.Retain, w.Topic, w.Payload
		}
		return c, nil
	case *packet.Publish:
		c := packets.NewControlPacket(packets.Publish).(*packets.PublishPacket)
		c.Dup, c.Qos, c.Retain = p.Dup, p.QoS, p.Retain
		c.TopicName, c.MessageID, c.Payload = p.Topic, p.PacketID, p.Payload
		return c, nil
	case *packet.Puback:
		c := packets.NewControlPacket(packets.Puback).(*packets.PubackPacket)
		c.MessageID = p.PacketID
		return c, nil
	case *packet.Pubrec:
		c := packets.NewControlPacket(packets.Pubrec).(*packets.PubrecPacket)
		c.MessageID = p.PacketID
		return c, nil
	case *packet.Pubrel:
		c := packets.NewControlPacket(packets.Pubrel).(*packets.PubrelPacket)
		c.MessageID = p.PacketID
		return c, nil
	case *packet.Pubcomp:
		c := packets.NewControlPacket(packets.Pubcomp).(*packets.PubcompPacket)
		c.MessageID = p.PacketID
		return c, nil
	case *packet.Subscribe:
		c := packets.NewControlPacket(packets.Subscribe).(*packets.SubscribePacket)
		c.MessageID = p.PacketID
		for _, s := range p.Subscriptions {
			c.Topics = append(c.Topics, s.Filter)
			c.Qoss = append(c.Qoss, s.QoS)
		}
		return c, nil
	case *packet.Unsubscribe:
		c := packets.NewControlPacket(packets.Unsubscribe).(*packets.UnsubscribePacket)
		c.MessageID, c.Topics = p.PacketID, p.Filters
		return c, nil
	case *packet.Pingreq:
		return packets.NewControlPacket(packets.Pingreq), nil
	case *packet.Disconnect:
		return packets.NewControlPacket(packets.Disconnect), nil
	}
	return nil, fmt.Errorf("encode %T: not a packet the 3.1.1 uplink sends", p)
}

// errTooLarge is a packet from the peer larger than the size limit.
var errTooLarge = errors.New("packet larger than the size limit")

// Decode implements Codec: the fixed header is checked against maxSize
// before paho reads (and allocates) the body.
func (Codec311) Decode(r *bufio.Reader, maxSize int) (packet.Packet, error) {
	if b, err := r.Peek(1); err == nil && hot(packet.Type(b[0]>>4)) {
		return packet.Decode(r, packet.V311, maxSize) // 0: any size 3.1.1 allows
	}
	if maxSize > 0 {
		if err := checkSize311(r, maxSize); err != nil {
			return nil, err
		}
	}
	cp, err := packets.ReadPacket(r)
	if err != nil {
		return nil, err
	}
	return from311(cp)
}

// checkSize311 peeks at the fixed header in r and fails if its packet
// is larger than max bytes or its length malformed.
func checkSize311(r *bufio.Reader, max int) error {
	rl, mult := 0, 1
	for i := 1; i <= 4; i++ {
		b, err := r.Peek(i + 1)
		if err != nil {
			if len(b) > 0 && errors.Is(err, io.EOF) {
				return io.ErrUnexpectedEOF
			}
			return err
		}
		c := b[i]
		rl += int(c&0x7f) * mult
		if c&0x80 == 0 {
			if 1+i+rl > max {
				return fmt.Errorf("%w: %d bytes, limit %d", errTooLarge, 1+i+rl, max)
			}
			return nil
		}
		mult <<= 7
	}
	return errors.New("malformed remaining length") // at most 4 bytes, 3.1.1 §2.2.3
}

func from311(cp packets.ControlPacket) (packet.Packet, error) {
	switch c := cp.(type) {
	case *packets.ConnackPacket:
		return &packet.Connack{SessionPresent: c.SessionPresent, ReasonCode: packet.ReasonCode(c.ReturnCode)}, nil
	case *packets.PublishPacket:
		return &packet.Publish{Dup: c.Dup, QoS: c.Qos, Retain: c.Retain, Topic: c.TopicName, PacketID: c.MessageID, Payload: c.Payload}, nil
	case *packets.PubackPacket:
		return &packet.Puback{PacketID: c.MessageID}, nil
	case *packets.PubrecPacket:
		return &packet.Pubrec{PacketID: c.MessageID}, nil
	case *packets.PubrelPacket:
		return &packet.Pubrel{PacketID: c.MessageID}, nil
	case *packets.PubcompPacket:
		return &packet.Pubcomp{PacketID: c.MessageID}, nil
	case *packets.SubackPacket:
		s := &packet.Suback{PacketID: c.MessageID}
		for _, rc := range c.ReturnCodes {
			s.ReasonCodes = append(s.ReasonCodes, packet.ReasonCode(rc))
		}
		return s, nil
	case *packets.UnsubackPacket:
		return &packet.Unsuback{PacketID: c.MessageID}, nil
	case *packets.PingrespPacket:
		return &packet.Pingresp{}, nil
	case *packets.PingreqPacket:
		return &packet.Pingreq{}, nil
	case *packets.DisconnectPacket:
		return &packet.Disconnect{}, nil
	}
	var b bytes.Buffer
	_ = cp.Write(&b)
	return nil, fmt.Errorf("decode: a %s is not a packet a 3.1.1 server sends", packets.PacketNames[b.Bytes()[0]>>4])
}
