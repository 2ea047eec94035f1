package packet

// Encoding. Design note: every packet is encoded in two passes over its
// fields, first a size computation (which also validates what the decoder
// would reject), then appends into the caller's buffer. With enough capacity
// in dst nothing is allocated, so a writer can keep one buffer per
// connection and batch many packets into a single write.

import (
	"io"
)

// Append appends the wire form of p for protocol level v to dst and returns
// the extended slice. v5 properties are written only when v is V5. A CONNECT
// is encoded at its own Version when that is set (v may then be 0). v5 acks,
// DISCONNECT and AUTH use the short forms the specification allows when the
// reason code is Success and there are no properties.
//
// Append fails, leaving dst unchanged, when p cannot be represented: a field
// longer than its length prefix allows, a packet beyond the maximum
// remaining length, QoS 3, a missing packet identifier, no subscriptions, a
// property not allowed on the packet type, or AUTH before v5.
func Append(dst []byte, p Packet, v Version) ([]byte, error) {
	v, err := encodeVersion(p, v)
	if err != nil {
		return dst, err
	}
	n, err := bodySize(p, v)
	if err != nil {
		return dst, err
	}
	return appendPacket(dst, p, v, n), nil
}

// Encode writes the wire form of p for protocol level v to w in one Write.
func Encode(w io.Writer, p Packet, v Version) error {
	b, err := Append(nil, p, v)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// Size returns the length in bytes of the wire form of p for protocol level
// v, fixed header included, without encoding it. It returns -1 when Append
// would fail.
func Size(p Packet, v Version) int {
	v, err := encodeVersion(p, v)
	if err != nil {
		return -1
	}
	n, err := bodySize(p, v)
	if err != nil {
		return -1
	}
	return 1 + varintSize(n) + n
}

func encodeVersion(p Packet, v Version) (Version, error) {
	if c, ok := p.(*Connect); ok && c != nil && c.Version != 0 {
		v = c.Version
	}
	switch v {
	case V31, V311, V5:
		return v, nil
	}
	return v, Errorf(UnsupportedProtocolVersion, "cannot encode for protocol level %d", v)
}

func varintSize(n int) int {
	switch {
	case n < 1<<7:
		return 1
	case n < 1<<14:
		return 2
	case n < 1<<21:
		return 3
	}
	return 4
}

func appendVarint(dst []byte, n int) []byte {
	for n >= 0x80 {
		dst = append(dst, byte(n)|0x80)
		n >>= 7
	}
	return append(dst, byte(n))
}

func appendU16(dst []byte, v uint16) []byte { return append(dst, byte(v>>8), byte(v)) }

func appendString(dst []byte, s string) []byte {
	dst = append(dst, byte(len(s)>>8), byte(len(s)))
	return append(dst, s...)
}

func appendBinary(dst []byte, b []byte) []byte {
	dst = append(dst, byte(len(b)>>8), byte(len(b)))
	return append(dst, b...)
}

func tooLong(what string, n int) error {
	if n > 65535 {
		return Errorf(MalformedPacket, "%s of %d bytes is longer than 65535", what, n)
	}
	return nil
}

// propsSize validates props for packet type t and returns the size of the
// property length plus the properties.
func propsSize(p *Properties, t Type) (int, error) {
	if err := p.check(t); err != nil {
		return 0, err
	}
	n := p.size()
	if n > maxVarint {
		return 0, Errorf(PacketTooLarge, "properties of %d bytes", n)
	}
	return varintSize(n) + n, nil
}

// bodySize returns the remaining length of p at level v, and an error when
// p cannot be encoded.
func bodySize(p Packet, v Version) (int, error) {
	n, err := bodySize1(p, v)
	if err == nil && n > maxVarint {
		err = Errorf(PacketTooLarge, "remaining length %d exceeds %d", n, maxVarint)
	}
	return n, err
}

// bodySize1 is the remaining length of p, each packet type's by its own
// function; a nil packet cannot be encoded, as a type this package does
// not know.
func bodySize1(p Packet, v Version) (int, error) {
	v5 := v == V5
	switch p := p.(type) {
	case *Connect:
		if p != nil {
			return connectSize(p, v)
		}
	case *Connack:
		if p != nil {
			pn, err := v5PropsSize(v5, &p.Props, CONNACK)
			return 2 + pn, err
		}
	case *Publish:
		if p != nil {
			return publishSize(p, v5)
		}
	case *Puback:
		if p != nil {
			return ackSize(PUBACK, p.PacketID, p.ReasonCode, &p.Props, v5)
		}
	case *Pubrec:
		if p != nil {
			return ackSize(PUBREC, p.PacketID, p.ReasonCode, &p.Props, v5)
		}
	case *Pubrel:
		if p != nil {
			return ackSize(PUBREL, p.PacketID, p.ReasonCode, &p.Props, v5)
		}
	case *Pubcomp:
		if p != nil {
			return ackSize(PUBCOMP, p.PacketID, p.ReasonCode, &p.Props, v5)
		}
	case *Subscribe:
		if p != nil {
			return subscribeSize(p, v5)
		}
	case *Suback:
		if p != nil {
			return subackSize(p, v5)
		}
	case *Unsubscribe:
		if p != nil {
			return unsubscribeSize(p, v5)
		}
	case *Unsuback:
		if p != nil {
			return unsubackSize(p, v5)
		}
	case *Pingreq, *Pingresp:
		return 0, nil
	case *Disconnect:
		if p != nil && v5 {
			return shortSize(DISCONNECT, p.ReasonCode, &p.Props)
		}
		if p != nil {
			return 0, nil // before MQTT 5 a DISCONNECT has no body
		}
	case *Auth:
		if p != nil && v5 {
			return shortSize(AUTH, p.ReasonCode, &p.Props)
		}
		if p != nil {
			return 0, Errorf(ProtocolError, "AUTH before MQTT 5")
		}
	}
	return 0, Errorf(ImplementationSpecificError, "cannot encode %T", p)
}

// v5PropsSize is propsSize at MQTT 5 and 0 before it, where packets have
// no properties.
func v5PropsSize(v5 bool, p *Properties, t Type) (int, error) {
	if !v5 {
		return 0, nil
	}
	return propsSize(p, t)
}

func connectSize(p *Connect, v Version) (int, error) {
	v5 := v == V5
	name := p.ProtocolName
	if name == "" {
		name = protocolName(v)
	}
	n := 2 + len(name) + 1 + 1 + 2 + 2 + len(p.ClientID)
	if err := tooLong("client identifier", len(p.ClientID)); err != nil {
		return 0, err
	}
	pn, err := v5PropsSize(v5, &p.Props, CONNECT)
	if err != nil {
		return 0, err
	}
	n += pn
	if w := p.Will; w != nil {
		wn, err := willSize(w, v5)
		if err != nil {
			return 0, err
		}
		n += wn
	}
	if p.PasswordFlag && !p.UsernameFlag && v != V5 {
		return 0, Errorf(MalformedPacket, "password flag without user name flag before v5")
	}
	if p.UsernameFlag {
		if err := tooLong("user name", len(p.Username)); err != nil {
			return 0, err
		}
		n += 2 + len(p.Username)
	}
	if p.PasswordFlag {
		if err := tooLong("password", len(p.Password)); err != nil {
			return 0, err
		}
		n += 2 + len(p.Password)
	}
	return n, nil
}

// willSize is what a will adds to a CONNECT.
func willSize(w *Will, v5 bool) (int, error) {
	if w.QoS > 2 {
		return 0, Errorf(MalformedPacket, "will qos %d", w.QoS)
	}
	if err := tooLong("will topic", len(w.Topic)); err != nil {
		return 0, err
	}
	if err := tooLong("will payload", len(w.Payload)); err != nil {
		return 0, err
	}
	pn, err := v5PropsSize(v5, &w.Props, willContext)
	return 4 + len(w.Topic) + len(w.Payload) + pn, err
}

func publishSize(p *Publish, v5 bool) (int, error) {
	if p.QoS > 2 {
		return 0, Errorf(MalformedPacket, "publish qos %d", p.QoS)
	}
	if p.QoS > 0 && p.PacketID == 0 {
		return 0, Errorf(MalformedPacket, "qos %d publish without packet identifier", p.QoS)
	}
	if p.Dup && p.QoS == 0 {
		return 0, Errorf(MalformedPacket, "dup flag on a qos 0 publish")
	}
	if err := tooLong("topic", len(p.Topic)); err != nil {
		return 0, err
	}
	n := 2 + len(p.Topic) + len(p.Payload)
	if p.QoS > 0 {
		n += 2
	}
	pn, err := v5PropsSize(v5, &p.Props, PUBLISH)
	return n + pn, err
}

func subscribeSize(p *Subscribe, v5 bool) (int, error) {
	if p.PacketID == 0 {
		return 0, Errorf(MalformedPacket, "subscribe without packet identifier")
	}
	if len(p.Subscriptions) == 0 {
		return 0, Errorf(ProtocolError, "subscribe without topic filters")
	}
	pn, err := v5PropsSize(v5, &p.Props, SUBSCRIBE)
	if err != nil {
		return 0, err
	}
	n := 2 + pn
	for i := range p.Subscriptions {
		s := &p.Subscriptions[i]
		if err := tooLong("topic filter", len(s.Filter)); err != nil {
			return 0, err
		}
		if s.QoS > 2 || s.RetainHandling > 2 {
			return 0, Errorf(MalformedPacket, "subscription qos %d retain handling %d", s.QoS, s.RetainHandling)
		}
		n += 3 + len(s.Filter)
	}
	return n, nil
}

func subackSize(p *Suback, v5 bool) (int, error) {
	if len(p.ReasonCodes) == 0 {
		return 0, Errorf(ProtocolError, "suback without reason codes")
	}
	pn, err := v5PropsSize(v5, &p.Props, SUBACK)
	return 2 + len(p.ReasonCodes) + pn, err
}

func unsubscribeSize(p *Unsubscribe, v5 bool) (int, error) {
	if p.PacketID == 0 {
		return 0, Errorf(MalformedPacket, "unsubscribe without packet identifier")
	}
	if len(p.Filters) == 0 {
		return 0, Errorf(ProtocolError, "unsubscribe without topic filters")
	}
	pn, err := v5PropsSize(v5, &p.Props, UNSUBSCRIBE)
	if err != nil {
		return 0, err
	}
	n := 2 + pn
	for _, f := range p.Filters {
		if err := tooLong("topic filter", len(f)); err != nil {
			return 0, err
		}
		n += 2 + len(f)
	}
	return n, nil
}

// unsubackSize: before MQTT 5 an UNSUBACK is its packet identifier alone.
func unsubackSize(p *Unsuback, v5 bool) (int, error) {
	if !v5 {
		return 2, nil
	}
	if len(p.ReasonCodes) == 0 {
		return 0, Errorf(ProtocolError, "v5 unsuback without reason codes")
	}
	pn, err := propsSize(&p.Props, UNSUBACK)
	return 2 + pn + len(p.ReasonCodes), err
}

func protocolName(v Version) string {
	if v == V31 {
		return "MQIsdp"
	}
	return "MQTT"
}

// ackSize is the remaining length of PUBACK, PUBREC, PUBREL and PUBCOMP.
func ackSize(t Type, id uint16, code ReasonCode, props *Properties, v5 bool) (int, error) {
	if id == 0 {
		return 0, Errorf(MalformedPacket, "%s without packet identifier", t)
	}
	if !v5 {
		return 2, nil
	}
	if props.empty() {
		if code == Success {
			return 2, nil // 5.0 §3.4.2.1: reason code and properties omitted
		}
		return 3, nil // property length omitted
	}
	pn, err := propsSize(props, t)
	return 3 + pn, err
}

// shortSize is the v5 remaining length of DISCONNECT and AUTH.
func shortSize(t Type, code ReasonCode, props *Properties) (int, error) {
	if props.empty() {
		if code == Success {
			return 0, nil // 5.0 §3.14.2.1, 3.15.2.1
		}
		if t == DISCONNECT {
			return 1, nil
		}
	}
	pn, err := propsSize(props, t)
	return 1 + pn, err
}

// appendPacket appends p whose remaining length n was computed (and p
// validated) by bodySize.
func appendPacket(dst []byte, p Packet, v Version, n int) []byte {
	v5 := v == V5
	switch p := p.(type) {
	case *Connect:
		dst = appendConnect(dst, p, v, n)
	case *Connack:
		dst = append(dst, byte(CONNACK)<<4)
		dst = appendVarint(dst, n)
		var flags byte
		if p.SessionPresent && v != V31 { // 3.1 has no session present flag
			flags = 1
		}
		dst = append(dst, flags, byte(p.ReasonCode))
		if v5 {
			dst = p.Props.appendTo(dst, p.Props.size())
		}
	case *Publish:
		first := byte(PUBLISH)<<4 | p.QoS<<1
		if p.Dup {
			first |= 0x08
		}
		if p.Retain {
			first |= 0x01
		}
		dst = append(dst, first)
		dst = appendVarint(dst, n)
		dst = appendString(dst, p.Topic)
		if p.QoS > 0 {
			dst = appendU16(dst, p.PacketID)
		}
		if v5 {
			dst = p.Props.appendTo(dst, p.Props.size())
		}
		dst = append(dst, p.Payload...)
	case *Puback:
		dst = appendAck(dst, 0x40, n, p.PacketID, p.ReasonCode, &p.Props)
	case *Pubrec:
		dst = appendAck(dst, 0x50, n, p.PacketID, p.ReasonCode, &p.Props)
	case *Pubrel:
		dst = appendAck(dst, 0x62, n, p.PacketID, p.ReasonCode, &p.Props)
	case *Pubcomp:
		dst = appendAck(dst, 0x70, n, p.PacketID, p.ReasonCode, &p.Props)
	case *Subscribe:
		dst = appendSubscribe(dst, p, v5, n)
	case *Suback:
		dst = append(dst, byte(SUBACK)<<4)
		dst = appendVarint(dst, n)
		dst = appendU16(dst, p.PacketID)
		if v5 {
			dst = p.Props.appendTo(dst, p.Props.size())
		}
		for _, c := range p.ReasonCodes {
			dst = append(dst, byte(c))
		}
	case *Unsubscribe:
		dst = append(dst, byte(UNSUBSCRIBE)<<4|0x02)
		dst = appendVarint(dst, n)
		dst = appendU16(dst, p.PacketID)
		if v5 {
			dst = p.Props.appendTo(dst, p.Props.size())
		}
		for _, f := range p.Filters {
			dst = appendString(dst, f)
		}
	case *Unsuback:
		dst = append(dst, byte(UNSUBACK)<<4)
		dst = appendVarint(dst, n)
		dst = appendU16(dst, p.PacketID)
		if v5 {
			dst = p.Props.appendTo(dst, p.Props.size())
			for _, c := range p.ReasonCodes {
				dst = append(dst, byte(c))
			}
		}
	case *Pingreq:
		dst = append(dst, byte(PINGREQ)<<4, 0)
	case *Pingresp:
		dst = append(dst, byte(PINGRESP)<<4, 0)
	case *Disconnect:
		dst = appendShort(dst, byte(DISCONNECT)<<4, n, p.ReasonCode, &p.Props)
	case *Auth:
		dst = appendShort(dst, byte(AUTH)<<4, n, p.ReasonCode, &p.Props)
	}
	return dst
}

func appendConnect(dst []byte, p *Connect, v Version, n int) []byte {
	v5 := v == V5
	dst = append(dst, byte(CONNECT)<<4)
	dst = appendVarint(dst, n)
	name := p.ProtocolName
	if name == "" {
		name = protocolName(v)
	}
	dst = appendString(dst, name)
	var flags byte
	if p.CleanStart {
		flags |= 0x02
	}
	if w := p.Will; w != nil {
		flags |= 0x04 | w.QoS<<3
		if w.Retain {
			flags |= 0x20
		}
	}
	if p.PasswordFlag {
		flags |= 0x40
	}
	if p.UsernameFlag {
		flags |= 0x80
	}
	dst = append(dst, byte(v), flags)
	dst = appendU16(dst, p.KeepAlive)
	if v5 {
		dst = p.Props.appendTo(dst, p.Props.size())
	}
	dst = appendString(dst, p.ClientID)
	if w := p.Will; w != nil {
		if v5 {
			dst = w.Props.appendTo(dst, w.Props.size())
		}
		dst = appendString(dst, w.Topic)
		dst = appendBinary(dst, w.Payload)
	}
	if p.UsernameFlag {
		dst = appendString(dst, p.Username)
	}
	if p.PasswordFlag {
		dst = appendBinary(dst, p.Password)
	}
	return dst
}

func appendSubscribe(dst []byte, p *Subscribe, v5 bool, n int) []byte {
	dst = append(dst, byte(SUBSCRIBE)<<4|0x02)
	dst = appendVarint(dst, n)
	dst = appendU16(dst, p.PacketID)
	if v5 {
		dst = p.Props.appendTo(dst, p.Props.size())
	}
	for i := range p.Subscriptions {
		s := &p.Subscriptions[i]
		dst = appendString(dst, s.Filter)
		o := s.QoS
		if v5 {
			if s.NoLocal {
				o |= 0x04
			}
			if s.RetainAsPublished {
				o |= 0x08
			}
			o |= s.RetainHandling << 4
		}
		dst = append(dst, o)
	}
	return dst
}

func appendAck(dst []byte, first byte, n int, id uint16, code ReasonCode, props *Properties) []byte {
	dst = append(dst, first)
	dst = appendVarint(dst, n)
	dst = appendU16(dst, id)
	if n > 2 {
		dst = append(dst, byte(code))
	}
	if n > 3 {
		dst = props.appendTo(dst, props.size())
	}
	return dst
}

func appendShort(dst []byte, first byte, n int, code ReasonCode, props *Properties) []byte {
	dst = append(dst, first)
	dst = appendVarint(dst, n)
	if n > 0 {
		dst = append(dst, byte(code))
	}
	if n > 1 {
		dst = props.appendTo(dst, props.size())
	}
	return dst
}
