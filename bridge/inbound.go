package bridge

import (
	"github.com/eclipse/paho.golang/paho"
	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgegw/edgegw/gateway"
)

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
	err := b.gw.Publish(&gateway.Message{
		Topic: local, Payload: m.Payload(), QoS: m.Qos(), Retain: m.Retained(), Origin: b.origin,
	})
	if err != nil {
		b.inboundFailed.Add(1)
		b.log.Warn("inbound message refused locally; not acked upstream", "topic", local, "err", err)
		return
	}
	m.Ack()
	b.received.Add(1)
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
	err := b.gw.Publish(&gateway.Message{
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
	b.received.Add(1)
	return true, nil
}
