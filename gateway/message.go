package gateway

import (
	"time"

	"github.com/edgegw/edgegw/gateway/packet"
)

// Message is an application message as the broker routes it. A Message is
// immutable once published: every receiving session shares the same pointer
// (fan-out copies pointers, never payloads), so nothing may modify it after
// it has been handed to Server.Publish or routed.
type Message struct {
	Topic   string
	Payload []byte
	QoS     byte
	Retain  bool

	// Props carries the v5 properties that pass through the broker unchanged:
	// payload format, content type, response topic, correlation data and user
	// properties. Per-hop properties (topic alias, subscription identifiers,
	// message expiry) are never stored here. nil when there are none (every
	// 3.1.1 message): the struct is large and most messages carry nothing.
	Props *packet.Properties

	// Expiry is when the message stops being deliverable (v5 message expiry
	// interval); zero means never.
	Expiry time.Time

	// Origin is the client id of the publisher, or "$bridge/<name>" for a
	// message that entered through a bridge. It drives no-local and the
	// bridges' loop prevention.
	Origin string

	// held is set, before the message is routed, when its verdict can
	// still refuse it: no copy leaves a queue until then (hold.go).
	held *hold
}

// OriginSys is the Origin of the broker's own $SYS reports (and the
// bridges' status topics): not received from anyone, so not counted as
// received. No client id can be it: MQTT strings hold no U+0000
// [MQTT-1.5.4-2].
const OriginSys = "\x00$SYS"

// size is what a queued reference to m is charged against the queue limits
// and the memory budget.
func (m *Message) size() int64 { return int64(len(m.Payload) + len(m.Topic)) }

// expired reports whether m can no longer be delivered at now.
func (m *Message) expired(now time.Time) bool {
	return !m.Expiry.IsZero() && !now.Before(m.Expiry)
}

// passThrough keeps only the v5 properties a broker forwards unchanged; nil
// when there are none.
func passThrough(in *packet.Properties) *packet.Properties {
	const kept = 1<<packet.PropPayloadFormat | 1<<packet.PropContentType |
		1<<packet.PropResponseTopic | 1<<packet.PropCorrelationData
	if in.Present&kept == 0 && len(in.UserProperties) == 0 {
		return nil
	}
	out := new(packet.Properties)
	for _, id := range []packet.PropID{packet.PropPayloadFormat, packet.PropContentType,
		packet.PropResponseTopic, packet.PropCorrelationData} {
		if in.Has(id) {
			out.Set(id)
		}
	}
	out.PayloadFormat = in.PayloadFormat
	out.ContentType = in.ContentType
	out.ResponseTopic = in.ResponseTopic
	out.CorrelationData = in.CorrelationData
	out.UserProperties = in.UserProperties
	if len(in.UserProperties) > 0 {
		out.Set(packet.PropUserProperty)
	}
	return out
}
