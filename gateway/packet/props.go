package packet

// v5 properties: which property may appear where (5.0 §2.2.2.2, table
// 2-4), how each is encoded, and their decoding and encoding.

// propKind is the wire type of a property value.
type propKind byte

const (
	kindNone   propKind = iota // not a property
	kindByte                   // Byte
	kindU16                    // Two Byte Integer
	kindU32                    // Four Byte Integer
	kindVarint                 // Variable Byte Integer
	kindString                 // UTF-8 Encoded String
	kindBinary                 // Binary Data
	kindPair                   // UTF-8 String Pair
)

// propKinds is indexed by PropID; kindNone marks unknown identifiers.
var propKinds = [64]propKind{
	PropPayloadFormat:        kindByte,
	PropMessageExpiry:        kindU32,
	PropContentType:          kindString,
	PropResponseTopic:        kindString,
	PropCorrelationData:      kindBinary,
	PropSubscriptionID:       kindVarint,
	PropSessionExpiry:        kindU32,
	PropAssignedClientID:     kindString,
	PropServerKeepAlive:      kindU16,
	PropAuthMethod:           kindString,
	PropAuthData:             kindBinary,
	PropRequestProblemInfo:   kindByte,
	PropWillDelay:            kindU32,
	PropRequestResponseInfo:  kindByte,
	PropResponseInfo:         kindString,
	PropServerReference:      kindString,
	PropReasonString:         kindString,
	PropReceiveMaximum:       kindU16,
	PropTopicAliasMaximum:    kindU16,
	PropTopicAlias:           kindU16,
	PropMaximumQoS:           kindByte,
	PropRetainAvailable:      kindByte,
	PropUserProperty:         kindPair,
	PropMaximumPacketSize:    kindU32,
	PropWildcardSubAvailable: kindByte,
	PropSubIDAvailable:       kindByte,
	PropSharedSubAvailable:   kindByte,
}

// propOrder lists the property identifiers in the order they are encoded.
var propOrder = []PropID{
	PropPayloadFormat, PropMessageExpiry, PropContentType, PropResponseTopic,
	PropCorrelationData, PropSubscriptionID, PropSessionExpiry,
	PropAssignedClientID, PropServerKeepAlive, PropAuthMethod, PropAuthData,
	PropRequestProblemInfo, PropWillDelay, PropRequestResponseInfo,
	PropResponseInfo, PropServerReference, PropReasonString,
	PropReceiveMaximum, PropTopicAliasMaximum, PropTopicAlias, PropMaximumQoS,
	PropRetainAvailable, PropUserProperty, PropMaximumPacketSize,
	PropWildcardSubAvailable, PropSubIDAvailable, PropSharedSubAvailable,
}

// willContext is the property context of will properties in CONNECT. Type 0
// is reserved and never a real packet, so it indexes the will in the table.
const willContext Type = 0

func bits(ids ...PropID) uint64 {
	var m uint64
	for _, id := range ids {
		m |= 1 << id
	}
	return m
}

// allowedProps is indexed by packet type (willContext for will properties):
// the set of properties that packet may carry. Anything else is a Protocol
// Error, 5.0 §2.2.2.2 table 2-4.
var allowedProps = [16]uint64{
	willContext: bits(PropPayloadFormat, PropMessageExpiry, PropContentType, PropResponseTopic,
		PropCorrelationData, PropWillDelay, PropUserProperty),
	CONNECT: bits(PropSessionExpiry, PropAuthMethod, PropAuthData, PropRequestProblemInfo,
		PropRequestResponseInfo, PropReceiveMaximum, PropTopicAliasMaximum, PropUserProperty,
		PropMaximumPacketSize),
	CONNACK: bits(PropSessionExpiry, PropAssignedClientID, PropServerKeepAlive, PropAuthMethod,
		PropAuthData, PropResponseInfo, PropServerReference, PropReasonString, PropReceiveMaximum,
		PropTopicAliasMaximum, PropMaximumQoS, PropRetainAvailable, PropUserProperty,
		PropMaximumPacketSize, PropWildcardSubAvailable, PropSubIDAvailable, PropSharedSubAvailable),
	PUBLISH: bits(PropPayloadFormat, PropMessageExpiry, PropContentType, PropResponseTopic,
		PropCorrelationData, PropSubscriptionID, PropTopicAlias, PropUserProperty),
	PUBACK:      bits(PropReasonString, PropUserProperty),
	PUBREC:      bits(PropReasonString, PropUserProperty),
	PUBREL:      bits(PropReasonString, PropUserProperty),
	PUBCOMP:     bits(PropReasonString, PropUserProperty),
	SUBSCRIBE:   bits(PropSubscriptionID, PropUserProperty),
	SUBACK:      bits(PropReasonString, PropUserProperty),
	UNSUBSCRIBE: bits(PropUserProperty),
	UNSUBACK:    bits(PropReasonString, PropUserProperty),
	DISCONNECT:  bits(PropSessionExpiry, PropServerReference, PropReasonString, PropUserProperty),
	AUTH:        bits(PropAuthMethod, PropAuthData, PropReasonString, PropUserProperty),
}

// AllowedProperty reports whether property id may appear in a packet of type
// t (5.0 §2.2.2.2). Will properties are checked with t == 0.
func AllowedProperty(t Type, id PropID) bool {
	return t < 16 && id < 64 && allowedProps[t]&(1<<id) != 0
}

// Field accessors by identifier; each returns nil for identifiers of another
// kind. They let decoding and encoding share one table instead of three
// hand-written switches per property.

func (p *Properties) bytePtr(id PropID) *byte {
	switch id {
	case PropPayloadFormat:
		return &p.PayloadFormat
	case PropRequestProblemInfo:
		return &p.RequestProblemInfo
	case PropRequestResponseInfo:
		return &p.RequestResponseInfo
	case PropMaximumQoS:
		return &p.MaximumQoS
	case PropRetainAvailable:
		return &p.RetainAvailable
	case PropWildcardSubAvailable:
		return &p.WildcardSubAvailable
	case PropSubIDAvailable:
		return &p.SubIDAvailable
	case PropSharedSubAvailable:
		return &p.SharedSubAvailable
	}
	return nil
}

func (p *Properties) u16Ptr(id PropID) *uint16 {
	switch id {
	case PropServerKeepAlive:
		return &p.ServerKeepAlive
	case PropReceiveMaximum:
		return &p.ReceiveMaximum
	case PropTopicAliasMaximum:
		return &p.TopicAliasMaximum
	case PropTopicAlias:
		return &p.TopicAlias
	}
	return nil
}

func (p *Properties) u32Ptr(id PropID) *uint32 {
	switch id {
	case PropMessageExpiry:
		return &p.MessageExpiry
	case PropSessionExpiry:
		return &p.SessionExpiry
	case PropWillDelay:
		return &p.WillDelay
	case PropMaximumPacketSize:
		return &p.MaximumPacketSize
	}
	return nil
}

func (p *Properties) strPtr(id PropID) *string {
	switch id {
	case PropContentType:
		return &p.ContentType
	case PropResponseTopic:
		return &p.ResponseTopic
	case PropAssignedClientID:
		return &p.AssignedClientID
	case PropAuthMethod:
		return &p.AuthMethod
	case PropResponseInfo:
		return &p.ResponseInfo
	case PropServerReference:
		return &p.ServerReference
	case PropReasonString:
		return &p.ReasonString
	}
	return nil
}

func (p *Properties) binPtr(id PropID) *[]byte {
	switch id {
	case PropCorrelationData:
		return &p.CorrelationData
	case PropAuthData:
		return &p.AuthData
	}
	return nil
}

// empty reports whether p has nothing to encode.
func (p *Properties) empty() bool {
	return p.Present&^bits(PropSubscriptionID, PropUserProperty) == 0 &&
		len(p.SubscriptionIDs) == 0 && len(p.UserProperties) == 0
}

// present reports whether id is to be encoded: SubscriptionIDs and
// UserProperties when non-empty, every other property when its bit is set.
func (p *Properties) present(id PropID) bool {
	switch id {
	case PropSubscriptionID:
		return len(p.SubscriptionIDs) > 0
	case PropUserProperty:
		return len(p.UserProperties) > 0
	}
	return p.Has(id)
}

// decodeProps reads a property length and the properties that follow into
// p, for packet type t (willContext for will properties).
func (d *decoder) decodeProps(p *Properties, t Type) error {
	n, err := d.varint()
	if err != nil {
		return err
	}
	if n > len(d.b)-d.off {
		return Errorf(MalformedPacket, "property length %d exceeds the remaining %d bytes", n, len(d.b)-d.off)
	}
	end := d.off + n
	sub := decoder{b: d.b[:end], off: d.off}
	var seen uint64
	for sub.off < end {
		raw, err := sub.byte()
		if err != nil {
			return err
		}
		// The identifier is a Variable Byte Integer, but every defined one is
		// below 0x80, so a continuation bit means an unknown identifier.
		if raw >= 64 || propKinds[raw] == kindNone {
			return Errorf(MalformedPacket, "unknown property identifier 0x%02x", raw) // 5.0 §2.2.2.2
		}
		id := PropID(raw)
		if allowedProps[t]&(1<<id) == 0 {
			return Errorf(ProtocolError, "property 0x%02x not allowed in %s", raw, contextName(t)) // 5.0 §2.2.2.2
		}
		repeatable := id == PropUserProperty || (id == PropSubscriptionID && t == PUBLISH)
		if seen&(1<<id) != 0 && !repeatable {
			// 5.0: including any property other than User Property (and
			// Subscription Identifier in PUBLISH) more than once is a
			// Protocol Error, as each property's section says (e.g. 5.0
			// §3.1.2.11.2).
			return Errorf(ProtocolError, "property 0x%02x more than once in %s", raw, contextName(t))
		}
		seen |= 1 << id
		p.Set(id)
		switch propKinds[id] {
		case kindByte:
			v, err := sub.byte()
			if err != nil {
				return err
			}
			if v > 1 {
				switch id {
				case PropMaximumQoS:
					return Errorf(ProtocolError, "maximum qos %d", v) // 5.0 §3.2.2.3.4
				default:
					// Payload Format Indicator, Request Problem/Response
					// Information, Retain/Wildcard/SubID/Shared Available
					// are 0 or 1; anything else is a Protocol Error.
					return Errorf(ProtocolError, "property 0x%02x has value %d, want 0 or 1", raw, v)
				}
			}
			*p.bytePtr(id) = v
		case kindU16:
			v, err := sub.u16()
			if err != nil {
				return err
			}
			if v == 0 {
				switch id {
				case PropReceiveMaximum:
					return Errorf(ProtocolError, "receive maximum 0") // 5.0 §3.1.2.11.3, §3.2.2.3.3
				case PropTopicAlias:
					return Errorf(TopicAliasInvalid, "topic alias 0") // [MQTT-3.3.2-8]
				}
			}
			*p.u16Ptr(id) = v
		case kindU32:
			v, err := sub.u32()
			if err != nil {
				return err
			}
			if v == 0 && id == PropMaximumPacketSize {
				return Errorf(ProtocolError, "maximum packet size 0") // 5.0 §3.1.2.11.4, §3.2.2.3.6
			}
			*p.u32Ptr(id) = v
		case kindVarint: // only Subscription Identifier
			v, err := sub.varint()
			if err != nil {
				return err
			}
			if v == 0 {
				return Errorf(ProtocolError, "subscription identifier 0") // 5.0 §3.3.2.3.8, §3.8.2.1.2
			}
			p.SubscriptionIDs = append(p.SubscriptionIDs, uint32(v))
		case kindString:
			s, err := sub.str()
			if err != nil {
				return err
			}
			if id == PropResponseTopic {
				if err := ValidTopicName(s); err != nil {
					// [MQTT-3.3.2-13], [MQTT-3.3.2-14]
					return Errorf(ProtocolError, "response topic: %s", err.(*Error).Msg)
				}
			}
			*p.strPtr(id) = s
		case kindBinary:
			b, err := sub.bin()
			if err != nil {
				return err
			}
			*p.binPtr(id) = b
		case kindPair:
			k, err := sub.str()
			if err != nil {
				return err
			}
			v, err := sub.str()
			if err != nil {
				return err
			}
			p.UserProperties = append(p.UserProperties, UserProperty{Key: k, Value: v})
		}
	}
	d.off = end
	return nil
}

func contextName(t Type) string {
	if t == willContext {
		return "will properties"
	}
	return t.String()
}

// size is the encoded size of p's properties without the length prefix.
func (p *Properties) size() int {
	if p.empty() {
		return 0
	}
	n := 0
	for _, id := range propOrder {
		if !p.present(id) {
			continue
		}
		switch propKinds[id] {
		case kindByte:
			n += 2
		case kindU16:
			n += 3
		case kindU32:
			n += 5
		case kindVarint:
			for _, v := range p.SubscriptionIDs {
				n += 1 + varintSize(int(v))
			}
		case kindString:
			n += 3 + len(*p.strPtr(id))
		case kindBinary:
			n += 3 + len(*p.binPtr(id))
		case kindPair:
			for _, u := range p.UserProperties {
				n += 5 + len(u.Key) + len(u.Value)
			}
		}
	}
	return n
}

// check returns an error when p cannot be encoded in a packet of type t.
func (p *Properties) check(t Type) error {
	if p.empty() {
		return nil
	}
	for _, id := range propOrder {
		if !p.present(id) {
			continue
		}
		if allowedProps[t]&(1<<id) == 0 {
			return Errorf(ProtocolError, "property 0x%02x not allowed in %s", byte(id), contextName(t))
		}
		switch propKinds[id] {
		case kindVarint:
			if t != PUBLISH && len(p.SubscriptionIDs) > 1 {
				return Errorf(ProtocolError, "more than one subscription identifier in %s", contextName(t))
			}
			for _, v := range p.SubscriptionIDs {
				if v == 0 || v > maxVarint {
					return Errorf(MalformedPacket, "subscription identifier %d out of range", v)
				}
			}
		case kindString:
			if len(*p.strPtr(id)) > 65535 {
				return Errorf(MalformedPacket, "property 0x%02x longer than 65535 bytes", byte(id))
			}
		case kindBinary:
			if len(*p.binPtr(id)) > 65535 {
				return Errorf(MalformedPacket, "property 0x%02x longer than 65535 bytes", byte(id))
			}
		case kindPair:
			for _, u := range p.UserProperties {
				if len(u.Key) > 65535 || len(u.Value) > 65535 {
					return Errorf(MalformedPacket, "user property longer than 65535 bytes")
				}
			}
		}
	}
	return nil
}

// appendTo appends the property length and the properties; n is
// p.size().
func (p *Properties) appendTo(dst []byte, n int) []byte {
	dst = appendVarint(dst, n)
	if n == 0 {
		return dst
	}
	for _, id := range propOrder {
		if !p.present(id) {
			continue
		}
		switch propKinds[id] {
		case kindByte:
			dst = append(dst, byte(id), *p.bytePtr(id))
		case kindU16:
			v := *p.u16Ptr(id)
			dst = append(dst, byte(id), byte(v>>8), byte(v))
		case kindU32:
			v := *p.u32Ptr(id)
			dst = append(dst, byte(id), byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
		case kindVarint:
			for _, v := range p.SubscriptionIDs {
				dst = append(dst, byte(id))
				dst = appendVarint(dst, int(v))
			}
		case kindString:
			dst = append(dst, byte(id))
			dst = appendString(dst, *p.strPtr(id))
		case kindBinary:
			dst = append(dst, byte(id))
			dst = appendBinary(dst, *p.binPtr(id))
		case kindPair:
			for _, u := range p.UserProperties {
				dst = append(dst, byte(id))
				dst = appendString(dst, u.Key)
				dst = appendString(dst, u.Value)
			}
		}
	}
	return dst
}
