package gateway

// An incoming PUBLISH: the checks a publisher must pass (Receive Maximum,
// topic limits, topic aliases, $SYS, ACL), then routing with an
// acknowledgement that may wait (ack.go).

import (
	"log/slog"
	"strings"
	"time"

	"github.com/edgegw/edgegw/gateway/packet"
)

func (c *client) handlePublish(p *packet.Publish) error {
	o := &c.srv.opts
	if p.QoS > 0 && c.in.max > 0 && int(c.in.open.Load()) >= c.in.max && !(p.QoS == 2 && c.sess.hasInboundQoS2(p.PacketID)) {
		return c.protocolError(packet.ReceiveMaximumExceeded, "more than %d unacknowledged QoS 1/2 publishes", c.in.max) // [MQTT-3.3.4-7]
	}
	if p.QoS > 0 && c.in.max > 0 {
		// Opened before any answer can close it: a refused publish (topic
		// limits, $SYS, ACL) is acked too, and that ack closes this flow.
		c.in.open.Add(1)
	}
	if p.Topic != "" && !o.topicFits(p.Topic) {
		// Before a topic alias can keep it. Refused where the client
		// sees it: v5 QoS 1/2 PUBACK/PUBREC 0x90; v5 QoS 0 has no ack:
		// DISCONNECT 0x90; 3.1.1 has no negative ack: closed without one,
		// so a publisher does not take it for delivered.
		c.srv.stats.deny(deniedTopicLimit)
		levels, bytes := strings.Count(p.Topic, "/")+1, len(p.Topic)
		if c.version == packet.V5 && p.QoS > 0 {
			c.logf(slog.LevelDebug, "publish topic over the limits", "levels", levels, "bytes", bytes)
			return c.ack(p, packet.TopicNameInvalid)
		}
		c.logf(slog.LevelInfo, "publish topic over the limits; closing", "levels", levels, "bytes", bytes,
			"max_levels", o.MaxTopicLevels, "max_bytes", o.MaxTopicLength)
		c.closeWith(CloseTopicLimit, packet.TopicNameInvalid)
		return packet.Errorf(packet.TopicNameInvalid, "topic of %d levels, %d bytes: over the limits", levels, bytes)
	}
	if c.version == packet.V5 && p.Props.Has(packet.PropTopicAlias) {
		a := p.Props.TopicAlias
		if a == 0 || a > o.TopicAliasMaximum {
			return c.protocolError(packet.TopicAliasInvalid, "topic alias %d", a) // [MQTT-3.3.2-8], [MQTT-3.3.2-9]
		}
		if p.Topic == "" {
			t, ok := c.inAliases[a]
			if !ok {
				return c.protocolError(packet.ProtocolError, "unknown topic alias %d", a)
			}
			p.Topic = t
		} else {
			if c.inAliases == nil {
				c.inAliases = make(map[uint16]string)
			}
			c.inAliases[a] = strings.Clone(p.Topic) // p.Topic shares the payload's memory
		}
	}
	if p.Topic == "" {
		return c.protocolError(packet.TopicNameInvalid, "empty topic")
	}
	if strings.HasPrefix(p.Topic, "$") && !strings.HasPrefix(p.Topic, "$share/") {
		// Clients may not publish into the broker's own namespaces.
		if strings.HasPrefix(p.Topic, "$SYS") {
			c.srv.stats.deny(deniedPublish)
			return c.ack(p, packet.NotAuthorized)
		}
	}
	if az := o.Authorizer; az != nil && !az.CanPublish(c.username, c.id, p.Topic) {
		// v5: PUBACK/PUBREC 0x87; 3.1.1 has no negative ack: acknowledged
		// and dropped, as mosquitto does, and counted.
		c.srv.stats.deny(deniedPublish)
		c.logf(slog.LevelDebug, "publish not authorized", "topic", p.Topic)
		return c.ack(p, packet.NotAuthorized)
	}
	var m *Message
	if p.QoS > 0 {
		m = newHeldMessage() // with room for its hold (hold.go)
	} else {
		m = new(Message)
	}
	m.Topic = p.Topic
	m.Payload = p.Payload // the decoder gives each packet its own buffer
	m.QoS, m.Retain, m.Origin = p.QoS, p.Retain, c.id
	if c.version == packet.V5 {
		m.Props = passThrough(&p.Props)
		if p.Props.Has(packet.PropMessageExpiry) {
			m.Expiry = time.Now().Add(time.Duration(p.Props.MessageExpiry) * time.Second)
		}
	}
	if p.QoS == 0 {
		c.srv.routeVia(m, nil, c)
		return nil
	}
	c.pa = pendingAck{c: c, qos: p.QoS, id: p.PacketID, topic: p.Topic}
	if p.QoS == 2 {
		st, e := c.sess.receiveQoS2(c, p.PacketID)
		switch st {
		case qos2NotOwner:
			return c.lostSession() // no PUBREC: the client sends it again on its new connection
		case qos2Kept:
			// A duplicate: acknowledged again, never delivered twice
			// [MQTT-4.3.3-10], [MQTT-4.3.3-2](3.1.1); behind any acks still
			// waiting, to keep order.
			// Its flow was counted when it first came.
			c.in.done()
			if c.slotsPending() {
				c.slotDone(c.addSlot(p), nil)
				return nil
			}
			return c.ack(p, packet.Success)
		case qos2Pending:
			// A resend while the original's sinks have not decided: the
			// ack waits for the same verdict (principle 4).
			c.in.done() // counted with the original
			c.sess.waitQoS2(p.PacketID, e, c.pa.deferAck().slot.decide)
			return nil
		}
		c.pa.q2 = e // a new flow, open until its PUBCOMP
	}
	// The ack may have to wait: for a sink (a bridge's spool) to keep the
	// message, or for a congested subscriber to drain (flow control). Then
	// routing opens a slot through c.pa; the verdict arrives later and the
	// reader goes on.
	pending, matched, err := c.srv.routeKept(m, &c.pa)
	if pending {
		return nil
	}
	if p.QoS == 2 {
		c.sess.qos2Verdict(p.PacketID, c.pa.q2, err)
	}
	code := packet.Success
	if !matched {
		code = packet.NoMatchingSubscribers // v5: nobody listens (a success code; 3.1.1 gets 0)
	}
	if c.slotsPending() {
		s := c.addSlot(p)
		s.code = code
		c.slotDone(s, err) // behind earlier acks still waiting
		return nil
	}
	if err != nil {
		return c.notKept(p.QoS, p.PacketID, p.Topic, err)
	}
	return c.ack(p, code)
}
