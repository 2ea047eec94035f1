package bridge

// Design note: inbound QoS 2 (in rules), exactly once across restarts.
// The cloud broker re-sends a QoS 2 PUBLISH under its packet id until the
// bridge answers PUBREC, also after edgegw restarted; a resend must be
// answered, not delivered again. The ids the bridge has answered and not
// seen PUBREL for are therefore kept by the gateway, in the same state
// store record as the message's local routing (gateway.PublishExactlyOnce;
// gateway/exactlyonce.go says why there and not in the spool): the PUBREC
// goes out only once both are kept, a resend of a kept id is answered
// without routing, and the id is forgotten on PUBREL, durably, before the
// PUBCOMP (gateway.Release). When the cloud broker answers a connect with
// session present 0 it has forgotten every flow, so the bridge forgets
// every id too before it reads the connection's first PUBLISH.
//
// Over MQTT 3.1.1 paho answers PUBREL with PUBCOMP itself, after putting
// the PUBREL in its Store: uplinkStore.Put releases the id there (a
// Store may block; paho's FileStore writes in Put). Over MQTT 5 the
// bridge's session answers it (session5.PacketReceived).

import (
	"github.com/eclipse/paho.golang/paho"
	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgegw/edgegw/gateway"
)

// exactlyOnce is what a Gateway offers to keep inbound QoS 2 ids with the
// routing of their messages (gateway.Server has it). A Gateway without it
// gets every inbound message through Publish (no ids kept).
type exactlyOnce interface {
	PublishExactlyOnce(origin string, id uint16, m *gateway.Message) (dup bool, err error)
	Release(origin string, id uint16) error
}

// initInbound connects the uplink sessions' inbound QoS 2 flows to the
// gateway (New).
func (b *Bridge) initInbound() {
	b.store.releaseIn = b.releaseInbound
	b.sess5.releaseIn = b.releaseInbound
}

// publishIn routes an inbound message received under packet id id; dup:
// a resend of a QoS 2 message already routed (answer it, count nothing).
// QoS 1 goes the same way: the gateway refuses QoS 1 and 2 once it is
// stopping (its sessions take no more messages), so they are not acked.
func (b *Bridge) publishIn(id uint16, m *gateway.Message) (dup bool, err error) {
	if eo, ok := b.gw.(exactlyOnce); ok && m.QoS > 0 {
		return eo.PublishExactlyOnce(b.origin, id, m)
	}
	return false, b.gw.Publish(m)
}

// releaseInbound forgets inbound QoS 2 id (PUBREL), or every id (0: the
// cloud broker has no session), and returns once that is kept.
func (b *Bridge) releaseInbound(id uint16) {
	eo, ok := b.gw.(exactlyOnce)
	if !ok {
		return
	}
	if err := eo.Release(b.origin, id); err != nil {
		// The state store failed (a failed fsync) or closed: the id may
		// still be on disk, and a restart would answer a new message
		// under it without delivering it.
		b.log.Error("inbound QoS 2 packet id not released durably", "id", id, "err", err)
	}
}

// inbound is paho's handler for every message from upstream (called in
// order on paho's router goroutine). The upstream ack is sent only after
// the gateway took the message; a refused message stays unacknowledged
// and a persistent upstream session redelivers it after a reconnect.
func (b *Bridge) inbound(_ mqtt.Client, m mqtt.Message) {
	local, ok := b.c.Load().inTopic(m.Topic())
	if !ok {
		b.log.Warn("inbound message matches no in rule; dropped", "topic", m.Topic())
		m.Ack()
		return
	}
	dup, err := b.publishIn(m.MessageID(), &gateway.Message{
		Topic: local, Payload: m.Payload(), QoS: m.Qos(), Retain: m.Retained(), Origin: b.origin,
	})
	if err != nil {
		b.inboundFailed.Add(1)
		b.log.Warn("inbound message refused locally; not acked upstream", "topic", local, "err", err)
		return
	}
	m.Ack()
	if !dup {
		b.received.Add(1)
	}
}

// inbound5 is paho's handler for every message from upstream (in order,
// on paho's router goroutine); paho acknowledges it afterwards through
// the session, unless the gateway refused it (see inbound).
func (b *Bridge) inbound5(pr paho.PublishReceived) (bool, error) {
	p := pr.Packet
	local, ok := b.c.Load().inTopic(p.Topic)
	if !ok {
		b.log.Warn("inbound message matches no in rule; dropped", "topic", p.Topic)
		return true, nil
	}
	dup, err := b.publishIn(p.PacketID, &gateway.Message{
		Topic: local, Payload: p.Payload, QoS: p.QoS, Retain: p.Retain, Origin: b.origin,
	})
	if err != nil {
		b.inboundFailed.Add(1)
		if p.QoS > 0 {
			b.sess5.refuseInbound(p.PacketID)
		}
		b.log.Warn("inbound message refused locally; not acked upstream", "topic", local, "err", err)
		return true, nil
	}
	if !dup {
		b.received.Add(1)
	}
	return true, nil
}
