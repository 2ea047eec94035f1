// Package packet is the MQTT 3.1, 3.1.1 and 5.0 codec.
//
// It knows the wire format and the rules of the specifications and nothing
// else: no I/O policy, no globals, standard library only. Decoding distrusts
// its input (sizes are checked before anything is allocated); encoding appends
// to a caller's buffer so a writer can batch many packets into one syscall.
package packet

// Type is the MQTT control packet type (the high nibble of the fixed header).
type Type byte

// Control packet types, 5.0 §2.1.2 (3.1.1 §2.2.1).
const (
	CONNECT     Type = 1
	CONNACK     Type = 2
	PUBLISH     Type = 3
	PUBACK      Type = 4
	PUBREC      Type = 5
	PUBREL      Type = 6
	PUBCOMP     Type = 7
	SUBSCRIBE   Type = 8
	SUBACK      Type = 9
	UNSUBSCRIBE Type = 10
	UNSUBACK    Type = 11
	PINGREQ     Type = 12
	PINGRESP    Type = 13
	DISCONNECT  Type = 14
	AUTH        Type = 15 // v5 only
)

// Version is the protocol level carried in CONNECT.
type Version byte

// Protocol levels.
const (
	V31  Version = 3 // MQTT 3.1, protocol name "MQIsdp"
	V311 Version = 4 // MQTT 3.1.1, protocol name "MQTT"
	V5   Version = 5 // MQTT 5.0, protocol name "MQTT"
)

// Packet is any decoded control packet. The concrete types below are used as
// pointers (*Publish, *Connect, ...).
type Packet interface {
	Type() Type
}

// Connect is the CONNECT packet.
type Connect struct {
	ProtocolName string // "MQIsdp" (3.1) or "MQTT"
	Version      Version
	CleanStart   bool // "clean session" before v5
	KeepAlive    uint16
	Props        Properties
	ClientID     string
	Will         *Will // nil when the will flag is clear
	UsernameFlag bool
	Username     string
	PasswordFlag bool
	Password     []byte
}

// Will is the will message carried in CONNECT.
type Will struct {
	QoS     byte
	Retain  bool
	Props   Properties // v5 will properties
	Topic   string
	Payload []byte
}

// Connack is the CONNACK packet. Before v5 ReasonCode holds the 3.1.1 return
// code (0..5).
type Connack struct {
	SessionPresent bool
	ReasonCode     ReasonCode
	Props          Properties
}

// Publish is the PUBLISH packet. Payload may alias the decoder's buffer; a
// decoded Publish owns its Payload (the decoder never reuses it).
type Publish struct {
	Dup      bool
	QoS      byte
	Retain   bool
	Topic    string
	PacketID uint16 // only for QoS 1 and 2
	Props    Properties
	Payload  []byte
}

// Puback is the PUBACK packet (QoS 1 acknowledgement).
type Puback struct {
	PacketID   uint16
	ReasonCode ReasonCode
	Props      Properties
}

// Pubrec is the PUBREC packet (QoS 2, step 1).
type Pubrec struct {
	PacketID   uint16
	ReasonCode ReasonCode
	Props      Properties
}

// Pubrel is the PUBREL packet (QoS 2, step 2).
type Pubrel struct {
	PacketID   uint16
	ReasonCode ReasonCode
	Props      Properties
}

// Pubcomp is the PUBCOMP packet (QoS 2, step 3).
type Pubcomp struct {
	PacketID   uint16
	ReasonCode ReasonCode
	Props      Properties
}

// Subscription is one topic filter of a SUBSCRIBE with its options.
type Subscription struct {
	Filter            string
	QoS               byte
	NoLocal           bool // v5
	RetainAsPublished bool // v5
	RetainHandling    byte // v5: 0, 1 or 2
}

// Subscribe is the SUBSCRIBE packet.
type Subscribe struct {
	PacketID      uint16
	Props         Properties
	Subscriptions []Subscription
}

// Suback is the SUBACK packet. Before v5 the codes are 0x00-0x02 or 0x80.
type Suback struct {
	PacketID    uint16
	Props       Properties
	ReasonCodes []ReasonCode
}

// Unsubscribe is the UNSUBSCRIBE packet.
type Unsubscribe struct {
	PacketID uint16
	Props    Properties
	Filters  []string
}

// Unsuback is the UNSUBACK packet. ReasonCodes are v5 only.
type Unsuback struct {
	PacketID    uint16
	Props       Properties
	ReasonCodes []ReasonCode
}

// Pingreq is the PINGREQ packet.
type Pingreq struct{}

// Pingresp is the PINGRESP packet.
type Pingresp struct{}

// Disconnect is the DISCONNECT packet. ReasonCode and Props are v5 only.
type Disconnect struct {
	ReasonCode ReasonCode
	Props      Properties
}

// Auth is the v5 AUTH packet.
type Auth struct {
	ReasonCode ReasonCode
	Props      Properties
}

// Type implementations.
func (*Connect) Type() Type     { return CONNECT }
func (*Connack) Type() Type     { return CONNACK }
func (*Publish) Type() Type     { return PUBLISH }
func (*Puback) Type() Type      { return PUBACK }
func (*Pubrec) Type() Type      { return PUBREC }
func (*Pubrel) Type() Type      { return PUBREL }
func (*Pubcomp) Type() Type     { return PUBCOMP }
func (*Subscribe) Type() Type   { return SUBSCRIBE }
func (*Suback) Type() Type      { return SUBACK }
func (*Unsubscribe) Type() Type { return UNSUBSCRIBE }
func (*Unsuback) Type() Type    { return UNSUBACK }
func (*Pingreq) Type() Type     { return PINGREQ }
func (*Pingresp) Type() Type    { return PINGRESP }
func (*Disconnect) Type() Type  { return DISCONNECT }
func (*Auth) Type() Type        { return AUTH }

// PropID is a v5 property identifier.
type PropID byte

// v5 property identifiers, 5.0 §2.2.2.2 (table 2-4).
const (
	PropPayloadFormat        PropID = 0x01
	PropMessageExpiry        PropID = 0x02
	PropContentType          PropID = 0x03
	PropResponseTopic        PropID = 0x08
	PropCorrelationData      PropID = 0x09
	PropSubscriptionID       PropID = 0x0B
	PropSessionExpiry        PropID = 0x11
	PropAssignedClientID     PropID = 0x12
	PropServerKeepAlive      PropID = 0x13
	PropAuthMethod           PropID = 0x15
	PropAuthData             PropID = 0x16
	PropRequestProblemInfo   PropID = 0x17
	PropWillDelay            PropID = 0x18
	PropRequestResponseInfo  PropID = 0x19
	PropResponseInfo         PropID = 0x1A
	PropServerReference      PropID = 0x1C
	PropReasonString         PropID = 0x1F
	PropReceiveMaximum       PropID = 0x21
	PropTopicAliasMaximum    PropID = 0x22
	PropTopicAlias           PropID = 0x23
	PropMaximumQoS           PropID = 0x24
	PropRetainAvailable      PropID = 0x25
	PropUserProperty         PropID = 0x26
	PropMaximumPacketSize    PropID = 0x27
	PropWildcardSubAvailable PropID = 0x28
	PropSubIDAvailable       PropID = 0x29
	PropSharedSubAvailable   PropID = 0x2A
)

// UserProperty is one v5 user property (a name/value pair; may repeat).
type UserProperty struct {
	Key, Value string
}

// Properties holds v5 properties. It is a plain value so a v3 packet carries
// no allocation for it. Presence is tracked in a bit set indexed by PropID
// (every ID is below 64), so a zero value that was sent on the wire ("message
// expiry 0") is distinguishable from an absent one. SubscriptionIDs and
// UserProperties are present when non-empty.
type Properties struct {
	Present uint64 // bit (1 << PropID) set when the property was present

	PayloadFormat        byte
	MessageExpiry        uint32
	ContentType          string
	ResponseTopic        string
	CorrelationData      []byte
	SubscriptionIDs      []uint32 // PUBLISH may carry several; SUBSCRIBE at most one
	SessionExpiry        uint32
	AssignedClientID     string
	ServerKeepAlive      uint16
	AuthMethod           string
	AuthData             []byte
	RequestProblemInfo   byte
	WillDelay            uint32
	RequestResponseInfo  byte
	ResponseInfo         string
	ServerReference      string
	ReasonString         string
	ReceiveMaximum       uint16
	TopicAliasMaximum    uint16
	TopicAlias           uint16
	MaximumQoS           byte
	RetainAvailable      byte
	UserProperties       []UserProperty
	MaximumPacketSize    uint32
	WildcardSubAvailable byte
	SubIDAvailable       byte
	SharedSubAvailable   byte
}

// Has reports whether property id was present.
func (p *Properties) Has(id PropID) bool { return p.Present&(1<<id) != 0 }

// Set marks property id as present. The caller sets the field itself.
func (p *Properties) Set(id PropID) { p.Present |= 1 << id }

// Clear marks property id as absent.
func (p *Properties) Clear(id PropID) { p.Present &^= 1 << id }
