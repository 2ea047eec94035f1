package gateway

// SUBSCRIBE and UNSUBSCRIBE from a client.

import (
	"log/slog"

	"github.com/edgegw/edgegw/gateway/packet"
)

func (c *client) handleSubscribe(p *packet.Subscribe) error {
	o := &c.srv.opts
	codes := make([]packet.ReasonCode, len(p.Subscriptions))
	type retainedSend struct {
		filter string
		sub    subscription
	}
	var sends []retainedSend
	var subID uint32
	var statePos uint64 // the SUBACK waits for the subscriptions' records
	if c.version == packet.V5 && len(p.Props.SubscriptionIDs) > 0 {
		subID = p.Props.SubscriptionIDs[0]
	}
	for i, rs := range p.Subscriptions {
		group, inner, shared := packet.SplitShared(rs.Filter)
		if shared && rs.NoLocal {
			return c.protocolError(packet.ProtocolError, "no local on a shared subscription") // [MQTT-3.8.3-4]
		}
		if !o.filterFits(rs.Filter, inner) {
			c.srv.stats.deny(deniedTopicLimit)
			codes[i] = packet.TopicFilterInvalid
			if c.version != packet.V5 {
				codes[i] = packet.V3SubackFailure
			}
			continue
		}
		if az := o.Authorizer; az != nil && !az.CanSubscribe(c.username, c.id, inner) {
			c.srv.stats.deny(deniedSubscribe)
			codes[i] = packet.NotAuthorized
			if c.version != packet.V5 {
				codes[i] = packet.V3SubackFailure
			}
			continue
		}
		room, exists := c.sess.roomFor(rs.Filter, o.MaxSubscriptions)
		if !room || (!exists && !c.srv.subscriptionFits(rs.Filter)) {
			c.srv.stats.deny(deniedSubscriptionLimit)
			codes[i] = packet.QuotaExceeded
			if c.version != packet.V5 {
				codes[i] = packet.V3SubackFailure
			}
			continue
		}
		qos := min(rs.QoS, 2)
		sub := subscription{sess: c.sess, qos: qos, noLocal: rs.NoLocal, rap: rs.RetainAsPublished,
			rh: rs.RetainHandling, subID: subID, group: group}
		existed, pos, ok := c.sess.subscribe(c, rs.Filter, inner, sub)
		if !ok {
			return c.lostSession()
		}
		statePos = max(statePos, pos)
		codes[i] = packet.ReasonCode(qos)
		// Retained messages: not for shared subscriptions; v5 retain
		// handling 1 = only if new, 2 = never [MQTT-3.3.1-9], [MQTT-3.3.1-10], [MQTT-3.3.1-11].
		if !shared && (rs.RetainHandling == 0 || (rs.RetainHandling == 1 && !existed)) {
			sends = append(sends, retainedSend{inner, sub})
		}
	}
	if statePos > 0 {
		// A SUBACK is a promise too; the wait (at most one sync window)
		// holds only this reader, with no lock held.
		if err := c.unheld(func() error { return c.srv.state.Wait(statePos) }); err != nil {
			// Not granted: what this SUBSCRIBE added is taken back, so
			// the client is not told of a subscription a restart loses.
			c.logf(slog.LevelWarn, "subscription not stored; refused", "err", err)
			for i, rs := range p.Subscriptions {
				if codes[i] < 0x80 {
					c.sess.unsubscribe(c, rs.Filter)
					codes[i] = packet.ImplementationSpecificError
					if c.version != packet.V5 {
						codes[i] = packet.V3SubackFailure
					}
				}
			}
			sends = nil
		}
	}
	// The SUBACK is queued, but the writer is only woken once the retained
	// messages are queued too: the writer sends the control lane first, so
	// the SUBACK leads, and a client that has seen its SUBACK gets the
	// retained messages before anything published after it.
	c.queueCtrlQuiet(ctrlItem{p: &packet.Suback{PacketID: p.PacketID, ReasonCodes: codes}})
	// The retained messages go to the session's feed, which queues them
	// as the queue drains (retained.go); authorization and expiry are
	// checked as each leaves the queue, as for live ones.
	if len(sends) > 0 {
		c.sess.startFeed()
	}
	for _, rs := range sends {
		b := retainedBatch{qos: rs.sub.qos}
		if rs.sub.subID != 0 {
			b.subIDs = []uint32{rs.sub.subID}
		}
		c.srv.retained.Match(rs.filter, func(_ string, m *Message) { b.msgs = append(b.msgs, m) })
		c.sess.addFeed(c, b)
	}
	if len(sends) > 0 {
		c.sess.feedNow()
	}
	c.kick()
	return nil
}

func (c *client) handleUnsubscribe(p *packet.Unsubscribe) error {
	codes := make([]packet.ReasonCode, len(p.Filters))
	for i, f := range p.Filters {
		found, ok := c.sess.unsubscribe(c, f)
		if !ok {
			return c.lostSession()
		}
		if !found {
			codes[i] = packet.NoSubscriptionExisted
		}
	}
	ack := &packet.Unsuback{PacketID: p.PacketID}
	if c.version == packet.V5 {
		ack.ReasonCodes = codes
	}
	c.sendCtrl(ack)
	return nil
}
