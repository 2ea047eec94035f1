package gateway

// handle dispatches every packet read after CONNECT. The acknowledgements
// (PUBACK, PUBREC, PUBCOMP of outgoing messages, PUBREL of incoming ones)
// and PINGREQ are answered here; PUBLISH, SUBSCRIBE, UNSUBSCRIBE and
// DISCONNECT have their own files.

import (
	"log/slog"

	"github.com/edgegw/edgegw/gateway/packet"
)

func (c *client) handle(pk packet.Packet) error {
	switch p := pk.(type) {
	case *packet.Publish:
		return c.handlePublish(p)
	case *packet.Puback:
		return c.acked(c.sess.ackPuback(c, p.PacketID), "PUBACK", p.PacketID)
	case *packet.Pubrec:
		v, sendRel, found, pos := c.sess.ackPubrec(c, p.PacketID, p.ReasonCode)
		if sendRel {
			code := packet.Success
			if !found && c.version == packet.V5 {
				code = packet.PacketIDNotFound
			}
			c.sendRel(c.sess, p.PacketID, code, pos)
		}
		return c.acked(v, "PUBREC", p.PacketID)
	case *packet.Pubrel:
		found, pos, owner := c.sess.forgetQoS2(c, p.PacketID)
		if !owner {
			return c.lostSession() // no PUBCOMP: the session may still hold the id
		}
		code := packet.Success
		if !found && c.version == packet.V5 {
			code = packet.PacketIDNotFound
		}
		if found {
			c.in.done() // before the PUBCOMP can reach the client (see ackID)
		}
		if pos > 0 {
			// After PUBCOMP the publisher may reuse the id for a new
			// message; a restart must not find the old id and take the
			// new message for a duplicate (persist.go).
			id := p.PacketID // p is the reader's scratch
			c.srv.state.WhenDurable(pos, func(error) { c.sendAckFlush(packet.PUBCOMP, id, code) })
		} else {
			c.sendAck(packet.PUBCOMP, p.PacketID, code)
		}
	case *packet.Pubcomp:
		return c.acked(c.sess.ackPubcomp(c, p.PacketID), "PUBCOMP", p.PacketID)
	case *packet.Subscribe:
		return c.handleSubscribe(p)
	case *packet.Unsubscribe:
		return c.handleUnsubscribe(p)
	case *packet.Pingreq:
		c.sendCtrl(&packet.Pingresp{})
	case *packet.Disconnect:
		return c.handleDisconnect(p)
	case *packet.Connect:
		return c.protocolError(packet.ProtocolError, "second CONNECT") // [MQTT-3.1.0-2]
	case *packet.Auth:
		return c.protocolError(packet.ProtocolError, "AUTH without an authentication method")
	default:
		return c.protocolError(packet.ProtocolError, "%T is not sent by clients", pk)
	}
	return nil
}

// acked acts on what an acknowledgement did: a moved window wakes the
// writer; the wrong kind of acknowledgement for a flow (PUBREC or PUBCOMP
// for QoS 1, PUBACK for QoS 2, PUBCOMP before PUBREC) is a protocol error:
// each flow waits for its own [MQTT-4.3.2-3], [MQTT-4.3.3-3], [MQTT-4.3.3-5]
// ([MQTT-4.3.2-1](3.1.1), [MQTT-4.3.3-1](3.1.1)); 3.1.1 has no reason
// codes, so it is closed.
// Counted with the protocol_error close reason.
func (c *client) acked(v ackVerdict, kind string, id uint16) error {
	switch v {
	case ackMoved:
		c.kick()
	case ackWrongKind:
		return c.protocolError(packet.ProtocolError, "%s for packet id %d is the wrong acknowledgement for its flow", kind, id)
	}
	return nil
}

// protocolError ends the connection for a violation found while handling.
func (c *client) protocolError(code packet.ReasonCode, format string, args ...any) error {
	err := packet.Errorf(code, format, args...)
	c.logf(slog.LevelInfo, "protocol error", "err", err)
	c.closeWith(CloseProtocolError, code)
	return err
}

// lostSession is a packet that needs the session, read after another
// connection took it: only a takeover moves a session away from a live
// connection, and the takeover closes this one (after shutting its read
// side, on TCP: drainForTakeover). Until then the packet is dropped
// unanswered (the client repeats it on its new connection) and reading goes
// on, so a DISCONNECT behind it is still seen and the will not published.
// The takeover may not have reached drainForTakeover yet when this runs.
func (c *client) lostSession() error { return nil }

// relSlot is a PUBREL waiting for the state record of its PUBREC.
type relSlot struct {
	id   uint16
	code packet.ReasonCode
	done bool
}

// sendRel queues the PUBREL of sess's id once the record at pos (its
// PUBREC: only the PUBREL is due) is kept, behind every PUBREL before it
// on c: PUBRELs go in the order of their PUBRECs [MQTT-4.6.0-3]. After
// the PUBREL the receiver may complete and forget the id; a restart that
// still found the message unreleased would send the PUBLISH again, and
// the receiver would take it for a new one. Without a state store it is
// queued at once. relQueued tells the drain once it is (drain.go).
func (c *client) sendRel(sess *session, id uint16, code packet.ReasonCode, pos uint64) {
	if c.srv.state == nil {
		c.sendAck(packet.PUBREL, id, code)
		sess.relQueued()
		return
	}
	r := &relSlot{id: id, code: code}
	c.amu.Lock()
	c.rels = append(c.rels, r)
	c.amu.Unlock()
	// Not kept (a failed store): sent all the same, as a PUBCOMP is;
	// withholding it would stall the flow for the whole connection.
	c.srv.state.WhenDurable(pos, func(error) { c.relDone(sess, r) })
}

// relDone queues every PUBREL at the head of c's line that is now kept.
// Called on the reader or the store's flusher, with no gateway lock held.
func (c *client) relDone(sess *session, r *relSlot) {
	c.wmu.Lock()
	c.verdicts++
	c.wmu.Unlock()
	c.amu.Lock()
	r.done = true
	n := 0
	for n < len(c.rels) && c.rels[n].done {
		c.sendAck(packet.PUBREL, c.rels[n].id, c.rels[n].code)
		c.rels[n] = nil
		n++
	}
	c.rels = c.rels[n:]
	if len(c.rels) == 0 {
		c.rels = nil
	}
	c.amu.Unlock()
	for range n {
		sess.relQueued()
	}
	c.wmu.Lock()
	c.verdicts--
	held := c.held
	c.wmu.Unlock()
	if !held {
		c.flushInline()
	}
}
