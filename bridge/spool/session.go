package spool

// Design note: the spool as the uplink session engine's Store
// (bridge/session). The records are the messages; what the engine needs
// beside them, the state of the outbound QoS 2 flows it started, is a
// small append-only log of its own
// (sessionlog.go), replayed and rewritten to its live state at open. A
// flow's state dies with its record: an entry whose record is no longer
// in the spool is not kept by the rewrite, so an ack needs no entry of
// its own (the ack log has it).
//
// Durability follows the spool's sync mode: with SyncBatch and
// SyncAlways an entry the engine waits for (Released, the reset) is fsynced before the call returns, one fsync for all the
// PUBRECs the engine read in one go; Sent is not (a record's packet id
// does not change, so a lost Sent entry costs at most a DUP flag). With
// SyncNone nothing is fsynced.

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/edgegw/edgegw/internal/durable"
)

// sessCompactAt is the log size above which the next write rewrites it.
const sessCompactAt = 1 << 20

// Session is the session engine's state in the spool directory. Its
// methods are bridge/session's Store; safe for concurrent use.
type Session struct {
	sp   *Spool
	path string
	sync bool

	mu    sync.Mutex
	f     durable.File
	size  int64
	flows map[uint64]*sessFlow
	buf   []byte
}

type sessFlow struct {
	id       uint16
	released bool
}

// OpenSession opens (or creates) the session log of sp's directory. A
// log whose header is unreadable is moved aside (session.log.quarantine)
// and a new one started: the flows are then sent again as new messages.
func OpenSession(sp *Spool) (*Session, error) {
	ss := &Session{
		sp: sp, path: filepath.Join(sp.opts.Dir, sessFileName), sync: sp.opts.Sync != SyncNone,
		flows: map[uint64]*sessFlow{},
	}
	b, err := sp.fs.ReadFile(ss.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("spool: read session log: %w", err)
	default:
		es, _, derr := decodeSessLog(b)
		if derr != nil {
			sp.log.Warn("session log unreadable; moved aside, starting a new one", "err", derr)
			if err := sp.fs.Rename(ss.path, ss.path+".quarantine"); err != nil {
				return nil, fmt.Errorf("spool: quarantine session log: %w", err)
			}
		}
		for _, e := range es {
			ss.apply(e)
		}
	}
	if err := ss.rewrite(); err != nil {
		return nil, err
	}
	return ss, nil
}

// apply replays entry e into the state. Caller holds mu (or owns ss).
func (ss *Session) apply(e sessEntry) {
	switch e.kind {
	case sessSent:
		ss.flows[e.rec] = &sessFlow{id: e.id}
	case sessReleased:
		if f := ss.flows[e.rec]; f != nil {
			f.released = true
		}
	case sessResetFlows:
		clear(ss.flows)
	}
}

// rewrite replaces the log by its live state: flows whose record is
// still in the spool. Caller holds mu (or owns ss).
func (ss *Session) rewrite() error {
	buf := appendSessHeader(nil)
	for rec, f := range ss.flows {
		if !ss.sp.has(ID(rec)) {
			delete(ss.flows, rec)
			continue
		}
		buf = appendSessEntry(buf, sessEntry{kind: sessSent, rec: rec, id: f.id})
		if f.released {
			buf = appendSessEntry(buf, sessEntry{kind: sessReleased, rec: rec})
		}
	}
	tmp := filepath.Join(ss.sp.opts.Dir, sessTmpName)
	f, err := ss.sp.fs.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("spool: session log: %w", err)
	}
	_, err = f.Write(buf)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = ss.sp.fs.Rename(tmp, ss.path)
	}
	if err == nil {
		err = ss.sp.fs.SyncDir(ss.sp.opts.Dir)
	}
	if err != nil {
		return fmt.Errorf("spool: rewrite session log: %w", err)
	}
	if ss.f != nil {
		ss.f.Close()
	}
	ss.f, err = ss.sp.fs.OpenFile(ss.path, os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("spool: session log: %w", err)
	}
	ss.size = int64(len(buf))
	return nil
}

// write appends entries, fsyncs them if durable (and the sync mode
// asks for it), then applies them. Caller holds mu.
func (ss *Session) write(durable bool, es ...sessEntry) error {
	if ss.f == nil {
		return ErrClosed
	}
	ss.buf = ss.buf[:0]
	for _, e := range es {
		ss.buf = appendSessEntry(ss.buf, e)
	}
	if _, err := ss.f.Write(ss.buf); err != nil {
		return fmt.Errorf("spool: session log: %w", err)
	}
	ss.size += int64(len(ss.buf))
	if durable && ss.sync {
		if err := ss.f.Sync(); err != nil {
			return fmt.Errorf("spool: session log sync: %w", err)
		}
	}
	for _, e := range es {
		ss.apply(e)
	}
	if ss.size > sessCompactAt {
		return ss.rewrite()
	}
	return nil
}

// Close closes the log.
func (ss *Session) Close() error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.f == nil {
		return nil
	}
	err := ss.f.Close()
	ss.f = nil
	return err
}

// Flows returns the outbound QoS 2 flows whose record is still in the
// spool, oldest record first.
func (ss *Session) Flows() ([]SessionFlow, error) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	var fs []SessionFlow
	for rec, f := range ss.flows {
		if ss.sp.has(ID(rec)) {
			fs = append(fs, SessionFlow{Rec: rec, ID: f.id, Released: f.released})
		}
	}
	slices.SortFunc(fs, func(a, b SessionFlow) int { return cmp.Compare(a.Rec, b.Rec) })
	return fs, nil
}

// SessionFlow is an outbound QoS 2 flow the session log kept.
type SessionFlow struct {
	Rec      uint64
	ID       uint16
	Released bool
}

// Sent records that record rec's QoS 2 PUBLISH went out under packet
// id; not fsynced.
func (ss *Session) Sent(rec uint64, id uint16) error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.write(false, sessEntry{kind: sessSent, rec: rec, id: id})
}

// Released records, durably, that the peer sent PUBREC for recs.
func (ss *Session) Released(recs []uint64) error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	es := make([]sessEntry, len(recs))
	for i, r := range recs {
		es[i] = sessEntry{kind: sessReleased, rec: r}
	}
	return ss.write(true, es...)
}

// ResetFlows forgets every outbound flow, durably.
func (ss *Session) ResetFlows() error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if len(ss.flows) == 0 {
		return nil
	}
	return ss.write(true, sessEntry{kind: sessResetFlows})
}

// Ack removes record rec from the spool: the peer acknowledged it.
func (ss *Session) Ack(rec uint64) error {
	ss.mu.Lock()
	delete(ss.flows, rec)
	ss.mu.Unlock()
	return ss.sp.Ack(ID(rec))
}

// Drop removes record rec from the spool, refused for good (counted as
// DropRefused).
func (ss *Session) Drop(rec uint64, _ byte) error {
	ss.mu.Lock()
	delete(ss.flows, rec)
	ss.mu.Unlock()
	return ss.sp.Drop(ID(rec), DropRefused)
}

// has reports whether record id is in the spool.
func (s *Spool) has(id ID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	g, i := s.locateLocked(id)
	return g != nil && !g.isRemoved(i)
}
