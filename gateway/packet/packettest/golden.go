// Package packettest holds golden MQTT packets, byte for byte, for the codec's
// tests and for broker tests that want real wire bytes. The layouts follow the
// figures of the MQTT 3.1.1 and 5.0 specifications.
//
// The fixtures are package variables shared by every test in a binary: read
// them, never modify them.
package packettest

import (
	"bytes"

	"github.com/edgegw/edgegw/gateway/packet"
)

// Fixture is one valid packet: its wire bytes at protocol level Version and
// the decoded value. Decoding Bytes (at Version, or at level 0 for CONNECT)
// yields Packet; encoding Packet yields Bytes unless NonCanonical is set
// (the encoder prefers a shorter form of the same packet).
type Fixture struct {
	Name         string
	Version      packet.Version
	Bytes        []byte
	Packet       packet.Packet
	NonCanonical bool
}

// Bad is one invalid packet: decoding Bytes at Version fails with an
// *packet.Error whose Code is Code.
type Bad struct {
	Name    string
	Version packet.Version // 0 = before CONNECT
	Bytes   []byte
	Code    packet.ReasonCode
}

// B concatenates wire pieces: a byte or an int (one byte each), a string
// (its raw bytes) or a []byte.
func B(parts ...any) []byte {
	var buf bytes.Buffer
	for _, p := range parts {
		switch p := p.(type) {
		case byte:
			buf.WriteByte(p)
		case int:
			buf.WriteByte(byte(p))
		case string:
			buf.WriteString(p)
		case []byte:
			buf.Write(p)
		default:
			panic("packettest.B: unsupported part")
		}
	}
	return buf.Bytes()
}

// S is a UTF-8 Encoded String (or Binary Data): a two-byte big-endian length
// and the bytes.
func S(s string) []byte {
	return append([]byte{byte(len(s) >> 8), byte(len(s))}, s...)
}

func props(ids ...packet.PropID) uint64 {
	var m uint64
	for _, id := range ids {
		m |= 1 << id
	}
	return m
}

var payload200 = bytes.Repeat([]byte{'z'}, 200)

// Golden is the set of valid packets, for every packet type and level.
var Golden = []Fixture{
	// ---- MQTT 3.1.1 (level 4) ----
	{Name: "v4/connect/minimal", Version: packet.V311,
		// 3.1.1 figure 3.6: protocol name, level 4, flags (clean session),
		// keep alive 60, zero-length client id.
		Bytes:  B(0x10, 12, S("MQTT"), 4, 0x02, 0, 60, S("")),
		Packet: &packet.Connect{ProtocolName: "MQTT", Version: packet.V311, CleanStart: true, KeepAlive: 60}},
	{Name: "v4/connect/will_user_password", Version: packet.V311,
		// flags 0xEE: user name, password, will retain, will qos 1, will, clean.
		Bytes: B(0x10, 49, S("MQTT"), 4, 0xEE, 0, 10, S("client-1"),
			S("will/topic"), S("bye"), S("user"), S("pass")),
		Packet: &packet.Connect{ProtocolName: "MQTT", Version: packet.V311, CleanStart: true, KeepAlive: 10,
			ClientID: "client-1", Will: &packet.Will{QoS: 1, Retain: true, Topic: "will/topic", Payload: []byte("bye")},
			UsernameFlag: true, Username: "user", PasswordFlag: true, Password: []byte("pass")}},
	{Name: "v4/connect/persistent_no_keepalive", Version: packet.V311,
		Bytes:  B(0x10, 18, S("MQTT"), 4, 0x00, 0, 0, S("sensor")),
		Packet: &packet.Connect{ProtocolName: "MQTT", Version: packet.V311, ClientID: "sensor"}},
	{Name: "v4/connack/accepted", Version: packet.V311,
		Bytes: B(0x20, 2, 0, 0), Packet: &packet.Connack{}},
	{Name: "v4/connack/session_present", Version: packet.V311,
		Bytes: B(0x20, 2, 1, 0), Packet: &packet.Connack{SessionPresent: true}},
	{Name: "v4/connack/not_authorized", Version: packet.V311,
		Bytes: B(0x20, 2, 0, 5), Packet: &packet.Connack{ReasonCode: packet.V3RefusedNotAuthorized}},
	{Name: "v4/publish/qos0", Version: packet.V311,
		Bytes:  B(0x30, 10, S("a/b"), "hello"),
		Packet: &packet.Publish{Topic: "a/b", Payload: []byte("hello")}},
	{Name: "v4/publish/qos1_dup_retain", Version: packet.V311,
		Bytes:  B(0x3B, 8, S("a/b"), 0, 10, "x"),
		Packet: &packet.Publish{Dup: true, QoS: 1, Retain: true, Topic: "a/b", PacketID: 10, Payload: []byte("x")}},
	{Name: "v4/publish/qos2_empty_payload", Version: packet.V311,
		Bytes:  B(0x34, 9, S("t/x/y"), 0xFF, 0xFF),
		Packet: &packet.Publish{QoS: 2, Topic: "t/x/y", PacketID: 65535}},
	{Name: "v4/publish/two_byte_remaining_length", Version: packet.V311,
		// 203 = 0xCB 0x01 as a Variable Byte Integer.
		Bytes:  B(0x30, 0xCB, 0x01, S("a"), payload200),
		Packet: &packet.Publish{Topic: "a", Payload: payload200}},
	{Name: "v4/publish/utf8_topic", Version: packet.V311,
		Bytes:  B(0x30, 9, S("é/水"), "v"),
		Packet: &packet.Publish{Topic: "é/水", Payload: []byte("v")}},
	{Name: "v4/publish/dollar_topic", Version: packet.V311,
		Bytes:  B(0x31, 17, S("$SYS/broker/up"), "1"),
		Packet: &packet.Publish{Retain: true, Topic: "$SYS/broker/up", Payload: []byte("1")}},
	{Name: "v4/puback", Version: packet.V311, Bytes: B(0x40, 2, 0, 1), Packet: &packet.Puback{PacketID: 1}},
	{Name: "v4/pubrec", Version: packet.V311, Bytes: B(0x50, 2, 0, 2), Packet: &packet.Pubrec{PacketID: 2}},
	{Name: "v4/pubrel", Version: packet.V311, Bytes: B(0x62, 2, 0, 3), Packet: &packet.Pubrel{PacketID: 3}},
	{Name: "v4/pubcomp", Version: packet.V311, Bytes: B(0x70, 2, 1, 4), Packet: &packet.Pubcomp{PacketID: 260}},
	{Name: "v4/subscribe/two_filters", Version: packet.V311,
		Bytes: B(0x82, 14, 0, 10, S("a/+"), 1, S("b/#"), 2),
		Packet: &packet.Subscribe{PacketID: 10, Subscriptions: []packet.Subscription{
			{Filter: "a/+", QoS: 1}, {Filter: "b/#", QoS: 2}}}},
	{Name: "v4/subscribe/wildcards", Version: packet.V311,
		Bytes: B(0x82, 12, 0, 11, S("#"), 0, S("+/+"), 0),
		Packet: &packet.Subscribe{PacketID: 11, Subscriptions: []packet.Subscription{
			{Filter: "#"}, {Filter: "+/+"}}}},
	{Name: "v4/suback", Version: packet.V311,
		Bytes:  B(0x90, 5, 0, 10, 0, 1, 0x80),
		Packet: &packet.Suback{PacketID: 10, ReasonCodes: []packet.ReasonCode{0, 1, 0x80}}},
	{Name: "v4/unsubscribe", Version: packet.V311,
		Bytes:  B(0xA2, 10, 0, 11, S("a/+"), S("b")),
		Packet: &packet.Unsubscribe{PacketID: 11, Filters: []string{"a/+", "b"}}},
	{Name: "v4/unsuback", Version: packet.V311, Bytes: B(0xB0, 2, 0, 11), Packet: &packet.Unsuback{PacketID: 11}},
	{Name: "v4/pingreq", Version: packet.V311, Bytes: B(0xC0, 0), Packet: &packet.Pingreq{}},
	{Name: "v4/pingresp", Version: packet.V311, Bytes: B(0xD0, 0), Packet: &packet.Pingresp{}},
	{Name: "v4/disconnect", Version: packet.V311, Bytes: B(0xE0, 0), Packet: &packet.Disconnect{}},

	// ---- MQTT 3.1 (level 3) ----
	{Name: "v3/connect", Version: packet.V31,
		Bytes:  B(0x10, 16, S("MQIsdp"), 3, 0x02, 0, 60, S("c1")),
		Packet: &packet.Connect{ProtocolName: "MQIsdp", Version: packet.V31, CleanStart: true, KeepAlive: 60, ClientID: "c1"}},
	{Name: "v3/connect/user_password", Version: packet.V31,
		Bytes: B(0x10, 23, S("MQIsdp"), 3, 0xC0, 0, 30, S("c2"), S("u"), S("pw")),
		Packet: &packet.Connect{ProtocolName: "MQIsdp", Version: packet.V31, KeepAlive: 30, ClientID: "c2",
			UsernameFlag: true, Username: "u", PasswordFlag: true, Password: []byte("pw")}},
	{Name: "v3/connack", Version: packet.V31, Bytes: B(0x20, 2, 0, 0), Packet: &packet.Connack{}},
	{Name: "v3/connack/reserved_byte_ignored", Version: packet.V31, NonCanonical: true,
		Bytes: B(0x20, 2, 1, 2), Packet: &packet.Connack{ReasonCode: packet.V3RefusedIdentifierRejected}},
	{Name: "v3/publish/qos1", Version: packet.V31,
		Bytes:  B(0x32, 7, S("t"), 0, 7, "ab"),
		Packet: &packet.Publish{QoS: 1, Topic: "t", PacketID: 7, Payload: []byte("ab")}},
	{Name: "v3/subscribe/dup_retry", Version: packet.V31, NonCanonical: true,
		// 3.1 allowed DUP on a re-sent SUBSCRIBE.
		Bytes:  B(0x8A, 6, 0, 5, S("t"), 1),
		Packet: &packet.Subscribe{PacketID: 5, Subscriptions: []packet.Subscription{{Filter: "t", QoS: 1}}}},
	{Name: "v3/pubrel/dup_retry", Version: packet.V31, NonCanonical: true,
		Bytes: B(0x6A, 2, 0, 5), Packet: &packet.Pubrel{PacketID: 5}},
	{Name: "v3/unsuback", Version: packet.V31, Bytes: B(0xB0, 2, 0, 5), Packet: &packet.Unsuback{PacketID: 5}},

	// ---- MQTT 5.0 (level 5) ----
	{Name: "v5/connect/minimal", Version: packet.V5,
		// v5 figure 3-5 onwards: property length 0 after keep alive.
		Bytes:  B(0x10, 13, S("MQTT"), 5, 0x02, 0, 60, 0, S("")),
		Packet: &packet.Connect{ProtocolName: "MQTT", Version: packet.V5, CleanStart: true, KeepAlive: 60}},
	{Name: "v5/connect/props_will", Version: packet.V5,
		// flags 0xD6: user name, password, will qos 2, will, clean start.
		Bytes: B(0x10, 68, S("MQTT"), 5, 0xD6, 0, 30,
			15, 0x11, 0, 0, 0x0E, 0x10, 0x21, 0, 20, 0x26, S("k"), S("v"),
			S("cid"),
			20, 0x01, 1, 0x03, S("text/plain"), 0x18, 0, 0, 0, 5,
			S("lw"), S("gone"), S("u"), S("p")),
		Packet: &packet.Connect{ProtocolName: "MQTT", Version: packet.V5, CleanStart: true, KeepAlive: 30,
			Props: packet.Properties{
				Present:        props(packet.PropSessionExpiry, packet.PropReceiveMaximum, packet.PropUserProperty),
				SessionExpiry:  3600,
				ReceiveMaximum: 20,
				UserProperties: []packet.UserProperty{{Key: "k", Value: "v"}},
			},
			ClientID: "cid",
			Will: &packet.Will{QoS: 2, Topic: "lw", Payload: []byte("gone"), Props: packet.Properties{
				Present:       props(packet.PropPayloadFormat, packet.PropContentType, packet.PropWillDelay),
				PayloadFormat: 1, ContentType: "text/plain", WillDelay: 5,
			}},
			UsernameFlag: true, Username: "u", PasswordFlag: true, Password: []byte("p")}},
	{Name: "v5/connect/password_without_username", Version: packet.V5,
		// 5.0 §3.1.2.9 allows a password without a user name.
		Bytes: B(0x10, 21, S("MQTT"), 5, 0x42, 0, 0, 0, S(""), S("secret")),
		Packet: &packet.Connect{ProtocolName: "MQTT", Version: packet.V5, CleanStart: true,
			PasswordFlag: true, Password: []byte("secret")}},
	{Name: "v5/connect/auth_method", Version: packet.V5,
		Bytes: B(0x10, 32, S("MQTT"), 5, 0x00, 0, 5,
			18, 0x15, S("SCRAM"), 0x16, S("abc"), 0x17, 0, 0x19, 1,
			S("x")),
		Packet: &packet.Connect{ProtocolName: "MQTT", Version: packet.V5, KeepAlive: 5, ClientID: "x",
			Props: packet.Properties{
				Present: props(packet.PropAuthMethod, packet.PropAuthData,
					packet.PropRequestProblemInfo, packet.PropRequestResponseInfo),
				AuthMethod: "SCRAM", AuthData: []byte("abc"), RequestProblemInfo: 0, RequestResponseInfo: 1,
			}}},
	{Name: "v5/connack/success", Version: packet.V5,
		Bytes: B(0x20, 3, 0, 0, 0), Packet: &packet.Connack{}},
	{Name: "v5/connack/props", Version: packet.V5,
		Bytes: B(0x20, 22, 1, 0, 19,
			0x12, S("auto-1"), 0x13, 0, 60, 0x22, 0, 10, 0x24, 1, 0x25, 0),
		Packet: &packet.Connack{SessionPresent: true, Props: packet.Properties{
			Present: props(packet.PropAssignedClientID, packet.PropServerKeepAlive,
				packet.PropTopicAliasMaximum, packet.PropMaximumQoS, packet.PropRetainAvailable),
			AssignedClientID: "auto-1", ServerKeepAlive: 60, TopicAliasMaximum: 10, MaximumQoS: 1, RetainAvailable: 0,
		}}},
	{Name: "v5/connack/not_authorized", Version: packet.V5,
		Bytes: B(0x20, 3, 0, 0x87, 0), Packet: &packet.Connack{ReasonCode: packet.NotAuthorized}},
	{Name: "v5/connack/unsupported_version", Version: packet.V5,
		Bytes: B(0x20, 3, 0, 0x84, 0), Packet: &packet.Connack{ReasonCode: packet.UnsupportedProtocolVersion}},
	{Name: "v5/publish/qos0_no_props", Version: packet.V5,
		Bytes:  B(0x30, 7, S("a/b"), 0, "x"),
		Packet: &packet.Publish{Topic: "a/b", Payload: []byte("x")}},
	{Name: "v5/publish/qos1_props", Version: packet.V5,
		Bytes: B(0x32, 43, S("a/b"), 0, 1,
			33, 0x01, 1, 0x02, 0, 0, 0, 60, 0x08, S("r/1"), 0x09, S("id"),
			0x0B, 5, 0x0B, 0x80, 0x01, 0x23, 0, 1, 0x26, S("a"), S("b"),
			"hi"),
		Packet: &packet.Publish{QoS: 1, Topic: "a/b", PacketID: 1, Payload: []byte("hi"), Props: packet.Properties{
			Present: props(packet.PropPayloadFormat, packet.PropMessageExpiry, packet.PropResponseTopic,
				packet.PropCorrelationData, packet.PropSubscriptionID, packet.PropTopicAlias, packet.PropUserProperty),
			PayloadFormat: 1, MessageExpiry: 60, ResponseTopic: "r/1", CorrelationData: []byte("id"),
			SubscriptionIDs: []uint32{5, 128}, TopicAlias: 1,
			UserProperties: []packet.UserProperty{{Key: "a", Value: "b"}},
		}}},
	{Name: "v5/publish/topic_alias_empty_topic", Version: packet.V5,
		// 5.0 §3.3.2.1: a zero-length topic with a Topic Alias.
		Bytes: B(0x30, 7, S(""), 3, 0x23, 0, 2, "x"),
		Packet: &packet.Publish{Payload: []byte("x"), Props: packet.Properties{
			Present: props(packet.PropTopicAlias), TopicAlias: 2}}},
	{Name: "v5/puback/short", Version: packet.V5,
		Bytes: B(0x40, 2, 0, 1), Packet: &packet.Puback{PacketID: 1}},
	{Name: "v5/puback/reason_only", Version: packet.V5,
		Bytes: B(0x40, 3, 0, 1, 0x10), Packet: &packet.Puback{PacketID: 1, ReasonCode: packet.NoMatchingSubscribers}},
	{Name: "v5/puback/reason_string", Version: packet.V5,
		Bytes: B(0x40, 11, 0, 1, 0x80, 7, 0x1F, S("nope")),
		Packet: &packet.Puback{PacketID: 1, ReasonCode: packet.UnspecifiedError, Props: packet.Properties{
			Present: props(packet.PropReasonString), ReasonString: "nope"}}},
	{Name: "v5/puback/success_with_reason_byte", Version: packet.V5, NonCanonical: true,
		Bytes: B(0x40, 3, 0, 1, 0), Packet: &packet.Puback{PacketID: 1}},
	{Name: "v5/puback/success_with_empty_props", Version: packet.V5, NonCanonical: true,
		Bytes: B(0x40, 4, 0, 1, 0, 0), Packet: &packet.Puback{PacketID: 1}},
	{Name: "v5/pubrec/short", Version: packet.V5,
		Bytes: B(0x50, 2, 0, 2), Packet: &packet.Pubrec{PacketID: 2}},
	{Name: "v5/pubrec/quota_exceeded", Version: packet.V5,
		Bytes: B(0x50, 3, 0, 2, 0x97), Packet: &packet.Pubrec{PacketID: 2, ReasonCode: packet.QuotaExceeded}},
	{Name: "v5/pubrel/not_found", Version: packet.V5,
		Bytes: B(0x62, 3, 0, 5, 0x92), Packet: &packet.Pubrel{PacketID: 5, ReasonCode: packet.PacketIDNotFound}},
	{Name: "v5/pubcomp/user_property", Version: packet.V5,
		Bytes: B(0x70, 11, 0, 6, 0, 7, 0x26, S("a"), S("b")),
		Packet: &packet.Pubcomp{PacketID: 6, Props: packet.Properties{
			Present:        props(packet.PropUserProperty),
			UserProperties: []packet.UserProperty{{Key: "a", Value: "b"}}}}},
	{Name: "v5/subscribe/options_shared", Version: packet.V5,
		// options 0x2E: retain handling 2, retain as published, no local, qos 2.
		Bytes: B(0x82, 26, 0, 1, 2, 0x0B, 7, S("a/#"), 0x2E, S("$share/g/x/+"), 0x11),
		Packet: &packet.Subscribe{PacketID: 1,
			Props: packet.Properties{Present: props(packet.PropSubscriptionID), SubscriptionIDs: []uint32{7}},
			Subscriptions: []packet.Subscription{
				{Filter: "a/#", QoS: 2, NoLocal: true, RetainAsPublished: true, RetainHandling: 2},
				{Filter: "$share/g/x/+", QoS: 1, RetainHandling: 1}}}},
	{Name: "v5/suback", Version: packet.V5,
		Bytes: B(0x90, 11, 0, 1, 0, 0, 1, 2, 0x80, 0x8F, 0x9E, 0xA1, 0xA2),
		Packet: &packet.Suback{PacketID: 1, ReasonCodes: []packet.ReasonCode{
			packet.GrantedQoS0, packet.GrantedQoS1, packet.GrantedQoS2, packet.UnspecifiedError,
			packet.TopicFilterInvalid, packet.SharedSubNotSupported, packet.SubIDNotSupported,
			packet.WildcardSubNotSupported}}},
	{Name: "v5/unsubscribe", Version: packet.V5,
		Bytes:  B(0xA2, 13, 0, 2, 0, S("a/b"), S("c/+")),
		Packet: &packet.Unsubscribe{PacketID: 2, Filters: []string{"a/b", "c/+"}}},
	{Name: "v5/unsuback", Version: packet.V5,
		Bytes: B(0xB0, 5, 0, 2, 0, 0, 0x11),
		Packet: &packet.Unsuback{PacketID: 2, ReasonCodes: []packet.ReasonCode{
			packet.Success, packet.NoSubscriptionExisted}}},
	{Name: "v5/pingreq", Version: packet.V5, Bytes: B(0xC0, 0), Packet: &packet.Pingreq{}},
	{Name: "v5/pingresp", Version: packet.V5, Bytes: B(0xD0, 0), Packet: &packet.Pingresp{}},
	{Name: "v5/disconnect/short", Version: packet.V5, Bytes: B(0xE0, 0), Packet: &packet.Disconnect{}},
	{Name: "v5/disconnect/with_will", Version: packet.V5,
		Bytes: B(0xE0, 1, 0x04), Packet: &packet.Disconnect{ReasonCode: packet.DisconnectWithWill}},
	{Name: "v5/disconnect/session_expiry", Version: packet.V5,
		Bytes:  B(0xE0, 7, 0, 5, 0x11, 0, 0, 0, 0),
		Packet: &packet.Disconnect{Props: packet.Properties{Present: props(packet.PropSessionExpiry)}}},
	{Name: "v5/disconnect/server_moved", Version: packet.V5,
		Bytes: B(0xE0, 11, 0x9D, 9, 0x1C, S("host:1")),
		Packet: &packet.Disconnect{ReasonCode: packet.ServerMoved, Props: packet.Properties{
			Present: props(packet.PropServerReference), ServerReference: "host:1"}}},
	{Name: "v5/disconnect/success_empty_props", Version: packet.V5, NonCanonical: true,
		Bytes: B(0xE0, 2, 0, 0), Packet: &packet.Disconnect{}},
	{Name: "v5/auth/short", Version: packet.V5, Bytes: B(0xF0, 0), Packet: &packet.Auth{}},
	{Name: "v5/auth/continue", Version: packet.V5,
		Bytes: B(0xF0, 16, 0x18, 14, 0x15, S("SCRAM"), 0x16, S("xyz")),
		Packet: &packet.Auth{ReasonCode: packet.ContinueAuthentication, Props: packet.Properties{
			Present:    props(packet.PropAuthMethod, packet.PropAuthData),
			AuthMethod: "SCRAM", AuthData: []byte("xyz")}}},
}

// connect4 is a 3.1.1 CONNECT with the given flags byte and payload.
func connect4(flags byte, payload ...any) []byte {
	body := B(S("MQTT"), 4, flags, 0, 60, B(payload...))
	return B(0x10, len(body), body)
}

// connect5 is a v5 CONNECT with the given flags, properties and payload.
func connect5(flags byte, propBytes []byte, payload ...any) []byte {
	body := B(S("MQTT"), 5, flags, 0, 60, len(propBytes), propBytes, B(payload...))
	return B(0x10, len(body), body)
}

// publish5 is a v5 QoS 0 PUBLISH to topic "t" with the given properties.
func publish5(propBytes ...any) []byte {
	p := B(propBytes...)
	body := B(S("t"), len(p), p, "x")
	return B(0x30, len(body), body)
}

// Invalid is the set of packets the decoder must reject, with the v5 reason
// code it reports.
var Invalid = []Bad{
	// Fixed header.
	{"header/reserved_type_0", packet.V311, B(0x00, 0), packet.MalformedPacket},
	{"header/first_packet_not_connect", 0, B(0x30, 3, S("t"), "x"), packet.ProtocolError},
	{"header/http_request", 0, []byte("GET /mqtt HTTP/1.1\r\n\r\n"), packet.ProtocolError},
	{"header/tls_client_hello", 0, B(0x16, 0x03, 0x01, 0x02, 0x00, 0x01), packet.MalformedPacket},
	{"header/auth_before_v5", packet.V311, B(0xF0, 0), packet.MalformedPacket},
	{"header/connect_flags", 0, B(0x11, 12, S("MQTT"), 4, 2, 0, 60, S("")), packet.MalformedPacket},
	{"header/publish_qos3", packet.V311, B(0x36, 5, S("t"), 0, 1), packet.MalformedPacket},
	{"header/publish_dup_qos0", packet.V311, B(0x38, 4, S("t"), "x"), packet.MalformedPacket},
	{"header/puback_flags", packet.V311, B(0x41, 2, 0, 1), packet.MalformedPacket},
	{"header/pubrel_flags_0", packet.V311, B(0x60, 2, 0, 1), packet.MalformedPacket},
	{"header/pubrel_dup_v4", packet.V311, B(0x6A, 2, 0, 1), packet.MalformedPacket},
	{"header/subscribe_flags_0", packet.V311, B(0x80, 6, 0, 1, S("t"), 0), packet.MalformedPacket},
	{"header/unsubscribe_flags_0", packet.V5, B(0xA0, 6, 0, 1, 0, S("t")), packet.MalformedPacket},
	{"header/pingreq_flags", packet.V311, B(0xC1, 0), packet.MalformedPacket},
	{"header/remaining_length_5_bytes", packet.V311, B(0x30, 0xFF, 0xFF, 0xFF, 0xFF, 0x01), packet.MalformedPacket},

	// Strings.
	{"string/overlong_nul", packet.V311, B(0x30, 5, 0, 2, 0xC0, 0x80, "x"), packet.MalformedPacket},
	{"string/nul", packet.V311, B(0x30, 6, S("a\x00b"), "x"), packet.MalformedPacket},
	{"string/surrogate", packet.V311, B(0x30, 6, 0, 3, 0xED, 0xA0, 0x80, "x"), packet.MalformedPacket},
	{"string/invalid_utf8", packet.V311, B(0x30, 4, 0, 1, 0xFF, "x"), packet.MalformedPacket},
	{"string/length_past_end", packet.V311, B(0x30, 4, 0, 9, "ab"), packet.MalformedPacket},
	{"string/truncated_length", packet.V311, B(0x30, 1, 0), packet.MalformedPacket},

	// PUBLISH.
	{"publish/topic_plus", packet.V311, B(0x30, 6, S("a/+"), "x"), packet.TopicNameInvalid},
	{"publish/topic_hash", packet.V5, B(0x30, 5, S("#"), 0, "x"), packet.TopicNameInvalid},
	{"publish/topic_empty_v4", packet.V311, B(0x30, 3, S(""), "x"), packet.TopicNameInvalid},
	{"publish/topic_empty_v5_no_alias", packet.V5, B(0x30, 4, S(""), 0, "x"), packet.TopicNameInvalid},
	{"publish/packet_id_0", packet.V311, B(0x32, 5, S("t"), 0, 0), packet.MalformedPacket},
	{"publish/packet_id_missing", packet.V311, B(0x32, 4, S("t"), 0), packet.MalformedPacket},
	{"publish/topic_alias_0", packet.V5, publish5(0x23, 0, 0), packet.TopicAliasInvalid},
	{"publish/props_length_past_end", packet.V5, B(0x30, 5, S("t"), 9, 1), packet.MalformedPacket},
	{"publish/props_truncated_value", packet.V5, publish5(0x02, 0, 0), packet.MalformedPacket},
	{"publish/unknown_property", packet.V5, publish5(0x05, 1), packet.MalformedPacket},
	{"publish/property_not_allowed", packet.V5, publish5(0x11, 0, 0, 0, 1), packet.ProtocolError},
	{"publish/duplicate_message_expiry", packet.V5, publish5(0x02, 0, 0, 0, 1, 0x02, 0, 0, 0, 2), packet.ProtocolError},
	{"publish/payload_format_2", packet.V5, publish5(0x01, 2), packet.ProtocolError},
	{"publish/subscription_id_0", packet.V5, publish5(0x0B, 0), packet.ProtocolError},
	{"publish/subscription_id_5_bytes", packet.V5, publish5(0x0B, 0x80, 0x80, 0x80, 0x80, 0x01), packet.MalformedPacket},
	{"publish/response_topic_wildcard", packet.V5, publish5(0x08, S("r/#")), packet.ProtocolError},
	{"publish/bad_user_property", packet.V5, publish5(0x26, S("k"), 0, 1, 0xFF), packet.MalformedPacket},

	// CONNECT.
	{"connect/protocol_name", 0, B(0x10, 12, S("MQTX"), 4, 2, 0, 60, S("")), packet.UnsupportedProtocolVersion},
	{"connect/level_6", 0, B(0x10, 12, S("MQTT"), 6, 2, 0, 60, S("")), packet.UnsupportedProtocolVersion},
	{"connect/mqtt_level_3", 0, B(0x10, 12, S("MQTT"), 3, 2, 0, 60, S("")), packet.UnsupportedProtocolVersion},
	{"connect/mqisdp_level_4", 0, B(0x10, 14, S("MQIsdp"), 4, 2, 0, 60, S("")), packet.UnsupportedProtocolVersion},
	{"connect/reserved_flag", 0, connect4(0x03, S("c")), packet.MalformedPacket},
	{"connect/will_qos_without_will", 0, connect4(0x0A, S("c")), packet.MalformedPacket},
	{"connect/will_retain_without_will", 0, connect4(0x22, S("c")), packet.MalformedPacket},
	{"connect/will_qos_3", 0, connect4(0x1E, S("c"), S("w"), S("m")), packet.MalformedPacket},
	{"connect/password_without_username_v4", 0, connect4(0x42, S("c"), S("pw")), packet.MalformedPacket},
	{"connect/will_topic_wildcard", 0, connect4(0x06, S("c"), S("w/+"), S("m")), packet.TopicNameInvalid},
	{"connect/will_topic_empty", 0, connect4(0x06, S("c"), S(""), S("m")), packet.TopicNameInvalid},
	{"connect/missing_username", 0, connect4(0x82, S("c")), packet.MalformedPacket},
	{"connect/trailing_bytes", 0, connect4(0x02, S("c"), 0), packet.MalformedPacket},
	{"connect/truncated_header", 0, B(0x10, 7, S("MQTT"), 4), packet.MalformedPacket},
	{"connect/client_id_utf8", 0, connect4(0x02, 0, 1, 0xC3), packet.MalformedPacket},
	{"connect/v5_duplicate_session_expiry", 0,
		connect5(0x02, B(0x11, 0, 0, 0, 1, 0x11, 0, 0, 0, 2), S("c")), packet.ProtocolError},
	{"connect/v5_topic_alias_not_allowed", 0, connect5(0x02, B(0x23, 0, 1), S("c")), packet.ProtocolError},
	{"connect/v5_unknown_property", 0, connect5(0x02, B(0x7F, 0), S("c")), packet.MalformedPacket},
	{"connect/v5_receive_maximum_0", 0, connect5(0x02, B(0x21, 0, 0), S("c")), packet.ProtocolError},
	{"connect/v5_maximum_packet_size_0", 0, connect5(0x02, B(0x27, 0, 0, 0, 0), S("c")), packet.ProtocolError},
	{"connect/v5_request_problem_info_2", 0, connect5(0x02, B(0x17, 2), S("c")), packet.ProtocolError},
	{"connect/v5_will_property_not_allowed", 0,
		connect5(0x06, nil, S("c"), 3, 0x23, 0, 1, S("w"), S("m")), packet.ProtocolError},
	{"connect/v5_will_props_missing", 0, connect5(0x06, nil, S("c")), packet.MalformedPacket},

	// CONNACK.
	{"connack/reserved_flags", packet.V311, B(0x20, 2, 2, 0), packet.MalformedPacket},
	{"connack/return_code_6", packet.V311, B(0x20, 2, 0, 6), packet.MalformedPacket},
	{"connack/trailing", packet.V311, B(0x20, 3, 0, 0, 0), packet.MalformedPacket},
	{"connack/v5_missing_props", packet.V5, B(0x20, 2, 0, 0), packet.MalformedPacket},
	{"connack/v5_bad_reason", packet.V5, B(0x20, 3, 0, 0x01, 0), packet.ProtocolError},
	{"connack/v5_maximum_qos_2", packet.V5, B(0x20, 5, 0, 0, 2, 0x24, 2), packet.ProtocolError},

	// Acks.
	{"puback/packet_id_0", packet.V311, B(0x40, 2, 0, 0), packet.MalformedPacket},
	{"puback/truncated", packet.V311, B(0x40, 1, 0), packet.MalformedPacket},
	{"puback/trailing_v4", packet.V311, B(0x40, 3, 0, 1, 0), packet.MalformedPacket},
	{"puback/v5_bad_reason", packet.V5, B(0x40, 3, 0, 1, 0x05), packet.ProtocolError},
	{"pubrel/v5_bad_reason", packet.V5, B(0x62, 3, 0, 1, 0x10), packet.ProtocolError},
	{"puback/v5_property_not_allowed", packet.V5, B(0x40, 6, 0, 1, 0, 2, 0x01, 1), packet.ProtocolError},
	{"pubcomp/v5_trailing", packet.V5, B(0x70, 5, 0, 1, 0, 0, 0), packet.MalformedPacket},

	// SUBSCRIBE.
	{"subscribe/no_filters_v4", packet.V311, B(0x82, 2, 0, 1), packet.ProtocolError},
	{"subscribe/no_filters_v5", packet.V5, B(0x82, 3, 0, 1, 0), packet.ProtocolError},
	{"subscribe/packet_id_0", packet.V311, B(0x82, 6, 0, 0, S("t"), 0), packet.MalformedPacket},
	{"subscribe/filter_hash_middle", packet.V311, B(0x82, 10, 0, 1, S("a/#/b"), 0), packet.TopicFilterInvalid},
	{"subscribe/filter_plus_in_level", packet.V311, B(0x82, 7, 0, 1, S("a+"), 0), packet.TopicFilterInvalid},
	{"subscribe/filter_hash_in_level", packet.V311, B(0x82, 7, 0, 1, S("#a"), 0), packet.TopicFilterInvalid},
	{"subscribe/filter_empty", packet.V311, B(0x82, 5, 0, 1, S(""), 0), packet.TopicFilterInvalid},
	{"subscribe/shared_empty_group", packet.V5, B(0x82, 17, 0, 1, 0, S("$share//a/b"), 0), packet.TopicFilterInvalid},
	{"subscribe/shared_no_filter", packet.V5, B(0x82, 14, 0, 1, 0, S("$share/g"), 0), packet.TopicFilterInvalid},
	{"subscribe/shared_wildcard_group", packet.V5, B(0x82, 16, 0, 1, 0, S("$share/+/a"), 0), packet.TopicFilterInvalid},
	{"subscribe/missing_options", packet.V311, B(0x82, 5, 0, 1, S("t")), packet.MalformedPacket},
	{"subscribe/qos_3", packet.V311, B(0x82, 6, 0, 1, S("t"), 3), packet.MalformedPacket},
	{"subscribe/v4_reserved_bits", packet.V311, B(0x82, 6, 0, 1, S("t"), 0x04), packet.MalformedPacket},
	{"subscribe/v5_reserved_bits", packet.V5, B(0x82, 7, 0, 1, 0, S("t"), 0x40), packet.MalformedPacket},
	{"subscribe/v5_retain_handling_3", packet.V5, B(0x82, 7, 0, 1, 0, S("t"), 0x30), packet.ProtocolError},
	{"subscribe/v5_no_local_shared", packet.V5, B(0x82, 16, 0, 1, 0, S("$share/g/t"), 0x04), packet.ProtocolError},
	{"subscribe/v5_two_subscription_ids", packet.V5, B(0x82, 11, 0, 1, 4, 0x0B, 1, 0x0B, 2, S("t"), 0), packet.ProtocolError},

	// SUBACK, UNSUBSCRIBE, UNSUBACK.
	{"suback/v4_bad_code", packet.V311, B(0x90, 3, 0, 1, 3), packet.ProtocolError},
	{"suback/no_codes", packet.V311, B(0x90, 2, 0, 1), packet.ProtocolError},
	{"suback/v5_bad_code", packet.V5, B(0x90, 4, 0, 1, 0, 0x10), packet.ProtocolError},
	{"unsubscribe/no_filters", packet.V311, B(0xA2, 2, 0, 1), packet.ProtocolError},
	{"unsubscribe/bad_filter", packet.V311, B(0xA2, 6, 0, 1, S("a#")), packet.TopicFilterInvalid},
	{"unsubscribe/packet_id_0", packet.V311, B(0xA2, 5, 0, 0, S("t")), packet.MalformedPacket},
	{"unsuback/v4_trailing", packet.V311, B(0xB0, 3, 0, 1, 0), packet.MalformedPacket},
	{"unsuback/v5_no_codes", packet.V5, B(0xB0, 3, 0, 1, 0), packet.ProtocolError},
	{"unsuback/v5_bad_code", packet.V5, B(0xB0, 4, 0, 1, 0, 0x01), packet.ProtocolError},

	// PINGREQ, DISCONNECT, AUTH.
	{"pingreq/body", packet.V311, B(0xC0, 1, 0), packet.MalformedPacket},
	{"disconnect/v4_body", packet.V311, B(0xE0, 1, 0), packet.MalformedPacket},
	{"disconnect/v5_bad_reason", packet.V5, B(0xE0, 1, 0x01), packet.ProtocolError},
	{"disconnect/v5_property_not_allowed", packet.V5, B(0xE0, 4, 0, 2, 0x23, 0), packet.ProtocolError},
	{"auth/v5_bad_reason", packet.V5, B(0xF0, 2, 0x87, 0), packet.ProtocolError},
}
