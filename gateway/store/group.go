package store

// Design note: an inbound QoS 2 packet id and the routing of its message
// in one record. A bridge receives QoS 2 messages from its cloud broker
// and answers each with PUBREC only once the message is routed locally;
// the cloud broker then sends PUBREL, and until then re-sends the PUBLISH
// after every reconnect, a restart of edgegw included. For the resend to
// be recognised, the packet id must be on disk; for the message to be
// neither lost nor delivered twice, the id must be on disk exactly when
// the records that routed the message are (the copies queued for
// persistent sessions, a retained message):
//
//   - the id kept without the routing: the resend is answered and not
//     delivered, and the message is lost;
//   - the routing kept without the id: the resend is delivered again.
//
// Separate records, even appended one after the other, do not give that:
// the flusher may write between them, a kill -9 can end a write part way,
// and a power cut can keep any of the pages not yet fsynced. One record,
// under one CRC, is read back whole or not at all. So Begin opens a group
// and every record appended while it is open (by whoever appends: the
// routing goroutine and the gateway's other goroutines alike, in the
// order they are appended) joins it; Commit writes them as one opGroup
// record with the origin and packet id. The records of other goroutines
// that land in a group are simply written later (when it commits) and
// still in the order they were appended, so a replay sees the same
// history. Groups are opened one at a time (groupMu); a group lasts as
// long as the routing of one message, which takes locks but does no I/O.
//
// Positions: Begin takes the next position, and every record appended
// to the group has that position, so waiting for any of them waits for
// the whole group. While the group is open the flusher writes only what
// was appended before it and does not compact: the model already holds
// the group's records, which must not reach the file before the group
// is whole.

// Group is an open group of records (Begin); Commit ends it.
type Group struct {
	s      *Store
	pos    uint64
	origin string
	pid    uint16
	recs   []rec
}

// Begin opens a group for origin's inbound QoS 2 packet id pid: every
// record appended to the store until Commit is written together with
// the id, in one record. It waits while another group is open. The
// caller must call Commit, and must not wait for a record's durability
// (Wait) in between: that record is written only after Commit.
func (s *Store) Begin(origin string, pid uint16) *Group {
	s.groupMu.Lock()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pos++
	g := &Group{s: s, pos: s.pos, origin: origin, pid: pid}
	s.grp = g
	return g
}

// Commit writes the group as one record and returns its position. With
// keep the group holds the packet id (OriginIDs lists it from now on);
// without, only the records appended while it was open (a message that
// was not routed whole keeps no id: its resend is routed again). A group
// that holds neither writes nothing.
func (g *Group) Commit(keep bool) uint64 {
	s := g.s
	defer s.groupMu.Unlock()
	s.mu.Lock()
	s.grp = nil
	if s.closed {
		s.mu.Unlock()
		return 0
	}
	r := rec{op: opGroup, origin: g.origin, group: g.recs}
	if keep {
		r.pid = g.pid
	}
	if r.pid != 0 || len(r.group) > 0 {
		n := len(s.pending)
		s.pending = appendRec(s.pending, &r)
		if len(s.pending)-n-recHeaderSize > maxRecord {
			// Too large to be read back as one record (a large message
			// queued for many persistent sessions): its records go
			// first, one by one, and the id after them, so a crash
			// between them can deliver the message again but never
			// loses it. Rare enough to be worth a line.
			s.pending = s.pending[:n]
			for i := range r.group {
				s.pending = appendRec(s.pending, &r.group[i])
			}
			r.group = nil
			if r.pid != 0 {
				s.pending = appendRec(s.pending, &r)
			}
			s.log.Warn("inbound QoS 2 message routed to more than a record holds; its id is written after its routing, not with it",
				"origin", r.origin, "bytes", len(s.pending)-n)
		}
		s.recordBytes.Add(int64(len(s.pending) - n))
		s.records.Add(1)
		s.md.applyOrigin(r.origin, r.pid) // the group's records were applied as they were appended
	}
	// The group's position, which every record appended while it was
	// open shares; none was appended since (groupMu).
	s.pendingPos = s.pos
	s.mu.Unlock()
	s.wake() // a flush while the group was open may have left pending untouched
	return g.pos
}

// OriginDel records that origin's inbound QoS 2 packet id pid was
// released (PUBREL), or with pid 0 that all of origin's ids are gone (its
// cloud broker has no session any more).
func (s *Store) OriginDel(origin string, pid uint16) uint64 {
	return s.append(&rec{op: opOriginDel, origin: origin, pid: pid})
}
