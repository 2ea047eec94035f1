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
// The session engine (uplinkengine.go) reads the messages; the two
// functions it is given here route one (inbound) and forget an id
// (release) before its PUBCOMP.

import (
	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/packet"
)

// exactlyOnce is what a Gateway offers to keep inbound QoS 2 ids with the
// routing of their messages (gateway.Server has it). A Gateway without it
// gets every inbound message through Publish (no ids kept).
type exactlyOnce interface {
	PublishExactlyOnce(origin string, id uint16, m *gateway.Message) (dup bool, err error)
	Release(origin string, id uint16) error
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

// inbound routes a message from upstream (the engine's reader, in
// order): a QoS 1/2 one through the gateway, which keeps a QoS 2 id with
// the routing (publishIn); an error leaves it unacknowledged.
func (b *Bridge) inbound(p *packet.Publish) (bool, error) {
	local, ok := b.c.Load().inTopic(p.Topic)
	if !ok {
		b.log.Warn("inbound message matches no in rule; dropped", "topic", p.Topic)
		return false, nil
	}
	dup, err := b.publishIn(p.PacketID, &gateway.Message{
		Topic: local, Payload: p.Payload, QoS: p.QoS, Retain: p.Retain, Origin: b.origin,
	})
	if err != nil {
		b.inboundFailed.Add(1)
		b.log.Warn("inbound message refused locally; not acked upstream", "topic", local, "err", err)
		return false, err
	}
	if !dup {
		b.received.Add(1)
	}
	return dup, nil
}

// release forgets inbound QoS 2 id (0: every id) in the gateway,
// durably, before the engine's PUBCOMP.
func (b *Bridge) release(id uint16) error {
	if eo, ok := b.gw.(exactlyOnce); ok {
		return eo.Release(b.origin, id)
	}
	return nil
}
