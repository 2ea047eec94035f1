package session

// The link's reader: every packet from the peer is handled here, in the
// order read. Acks end outbound flows (acknowledgedUpstream); PUBRECs are
// gathered while more packets are already buffered, made durable in one
// Store call and then answered with PUBRELs; inbound publishes are routed
// and acknowledged.

import (
	"fmt"

	"github.com/edgegw/edgegw/gateway/packet"
)

// maxReleaseBatch bounds the PUBRECs made durable in one Store call.
const maxReleaseBatch = 1024

func (l *Link) readLoop() {
	defer l.endRequests()
	for {
		p, err := l.c.Read()
		if err != nil {
			l.endLink(err)
			return
		}
		if err := l.handle(p); err != nil {
			l.c.Abort(err)
			return
		}
		if _, ok := p.(*packet.Pubcomp); ok {
			if err := l.sendHeld(); err != nil {
				l.c.Abort(err)
				return
			}
		}
		if len(l.release) > 0 && (l.c.Buffered() == 0 || len(l.release) >= maxReleaseBatch) {
			if err := l.releaseFlows(); err != nil {
				l.c.Abort(err)
				return
			}
		}
	}
}

// endRequests fails the requests waiting for an answer: the link ended.
func (l *Link) endRequests() {
	e := l.e
	e.mu.Lock()
	defer e.mu.Unlock()
	for id, r := range e.reqs {
		delete(e.reqs, id)
		close(r.done) // answer nil: the requester sees the link's Done first or an empty answer
	}
	e.changedLocked()
}

func (l *Link) handle(p packet.Packet) error {
	e := l.e
	v5 := e.cfg.Version == packet.V5
	switch p := p.(type) {
	case *packet.Puback:
		if f := e.flow(p.PacketID, 1); f != nil {
			e.acknowledgedUpstream(f, byte(p.ReasonCode))
		}
	case *packet.Pubrec:
		f := e.flow(p.PacketID, 2)
		switch {
		case f == nil:
			// An id the engine has no flow for (a late duplicate, or a
			// flow whose Sent record a crash lost): release it so the
			// peer can forget it (MQTT 5: 0x92 packet identifier not found).
			if !p.ReasonCode.IsError() {
				rel := &packet.Pubrel{PacketID: p.PacketID}
				if v5 {
					rel.ReasonCode = packet.ReasonCode(0x92)
				}
				return l.c.SendControl(rel)
			}
		case p.ReasonCode.IsError(): // refused: the flow ends here, no PUBREL [MQTT-4.3.3-4]
			e.acknowledgedUpstream(f, byte(p.ReasonCode))
		default:
			e.mu.Lock()
			rel := f.released
			e.mu.Unlock()
			if rel { // a duplicate PUBREC: the PUBREL again
				return l.c.SendControl(&packet.Pubrel{PacketID: f.ID})
			}
			l.recs++
			l.release = append(l.release, f)
		}
	case *packet.Pubcomp:
		// PUBCOMP's codes are success and 0x92 (the peer had released the
		// id already): either way the message was taken at its PUBREC.
		if f := e.flow(p.PacketID, 2); f != nil {
			e.mu.Lock()
			rel := f.released
			e.mu.Unlock()
			if rel {
				e.acknowledgedUpstream(f, 0)
			}
		}
	case *packet.Suback:
		e.answer(p.PacketID, p)
	case *packet.Unsuback:
		e.answer(p.PacketID, p)
	case *packet.Publish:
		return l.inbound(p)
	case *packet.Pubrel:
		return l.inboundRelease(p.PacketID)
	case *packet.Pingresp:
	case *packet.Disconnect:
		return &DisconnectError{Code: byte(p.ReasonCode)}
	default:
		return fmt.Errorf("unexpected %s from upstream", p.Type())
	}
	return nil
}

// flow returns the flow of packet id at qos, or nil.
func (e *Engine) flow(id uint16, qos byte) *Flow {
	e.mu.Lock()
	defer e.mu.Unlock()
	if f := e.byID[id]; f != nil && f.QoS == qos {
		return f
	}
	return nil
}

// answer hands a SUBACK/UNSUBACK to its request.
func (e *Engine) answer(id uint16, p packet.Packet) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if r := e.reqs[id]; r != nil {
		delete(e.reqs, id)
		r.answer = p
		close(r.done)
		e.changedLocked()
	}
}

// releaseFlows makes the gathered PUBRECs durable, then writes their
// PUBRELs: after a crash the flow is re-sent as PUBREL, never as a
// PUBLISH the peer would take for a new message.
func (l *Link) releaseFlows() error {
	e := l.e
	recs := make([]uint64, len(l.release))
	for i, f := range l.release {
		recs[i] = f.Rec
	}
	if err := e.store.Released(recs); err != nil {
		return fmt.Errorf("store PUBREC: %w", err)
	}
	e.mu.Lock()
	for _, f := range l.release {
		f.released = true
	}
	e.mu.Unlock()
	for _, f := range l.release {
		if err := l.c.SendControl(&packet.Pubrel{PacketID: f.ID}); err != nil {
			return err
		}
	}
	clear(l.release)
	l.release = l.release[:0]
	return nil
}

// inbound routes a message from the peer and acknowledges it. A QoS 2
// resend of an id the Inbound function kept is answered, never routed
// twice [MQTT-4.3.3-10]; a message Inbound refuses is not acknowledged
// (a persistent session re-delivers it).
func (l *Link) inbound(p *packet.Publish) error {
	e := l.e
	if e.cfg.Inbound != nil {
		if _, err := e.cfg.Inbound(p); err != nil {
			return nil
		}
	}
	switch p.QoS {
	case 1:
		return l.c.SendControl(&packet.Puback{PacketID: p.PacketID})
	case 2:
		return l.c.SendControl(&packet.Pubrec{PacketID: p.PacketID})
	}
	return nil
}

// inboundRelease forgets inbound id (durably, Config.Release) and
// completes it.
func (l *Link) inboundRelease(id uint16) error {
	if rel := l.e.cfg.Release; rel != nil {
		if err := rel(id); err != nil {
			return fmt.Errorf("release inbound id %d: %w", id, err)
		}
	}
	return l.c.SendControl(&packet.Pubcomp{PacketID: id})
}
