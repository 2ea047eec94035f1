package store

import (
	"slices"
	"time"
)

// Msg is an application message as the store keeps it. Payload and Props
// are kept by reference (the gateway's messages are immutable).
type Msg struct {
	Topic   string
	Payload []byte
	QoS     byte
	Retain  bool
	Expiry  time.Time // zero: never
	Origin  string
	Props   []byte // the gateway's encoding of pass-through v5 properties; opaque here
}

// Sub is one subscription of a session, filter as the client sent it
// ($share/<group>/ included).
type Sub struct {
	Filter            string
	QoS               byte
	NoLocal           bool
	RetainAsPublished bool
	RetainHandling    byte
	SubID             uint32
}

// SessionMeta is a persistent session's own state.
type SessionMeta struct {
	Expiry         time.Duration // session expiry interval (> 0)
	DisconnectedAt int64         // unix ns when it went offline; 0 while connected
	Will           *Msg          // delayed will not yet published, nil if none
	WillAt         int64         // unix ns when Will is due
	// Owner is the user name of the client that created the session (""
	// = anonymous): only that user may resume it (docs/security.md).
	Owner string
	// OwnerKnown is false for a record written before owners were kept
	// (the trailing owner field is absent); the gateway then lets the
	// first user that resumes the session own it.
	OwnerKnown bool
}

// Entry is one message queued or in flight for a session.
type Entry struct {
	Seq      uint64 // store-wide, increasing: queue order
	Msg      Msg    // Payload is nil once Released
	QoS      byte   // granted QoS (1 or 2)
	Retain   bool   // retain flag as it goes on the wire
	SubIDs   []uint32
	PID      uint16 // packet id once sent (QoS 2), 0 before
	Released bool   // QoS 2: PUBREC received, PUBREL due
}

// Session is one persistent session as loaded.
type Session struct {
	ID      string
	Meta    SessionMeta
	HasMeta bool // false if only records of its parts survived
	Subs    []Sub
	Queue   []Entry  // by Seq
	InQoS2  []uint16 // inbound QoS 2 packet ids awaiting PUBREL
}

// State is everything Open found.
type State struct {
	Retained []Msg
	Sessions []Session
	// Origins holds, by origin (a bridge), the inbound QoS 2 packet ids
	// whose message was routed and whose PUBREL has not come (Begin).
	Origins map[string][]uint16
}

// model is the live state: what a snapshot holds. Every item remembers the
// size of its snapshot record, so live (the snapshot's size) is known
// without encoding it.
type model struct {
	retained map[string]*sizedMsg
	sessions map[string]*msess
	live     int64
	maxSeq   uint64
	origins  map[string]map[uint16]struct{} // Begin's packet ids by origin
}

type sizedMsg struct {
	m    Msg
	size int
}

type msess struct {
	meta     SessionMeta
	hasMeta  bool
	metaSize int
	subs     map[string]Sub
	queue    map[uint64]*mentry
	inq2     map[uint16]struct{}
}

type mentry struct {
	e    Entry
	size int
}

func newModel() *model {
	return &model{retained: make(map[string]*sizedMsg), sessions: make(map[string]*msess)}
}

// Snapshot record sizes.
func frameSize(body int) int { return recHeaderSize + body }

func sessHead(client string) int { return 1 + 2 + len(client) }

func metaSize(client string, m *SessionMeta) int {
	n := sessHead(client) + 25
	if m.OwnerKnown { // format.go: an unknown owner is not written
		n += 2 + len(m.Owner)
	}
	if m.Will != nil {
		n += msgSize(m.Will)
	}
	return frameSize(n)
}

func subSize(client string, s *Sub) int { return frameSize(sessHead(client) + 2 + len(s.Filter) + 6) }

func entrySize(client string, e *Entry) int {
	return frameSize(sessHead(client) + 8 + 2 + 2 + 2 + 4*len(e.SubIDs) + msgSize(&e.Msg))
}

func inq2Size(client string) int { return frameSize(sessHead(client) + 2) }

// originIDSize is the snapshot record of one origin's id: a group with no
// records.
func originIDSize(origin string) int { return frameSize(1 + 2 + len(origin) + 2 + 4) }

// applyOrigin adds origin's packet id pid (0: none).
func (md *model) applyOrigin(origin string, pid uint16) {
	if pid == 0 {
		return
	}
	if md.origins == nil {
		md.origins = make(map[string]map[uint16]struct{})
	}
	ids := md.origins[origin]
	if ids == nil {
		ids = make(map[uint16]struct{})
		md.origins[origin] = ids
	}
	if _, ok := ids[pid]; !ok {
		ids[pid] = struct{}{}
		md.live += int64(originIDSize(origin))
	}
}

// dropOrigin removes origin's packet id pid, or all of origin's (0).
func (md *model) dropOrigin(origin string, pid uint16) {
	ids := md.origins[origin]
	if pid == 0 {
		md.live -= int64(len(ids) * originIDSize(origin))
		delete(md.origins, origin)
		return
	}
	if _, ok := ids[pid]; ok {
		delete(ids, pid)
		md.live -= int64(originIDSize(origin))
		if len(ids) == 0 {
			delete(md.origins, origin)
		}
	}
}

func (md *model) sess(client string) *msess {
	s := md.sessions[client]
	if s == nil {
		s = &msess{subs: make(map[string]Sub), queue: make(map[uint64]*mentry)}
		md.sessions[client] = s
	}
	return s
}

// apply changes the model by one record. It is used while appending and
// while loading, so a log replays to exactly the state that wrote it.
func (md *model) apply(r *rec) {
	switch r.op {
	case opRetainSet:
		md.dropRetained(r.msg.Topic)
		sz := frameSize(1 + msgSize(&r.msg))
		md.retained[r.msg.Topic] = &sizedMsg{m: r.msg, size: sz}
		md.live += int64(sz)
		return
	case opRetainDel:
		md.dropRetained(r.topic)
		return
	case opGroup: // read back: the records, then the id they routed
		for i := range r.group {
			md.apply(&r.group[i])
		}
		md.applyOrigin(r.origin, r.pid)
		return
	case opOriginDel:
		md.dropOrigin(r.origin, r.pid)
		return
	case opSessionDel:
		s := md.sessions[r.client]
		if s == nil {
			return
		}
		md.live -= int64(s.metaSize)
		for _, sub := range s.subs {
			md.live -= int64(subSize(r.client, &sub))
		}
		for _, e := range s.queue {
			md.live -= int64(e.size)
		}
		md.live -= int64(len(s.inq2) * inq2Size(r.client))
		delete(md.sessions, r.client)
		return
	}
	s := md.sess(r.client)
	switch r.op {
	case opSessionPut:
		md.live -= int64(s.metaSize)
		s.meta, s.hasMeta = r.meta, true
		s.metaSize = metaSize(r.client, &s.meta)
		md.live += int64(s.metaSize)
	case opSubPut:
		if old, ok := s.subs[r.sub.Filter]; ok {
			md.live -= int64(subSize(r.client, &old))
		}
		s.subs[r.sub.Filter] = r.sub
		md.live += int64(subSize(r.client, &r.sub))
	case opSubDel:
		if old, ok := s.subs[r.topic]; ok {
			md.live -= int64(subSize(r.client, &old))
			delete(s.subs, r.topic)
		}
	case opQAdd:
		if old := s.queue[r.seq]; old != nil {
			md.live -= int64(old.size)
		}
		e := &mentry{e: Entry{Seq: r.seq, Msg: r.msg, QoS: r.qos, Retain: r.retain, SubIDs: r.subIDs, PID: r.pid, Released: r.released}}
		e.size = entrySize(r.client, &e.e)
		s.queue[r.seq] = e
		md.live += int64(e.size)
		md.maxSeq = max(md.maxSeq, r.seq)
	case opQDel:
		if e := s.queue[r.seq]; e != nil {
			md.live -= int64(e.size)
			delete(s.queue, r.seq)
		}
	case opQSent:
		if e := s.queue[r.seq]; e != nil {
			e.e.PID = r.pid
		}
	case opQReleased:
		if e := s.queue[r.seq]; e != nil && e.e.PID != 0 && e.e.QoS == 2 {
			md.live -= int64(e.size)
			e.e.Released = true
			e.e.Msg.Payload = nil // no longer needed after PUBREC (5.0 §4.3.3): only the id is kept
			e.size = entrySize(r.client, &e.e)
			md.live += int64(e.size)
		}
	case opInQoS2:
		if s.inq2 == nil {
			s.inq2 = make(map[uint16]struct{})
		}
		if _, ok := s.inq2[r.pid]; !ok {
			s.inq2[r.pid] = struct{}{}
			md.live += int64(inq2Size(r.client))
		}
	case opInQoS2Del:
		if _, ok := s.inq2[r.pid]; ok {
			delete(s.inq2, r.pid)
			md.live -= int64(inq2Size(r.client))
		}
	}
}

func (md *model) dropRetained(topic string) {
	if old := md.retained[topic]; old != nil {
		md.live -= int64(old.size)
		delete(md.retained, topic)
	}
}

// snapshot encodes the whole live state as a file: header and one record
// per item, sessions' own records first.
func (md *model) snapshot() []byte {
	b := make([]byte, 0, headerSize+int(md.live))
	b = append(b, fileHeader()...)
	for _, m := range md.retained {
		b = appendRec(b, &rec{op: opRetainSet, msg: m.m})
	}
	for id, s := range md.sessions {
		if s.hasMeta {
			b = appendRec(b, &rec{op: opSessionPut, client: id, meta: s.meta})
		}
		for _, sub := range s.subs {
			b = appendRec(b, &rec{op: opSubPut, client: id, sub: sub})
		}
		for _, e := range s.queue {
			b = appendRec(b, entryRec(id, &e.e))
		}
		for pid := range s.inq2 {
			b = appendRec(b, &rec{op: opInQoS2, client: id, pid: pid})
		}
	}
	for origin, ids := range md.origins {
		for pid := range ids {
			b = appendRec(b, &rec{op: opGroup, origin: origin, pid: pid})
		}
	}
	return b
}

func entryRec(client string, e *Entry) *rec {
	return &rec{op: opQAdd, client: client, seq: e.Seq, qos: e.QoS, retain: e.Retain,
		released: e.Released, pid: e.PID, subIDs: e.SubIDs, msg: e.Msg}
}

// state returns the model as the gateway restores it.
func (md *model) state() *State {
	st := &State{}
	for _, m := range md.retained {
		st.Retained = append(st.Retained, m.m)
	}
	slices.SortFunc(st.Retained, func(a, b Msg) int { return cmpStr(a.Topic, b.Topic) })
	for id, s := range md.sessions {
		ss := Session{ID: id, Meta: s.meta, HasMeta: s.hasMeta}
		for _, sub := range s.subs {
			ss.Subs = append(ss.Subs, sub)
		}
		slices.SortFunc(ss.Subs, func(a, b Sub) int { return cmpStr(a.Filter, b.Filter) })
		for _, e := range s.queue {
			ss.Queue = append(ss.Queue, e.e)
		}
		slices.SortFunc(ss.Queue, func(a, b Entry) int { return cmpU64(a.Seq, b.Seq) })
		for pid := range s.inq2 {
			ss.InQoS2 = append(ss.InQoS2, pid)
		}
		slices.Sort(ss.InQoS2)
		st.Sessions = append(st.Sessions, ss)
	}
	slices.SortFunc(st.Sessions, func(a, b Session) int { return cmpStr(a.ID, b.ID) })
	for origin, ids := range md.origins {
		if st.Origins == nil {
			st.Origins = make(map[string][]uint16)
		}
		l := make([]uint16, 0, len(ids))
		for pid := range ids {
			l = append(l, pid)
		}
		slices.Sort(l)
		st.Origins[origin] = l
	}
	return st
}

func cmpStr(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
