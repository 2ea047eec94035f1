package gateway

// Hooks that keep the broker state in a store.Store (persistence.dir) and
// restore it at start. Every hook is a no-op without a store
// (Options.Store nil: all state in memory, as before) and for sessions
// that are not persistent (session expiry 0): a clean session never
// reaches the disk.
//
// What is written, from where (all under the locks the caller already
// holds; the store only encodes into memory, its flusher does the I/O):
//
//	retained set / cleared            Server.retain (not $SYS topics: regenerated at start)
//	session created / resumed / left  registry.attach, registry.detach, expire, fireWill
//	subscribe / unsubscribe           session.subscribe, session.unsubscribe
//	QoS 1/2 message queued            session.deliver (queued.seq names it)
//	... sent (QoS 2 packet id)        session.takeSendable
//	... PUBREC (payload dropped)      session.ackPubrec
//	... acknowledged / dropped        session.unstore
//	inbound QoS 2 id until PUBREL     session.receiveQoS2, qos2Verdict, forgetQoS2
//
// Acknowledgements wait for the records they promise (routeKept): a
// publisher's PUBACK/PUBREC is sent after the records of its message (the
// queued copies for persistent sessions, the retained message, the
// inbound QoS 2 id) are kept per persistence.sync; SUBACK after its
// subscriptions are.

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/gateway/store"
)

// waitState makes the acknowledgement of a QoS 1/2 message wait for the
// state records written for it: through the publisher's deferred ack when
// it has one, else (Server.Publish: a bridge's inbound message, a will) by
// blocking until they are kept, so the caller acknowledges upstream only
// then.
func (s *Server) waitState(m *Message, h *keeper) error {
	if h.pos == 0 || m.QoS == 0 {
		return nil
	}
	if k := h.get(); k != nil {
		k.left.Add(1)
		hd := h.hold
		hd.add()
		s.state.WhenDurable(h.pos, func(err error) {
			hd.done(err, nil) // the copies go, or are taken back, before the ack
			k.finish("state", err)
		})
		return nil
	}
	if err := s.state.Wait(h.pos); err != nil {
		return fmt.Errorf("state store: %w", err)
	}
	return nil
}

// persistRetain records a retained change; it returns the record's
// position (0 when nothing was written).
func (s *Server) persistRetain(m *Message) uint64 {
	if s.state == nil || isSys(m.Topic) {
		return 0
	}
	if len(m.Payload) == 0 {
		return s.state.RetainDel(m.Topic)
	}
	return s.state.RetainSet(toStore(m))
}

// persistQueued records a QoS 1/2 message queued for a persistent session
// and sets q.seq. Caller holds s.mu.
func (s *session) persistQueued(q *queued, h *keeper) {
	if !s.persisted || q.qos == 0 {
		return
	}
	var pos uint64
	q.seq, pos = s.srv.state.QAdd(s.id, store.Entry{Msg: toStore(q.msg), QoS: q.qos, Retain: q.retain, SubIDs: q.subIDs})
	if h != nil {
		h.pos = max(h.pos, pos)
	}
}

// unstore records that a queued or in-flight message left the session
// (acknowledged, dropped or expired). Caller holds s.mu.
func (s *session) unstore(q queued) {
	if s.persisted && q.seq != 0 {
		s.srv.state.QDel(s.id, q.seq)
	}
}

// persistSent records the packet id a QoS 2 message went out with, so a
// restart resends it with the same id. Caller holds s.mu.
func (s *session) persistSent(q queued, id uint16) {
	if s.persisted && q.seq != 0 && q.qos == 2 {
		s.srv.state.QSent(s.id, q.seq, id)
	}
}

// persistReleased records PUBREC: only the PUBREL is due. It returns the
// record's position (0 when nothing was written). Caller holds s.mu.
func (s *session) persistReleased(q queued) uint64 {
	if s.persisted && q.seq != 0 && q.qos == 2 {
		return s.srv.state.QReleased(s.id, q.seq)
	}
	return 0
}

// persistSub records a subscription; 0 when nothing was written. Caller
// holds s.mu.
func (s *session) persistSub(filter string, sub subscription) uint64 {
	if !s.persisted {
		return 0
	}
	return s.srv.state.SubPut(s.id, store.Sub{Filter: filter, QoS: sub.qos, NoLocal: sub.noLocal,
		RetainAsPublished: sub.rap, RetainHandling: sub.rh, SubID: sub.subID})
}

// persistUnsub records an unsubscribe. Caller holds s.mu.
func (s *session) persistUnsub(filter string) {
	if s.persisted {
		s.srv.state.SubDel(s.id, filter)
	}
}

// persistInQoS2 records an inbound QoS 2 packet id awaiting PUBREL (set) or
// its end. Caller holds s.mu.
func (s *session) persistInQoS2(id uint16, set bool) uint64 {
	switch {
	case !s.persisted:
		return 0
	case set:
		return s.srv.state.InQoS2(s.id, id)
	}
	return s.srv.state.InQoS2Del(s.id, id)
}

// persistMeta records the session's own state: its expiry, when it went
// offline (zero time: connected) and a delayed will. Caller holds s.mu.
func (s *session) persistMeta(offline time.Time) {
	if !s.persisted {
		return
	}
	m := store.SessionMeta{Expiry: s.expiry, Owner: s.owner}
	if !offline.IsZero() {
		m.DisconnectedAt = offline.UnixNano()
	}
	if s.will != nil {
		w := toStore(s.will)
		m.Will, m.WillAt = &w, s.willAt.UnixNano()
	}
	s.srv.state.SessionPut(s.id, m)
}

// persistAttached makes the disk follow a session a connection just got:
// a persistent one is written (whole, if it was not on disk yet: a clean
// session taken over by a persistent one), one that stopped being
// persistent is removed. Caller holds s.mu.
func (s *session) persistAttached() {
	if s.srv.state == nil {
		return
	}
	if s.expiry == 0 {
		s.unpersist()
		return
	}
	if s.persisted {
		s.persistMeta(time.Time{})
		return
	}
	s.persisted = true
	s.persistMeta(time.Time{})
	for _, it := range s.subs.items {
		if sub, ok := s.srv.subs.Get(treeFilter(it.filter), treeKey(s.id, it.group)); ok {
			s.persistSub(it.filter, sub)
		}
	}
	for _, id := range s.order {
		f := s.inflight[id]
		s.persistQueued(&f.q, nil)
		s.persistSent(f.q, id)
		if f.released {
			s.persistReleased(f.q)
		}
	}
	s.queue.each(func(q *queued) { s.persistQueued(q, nil) })
	for id, e := range s.inboundQoS2 {
		if e.kept {
			s.persistInQoS2(id, true)
		}
	}
}

// unpersist removes the session from the disk (clean start, expiry, a
// clean disconnect). Caller holds s.mu.
func (s *session) unpersist() {
	if !s.persisted {
		return
	}
	s.persisted = false
	s.srv.state.SessionDel(s.id)
	for _, f := range s.inflight {
		f.q.seq = 0
	}
	s.queue.each(func(q *queued) { q.seq = 0 })
}

// toStore converts a message for the store; the payload is shared.
func toStore(m *Message) store.Msg {
	return store.Msg{Topic: m.Topic, Payload: m.Payload, QoS: m.QoS, Retain: m.Retain,
		Expiry: m.Expiry, Origin: m.Origin, Props: encodeProps(m.Props)}
}

func fromStore(m *store.Msg) *Message {
	return &Message{Topic: m.Topic, Payload: m.Payload, QoS: m.QoS, Retain: m.Retain,
		Expiry: m.Expiry, Origin: m.Origin, Props: decodeProps(m.Props)}
}

// encodeProps stores the pass-through v5 properties: present bits (uint64) |
// payload format | content type | response topic | correlation data | user
// properties (count, key, value...), strings with a uint16 or uint32 length.
func encodeProps(p *packet.Properties) []byte {
	if p == nil {
		return nil
	}
	b := binary.LittleEndian.AppendUint64(nil, p.Present)
	b = append(b, p.PayloadFormat)
	b = appendStr16(b, p.ContentType)
	b = appendStr16(b, p.ResponseTopic)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(p.CorrelationData)))
	b = append(b, p.CorrelationData...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(p.UserProperties)))
	for _, u := range p.UserProperties {
		b = appendStr16(b, u.Key)
		b = appendStr16(b, u.Value)
	}
	return b
}

func appendStr16(b []byte, s string) []byte {
	b = binary.LittleEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

// decodeProps is the inverse of encodeProps; nil for anything malformed
// (the record's CRC held, so that is a bug, not damage: the message still
// goes out, without its properties).
func decodeProps(b []byte) *packet.Properties {
	if len(b) < 9 {
		return nil
	}
	p := &packet.Properties{Present: binary.LittleEndian.Uint64(b), PayloadFormat: b[8]}
	b = b[9:]
	ok := true
	take := func(n int) []byte {
		if !ok || n > len(b) {
			ok = false
			return nil
		}
		v := b[:n:n]
		b = b[n:]
		return v
	}
	str16 := func() string {
		l := take(2)
		if l == nil {
			return ""
		}
		return string(take(int(binary.LittleEndian.Uint16(l))))
	}
	u32 := func() int {
		l := take(4)
		if l == nil {
			return 0
		}
		return int(binary.LittleEndian.Uint32(l))
	}
	p.ContentType = str16()
	p.ResponseTopic = str16()
	if cd := take(u32()); len(cd) > 0 {
		p.CorrelationData = cd
	}
	n := u32()
	for i := 0; i < n && ok; i++ {
		k := str16()
		v := str16()
		p.UserProperties = append(p.UserProperties, packet.UserProperty{Key: k, Value: v})
	}
	if !ok {
		return nil
	}
	return p
}
