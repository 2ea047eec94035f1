package packet

import "fmt"

// ReasonCode is a v5 reason code (and, for CONNACK before v5, the 3.1.1
// return code). It is also an error, so one value is the wire code, the Go
// error and the log text.
type ReasonCode byte

// v5 reason codes, 5.0 §2.4.
const (
	Success                     ReasonCode = 0x00 // also NormalDisconnection, GrantedQoS0
	GrantedQoS1                 ReasonCode = 0x01
	GrantedQoS2                 ReasonCode = 0x02
	DisconnectWithWill          ReasonCode = 0x04
	NoMatchingSubscribers       ReasonCode = 0x10
	NoSubscriptionExisted       ReasonCode = 0x11
	ContinueAuthentication      ReasonCode = 0x18
	ReAuthenticate              ReasonCode = 0x19
	UnspecifiedError            ReasonCode = 0x80
	MalformedPacket             ReasonCode = 0x81
	ProtocolError               ReasonCode = 0x82
	ImplementationSpecificError ReasonCode = 0x83
	UnsupportedProtocolVersion  ReasonCode = 0x84
	ClientIDNotValid            ReasonCode = 0x85
	BadUsernameOrPassword       ReasonCode = 0x86
	NotAuthorized               ReasonCode = 0x87
	ServerUnavailable           ReasonCode = 0x88
	ServerBusy                  ReasonCode = 0x89
	Banned                      ReasonCode = 0x8A
	ServerShuttingDown          ReasonCode = 0x8B
	BadAuthenticationMethod     ReasonCode = 0x8C
	KeepAliveTimeout            ReasonCode = 0x8D
	SessionTakenOver            ReasonCode = 0x8E
	TopicFilterInvalid          ReasonCode = 0x8F
	TopicNameInvalid            ReasonCode = 0x90
	PacketIDInUse               ReasonCode = 0x91
	PacketIDNotFound            ReasonCode = 0x92
	ReceiveMaximumExceeded      ReasonCode = 0x93
	TopicAliasInvalid           ReasonCode = 0x94
	PacketTooLarge              ReasonCode = 0x95
	MessageRateTooHigh          ReasonCode = 0x96
	QuotaExceeded               ReasonCode = 0x97
	AdministrativeAction        ReasonCode = 0x98
	PayloadFormatInvalid        ReasonCode = 0x99
	RetainNotSupported          ReasonCode = 0x9A
	QoSNotSupported             ReasonCode = 0x9B
	UseAnotherServer            ReasonCode = 0x9C
	ServerMoved                 ReasonCode = 0x9D
	SharedSubNotSupported       ReasonCode = 0x9E
	ConnectionRateExceeded      ReasonCode = 0x9F
	MaximumConnectTime          ReasonCode = 0xA0
	SubIDNotSupported           ReasonCode = 0xA1
	WildcardSubNotSupported     ReasonCode = 0xA2
)

// Aliases with the names the specification uses in other packets.
const (
	NormalDisconnection ReasonCode = Success
	GrantedQoS0         ReasonCode = Success
)

// CONNACK return codes of MQTT 3.1 and 3.1.1, 3.1.1 §3.2.2.3.
const (
	V3Accepted                     ReasonCode = 0x00
	V3RefusedProtocolVersion       ReasonCode = 0x01
	V3RefusedIdentifierRejected    ReasonCode = 0x02
	V3RefusedServerUnavailable     ReasonCode = 0x03
	V3RefusedBadUsernameOrPassword ReasonCode = 0x04
	V3RefusedNotAuthorized         ReasonCode = 0x05
	V3SubackFailure                ReasonCode = 0x80
)

// Error makes a ReasonCode usable as an error.
func (c ReasonCode) Error() string { return c.String() }

// IsError reports whether c signals a failure (>= 0x80).
func (c ReasonCode) IsError() bool { return c >= 0x80 }

// String is the specification's name for c in lower case.
func (c ReasonCode) String() string {
	if s, ok := reasonNames[c]; ok {
		return s
	}
	return fmt.Sprintf("reason code 0x%02x", byte(c))
}

var reasonNames = map[ReasonCode]string{
	Success:                     "success",
	GrantedQoS1:                 "granted qos 1",
	GrantedQoS2:                 "granted qos 2",
	DisconnectWithWill:          "disconnect with will message",
	NoMatchingSubscribers:       "no matching subscribers",
	NoSubscriptionExisted:       "no subscription existed",
	ContinueAuthentication:      "continue authentication",
	ReAuthenticate:              "re-authenticate",
	UnspecifiedError:            "unspecified error",
	MalformedPacket:             "malformed packet",
	ProtocolError:               "protocol error",
	ImplementationSpecificError: "implementation specific error",
	UnsupportedProtocolVersion:  "unsupported protocol version",
	ClientIDNotValid:            "client identifier not valid",
	BadUsernameOrPassword:       "bad user name or password",
	NotAuthorized:               "not authorized",
	ServerUnavailable:           "server unavailable",
	ServerBusy:                  "server busy",
	Banned:                      "banned",
	ServerShuttingDown:          "server shutting down",
	BadAuthenticationMethod:     "bad authentication method",
	KeepAliveTimeout:            "keep alive timeout",
	SessionTakenOver:            "session taken over",
	TopicFilterInvalid:          "topic filter invalid",
	TopicNameInvalid:            "topic name invalid",
	PacketIDInUse:               "packet identifier in use",
	PacketIDNotFound:            "packet identifier not found",
	ReceiveMaximumExceeded:      "receive maximum exceeded",
	TopicAliasInvalid:           "topic alias invalid",
	PacketTooLarge:              "packet too large",
	MessageRateTooHigh:          "message rate too high",
	QuotaExceeded:               "quota exceeded",
	AdministrativeAction:        "administrative action",
	PayloadFormatInvalid:        "payload format invalid",
	RetainNotSupported:          "retain not supported",
	QoSNotSupported:             "qos not supported",
	UseAnotherServer:            "use another server",
	ServerMoved:                 "server moved",
	SharedSubNotSupported:       "shared subscriptions not supported",
	ConnectionRateExceeded:      "connection rate exceeded",
	MaximumConnectTime:          "maximum connect time",
	SubIDNotSupported:           "subscription identifiers not supported",
	WildcardSubNotSupported:     "wildcard subscriptions not supported",
}

// Error is a decoding or validation failure. Code is the v5 reason code the
// broker sends (in DISCONNECT or CONNACK) before closing; Msg says what was
// wrong. errors.Is(err, packet.MalformedPacket) matches on Code.
type Error struct {
	Code ReasonCode
	Msg  string
}

func (e *Error) Error() string { return e.Code.String() + ": " + e.Msg }

// Unwrap returns the reason code, so errors.Is works with ReasonCode values.
func (e *Error) Unwrap() error { return e.Code }

// Errorf builds an *Error with a formatted message.
func Errorf(code ReasonCode, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}
