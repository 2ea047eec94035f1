package packet_test

// Generators of legal packets for every type and protocol level, used by the
// round-trip property tests, the paho differential test and the fuzz seeds.
// They generate only what the decoder accepts at that level, in the shape
// the decoder produces (nil for empty byte fields and lists).

import (
	"strings"
	"unicode"

	"pgregory.net/rapid"

	"github.com/edgegw/edgegw/gateway/packet"
)

var levels = []packet.Version{packet.V31, packet.V311, packet.V5}

var (
	genRune  = rapid.RuneFrom([]rune("abcxyz019 -_.$AZ"), unicode.Greek, unicode.Han)
	genLevel = rapid.StringOfN(rapid.RuneFrom([]rune("abcxyz019-_ $"), unicode.Cyrillic), 0, 6, -1)
	genWord  = rapid.StringOfN(rapid.RuneFrom([]rune("abcxyz019-_")), 1, 6, -1)
)

func genString(t *rapid.T, label string) string {
	return rapid.StringOfN(genRune, 0, 12, -1).Draw(t, label)
}

func genBytes(t *rapid.T, label string, max int) []byte {
	b := rapid.SliceOfN(rapid.Byte(), 0, max).Draw(t, label)
	if len(b) == 0 {
		return nil
	}
	return b
}

func genTopic(t *rapid.T, label string) string {
	levels := rapid.SliceOfN(genLevel, 1, 4).Draw(t, label)
	s := strings.Join(levels, "/")
	if s == "" {
		s = "t"
	}
	return s
}

func genPlainFilter(t *rapid.T, label string) string {
	parts := rapid.SliceOfN(rapid.OneOf(genLevel, rapid.Just("+")), 1, 4).Draw(t, label)
	if rapid.Bool().Draw(t, label+"#") {
		parts = append(parts, "#")
	}
	s := strings.Join(parts, "/")
	if s == "" {
		s = "#"
	}
	return s
}

func genFilter(t *rapid.T, label string, shared bool) string {
	if shared {
		return "$share/" + genWord.Draw(t, label+"group") + "/" + genPlainFilter(t, label)
	}
	return genPlainFilter(t, label)
}

func genPacketID(t *rapid.T) uint16 {
	return rapid.Uint16Range(1, 65535).Draw(t, "packet id")
}

func genQoS(t *rapid.T, label string) byte { return rapid.ByteRange(0, 2).Draw(t, label) }

func genCode(t *rapid.T, label string, codes ...byte) packet.ReasonCode {
	return packet.ReasonCode(rapid.SampledFrom(codes).Draw(t, label))
}

// Allowed reason codes per packet type, 5.0 §2.4 and each packet's section.
var (
	connackV5Codes    = []byte{0x00, 0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8A, 0x8C, 0x90, 0x95, 0x97, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9F}
	pubackV5Codes     = []byte{0x00, 0x10, 0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99}
	pubrelV5Codes     = []byte{0x00, 0x92}
	subackV5Codes     = []byte{0x00, 0x01, 0x02, 0x80, 0x83, 0x87, 0x8F, 0x91, 0x97, 0x9E, 0xA1, 0xA2}
	unsubackV5Codes   = []byte{0x00, 0x11, 0x80, 0x83, 0x87, 0x8F, 0x91}
	disconnectV5Codes = []byte{0x00, 0x04, 0x80, 0x81, 0x82, 0x83, 0x87, 0x89, 0x8B, 0x8D, 0x8E, 0x8F, 0x90, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9F, 0xA0, 0xA1, 0xA2}
	authV5Codes       = []byte{0x00, 0x18, 0x19}
)

// genProps draws v5 properties allowed in a packet of type ctx (0 = will).
// The properties that take any value of their type are drawn by their field's
// type; the switch holds the ones with a range or shape of their own.
func genProps(t *rapid.T, ctx packet.Type) packet.Properties {
	var p packet.Properties
	anyValue := map[packet.PropID]any{
		packet.PropPayloadFormat:        &p.PayloadFormat,
		packet.PropRequestProblemInfo:   &p.RequestProblemInfo,
		packet.PropRequestResponseInfo:  &p.RequestResponseInfo,
		packet.PropMaximumQoS:           &p.MaximumQoS,
		packet.PropRetainAvailable:      &p.RetainAvailable,
		packet.PropWildcardSubAvailable: &p.WildcardSubAvailable,
		packet.PropSubIDAvailable:       &p.SubIDAvailable,
		packet.PropSharedSubAvailable:   &p.SharedSubAvailable,
		packet.PropServerKeepAlive:      &p.ServerKeepAlive,
		packet.PropTopicAliasMaximum:    &p.TopicAliasMaximum,
		packet.PropMessageExpiry:        &p.MessageExpiry,
		packet.PropSessionExpiry:        &p.SessionExpiry,
		packet.PropWillDelay:            &p.WillDelay,
		packet.PropContentType:          &p.ContentType,
		packet.PropAssignedClientID:     &p.AssignedClientID,
		packet.PropAuthMethod:           &p.AuthMethod,
		packet.PropResponseInfo:         &p.ResponseInfo,
		packet.PropServerReference:      &p.ServerReference,
		packet.PropReasonString:         &p.ReasonString,
	}
	for id := packet.PropID(0); id < 64; id++ {
		if !packet.AllowedProperty(ctx, id) || !rapid.Bool().Draw(t, "has") {
			continue
		}
		p.Set(id)
		switch f := anyValue[id].(type) {
		case *byte: // the byte properties are all 0 or 1
			*f = rapid.ByteRange(0, 1).Draw(t, "v")
			continue
		case *uint16:
			*f = rapid.Uint16().Draw(t, "v")
			continue
		case *uint32:
			*f = rapid.Uint32().Draw(t, "v")
			continue
		case *string:
			*f = genString(t, "v")
			continue
		}
		switch id {
		case packet.PropReceiveMaximum:
			p.ReceiveMaximum = rapid.Uint16Range(1, 65535).Draw(t, "v")
		case packet.PropTopicAlias:
			p.TopicAlias = rapid.Uint16Range(1, 65535).Draw(t, "v")
		case packet.PropMaximumPacketSize:
			p.MaximumPacketSize = rapid.Uint32Range(1, 1<<32-1).Draw(t, "v")
		case packet.PropSubscriptionID:
			n := 1
			if ctx == packet.PUBLISH {
				n = rapid.IntRange(1, 3).Draw(t, "n")
			}
			p.SubscriptionIDs = rapid.SliceOfN(rapid.Uint32Range(1, 268435455), n, n).Draw(t, "v")
		case packet.PropResponseTopic:
			p.ResponseTopic = genTopic(t, "v")
		case packet.PropCorrelationData:
			p.CorrelationData = genBytes(t, "v", 16)
		case packet.PropAuthData:
			p.AuthData = genBytes(t, "v", 16)
		case packet.PropUserProperty:
			n := rapid.IntRange(1, 3).Draw(t, "n")
			for range n {
				p.UserProperties = append(p.UserProperties, packet.UserProperty{
					Key: genString(t, "key"), Value: genString(t, "value")})
			}
		default:
			t.Fatalf("generator misses property 0x%02x", byte(id))
		}
	}
	return p
}

func propsFor(t *rapid.T, v packet.Version, ctx packet.Type) packet.Properties {
	if v != packet.V5 {
		return packet.Properties{}
	}
	return genProps(t, ctx)
}

// genPacket draws a legal packet of type typ at level v.
func genPacket(t *rapid.T, typ packet.Type, v packet.Version) packet.Packet {
	v5 := v == packet.V5
	switch typ {
	case packet.CONNECT:
		c := &packet.Connect{ProtocolName: "MQTT", Version: v}
		if v == packet.V31 {
			c.ProtocolName = "MQIsdp"
		}
		c.CleanStart = rapid.Bool().Draw(t, "clean")
		c.KeepAlive = rapid.Uint16().Draw(t, "keepalive")
		c.Props = propsFor(t, v, packet.CONNECT)
		c.ClientID = genString(t, "client id")
		if rapid.Bool().Draw(t, "will") {
			c.Will = &packet.Will{
				QoS:     genQoS(t, "will qos"),
				Retain:  rapid.Bool().Draw(t, "will retain"),
				Props:   propsFor(t, v, 0),
				Topic:   genTopic(t, "will topic"),
				Payload: genBytes(t, "will payload", 32),
			}
		}
		c.UsernameFlag = rapid.Bool().Draw(t, "user flag")
		if c.UsernameFlag {
			c.Username = genString(t, "user")
		}
		c.PasswordFlag = rapid.Bool().Draw(t, "password flag") && (c.UsernameFlag || v5)
		if c.PasswordFlag {
			c.Password = genBytes(t, "password", 16)
		}
		return c
	case packet.CONNACK:
		c := &packet.Connack{SessionPresent: v != packet.V31 && rapid.Bool().Draw(t, "session present")}
		if v5 {
			c.ReasonCode = genCode(t, "code", connackV5Codes...)
			c.Props = genProps(t, packet.CONNACK)
		} else {
			c.ReasonCode = packet.ReasonCode(rapid.ByteRange(0, 5).Draw(t, "code"))
		}
		return c
	case packet.PUBLISH:
		p := &packet.Publish{QoS: genQoS(t, "qos"), Retain: rapid.Bool().Draw(t, "retain")}
		if p.QoS > 0 {
			p.Dup = rapid.Bool().Draw(t, "dup")
			p.PacketID = genPacketID(t)
		}
		p.Props = propsFor(t, v, packet.PUBLISH)
		p.Topic = genTopic(t, "topic")
		if p.Props.Has(packet.PropTopicAlias) && rapid.Bool().Draw(t, "alias only") {
			p.Topic = ""
		}
		p.Payload = genBytes(t, "payload", 300)
		return p
	case packet.PUBACK, packet.PUBREC, packet.PUBREL, packet.PUBCOMP:
		id := genPacketID(t)
		var code packet.ReasonCode
		var props packet.Properties
		if v5 {
			if typ == packet.PUBREL || typ == packet.PUBCOMP {
				code = genCode(t, "code", pubrelV5Codes...)
			} else {
				code = genCode(t, "code", pubackV5Codes...)
			}
			props = genProps(t, typ)
		}
		switch typ {
		case packet.PUBACK:
			return &packet.Puback{PacketID: id, ReasonCode: code, Props: props}
		case packet.PUBREC:
			return &packet.Pubrec{PacketID: id, ReasonCode: code, Props: props}
		case packet.PUBREL:
			return &packet.Pubrel{PacketID: id, ReasonCode: code, Props: props}
		default:
			return &packet.Pubcomp{PacketID: id, ReasonCode: code, Props: props}
		}
	case packet.SUBSCRIBE:
		s := &packet.Subscribe{PacketID: genPacketID(t), Props: propsFor(t, v, packet.SUBSCRIBE)}
		n := rapid.IntRange(1, 4).Draw(t, "n")
		for range n {
			shared := rapid.Bool().Draw(t, "shared")
			sub := packet.Subscription{Filter: genFilter(t, "filter", shared), QoS: genQoS(t, "qos")}
			if v5 {
				sub.NoLocal = !shared && rapid.Bool().Draw(t, "no local")
				sub.RetainAsPublished = rapid.Bool().Draw(t, "rap")
				sub.RetainHandling = rapid.ByteRange(0, 2).Draw(t, "retain handling")
			}
			s.Subscriptions = append(s.Subscriptions, sub)
		}
		return s
	case packet.SUBACK:
		s := &packet.Suback{PacketID: genPacketID(t), Props: propsFor(t, v, packet.SUBACK)}
		codes := []byte{0, 1, 2, 0x80}
		if v5 {
			codes = subackV5Codes
		}
		for range rapid.IntRange(1, 4).Draw(t, "n") {
			s.ReasonCodes = append(s.ReasonCodes, genCode(t, "code", codes...))
		}
		return s
	case packet.UNSUBSCRIBE:
		u := &packet.Unsubscribe{PacketID: genPacketID(t), Props: propsFor(t, v, packet.UNSUBSCRIBE)}
		for range rapid.IntRange(1, 4).Draw(t, "n") {
			u.Filters = append(u.Filters, genFilter(t, "filter", rapid.Bool().Draw(t, "shared")))
		}
		return u
	case packet.UNSUBACK:
		u := &packet.Unsuback{PacketID: genPacketID(t)}
		if v5 {
			u.Props = genProps(t, packet.UNSUBACK)
			for range rapid.IntRange(1, 4).Draw(t, "n") {
				u.ReasonCodes = append(u.ReasonCodes, genCode(t, "code", unsubackV5Codes...))
			}
		}
		return u
	case packet.PINGREQ:
		return &packet.Pingreq{}
	case packet.PINGRESP:
		return &packet.Pingresp{}
	case packet.DISCONNECT:
		d := &packet.Disconnect{}
		if v5 {
			d.ReasonCode = genCode(t, "code", disconnectV5Codes...)
			d.Props = genProps(t, packet.DISCONNECT)
		}
		return d
	case packet.AUTH:
		return &packet.Auth{ReasonCode: genCode(t, "code", authV5Codes...), Props: genProps(t, packet.AUTH)}
	}
	t.Fatalf("no generator for %v", typ)
	return nil
}

// typesFor lists the packet types that exist at level v.
func typesFor(v packet.Version) []packet.Type {
	var ts []packet.Type
	for typ := packet.CONNECT; typ <= packet.AUTH; typ++ {
		if typ == packet.AUTH && v != packet.V5 {
			continue
		}
		ts = append(ts, typ)
	}
	return ts
}

// genAny draws any legal packet at level v.
func genAny(t *rapid.T, v packet.Version) packet.Packet {
	return genPacket(t, rapid.SampledFrom(typesFor(v)).Draw(t, "type"), v)
}
