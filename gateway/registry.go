package gateway

import (
	"sync"
	"time"
)

// registry owns the life of every session: create, resume, take over,
// expire and destroy are decided here and nowhere else (field report 002:
// a session dropped by one path while another still referenced its queue
// leaked it). Destroying a session releases it whole.
type registry struct {
	srv      *Server
	mu       sync.Mutex
	sessions map[string]*session
	closed   bool
}

func (r *registry) init(srv *Server) {
	r.srv = srv
	r.sessions = make(map[string]*session)
}

// attachResult tells the connection what it got.
type attachResult struct {
	sess    *session
	present bool    // session present flag for CONNACK
	oldConn *client // connection that was taken over, to be closed by the caller
	// notOwner: the id's session belongs to another user; nothing was
	// changed and the CONNECT must be refused.
	notOwner bool
}

// connected returns the connection holding the session of id, if user may
// take it over (attach's ownership rule); nil otherwise.
func (r *registry) connected(id, user string) *client {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.sessions[id]
	if s == nil || (!s.ownerUnknown && s.owner != user) {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conn
}

// attach gives c the session for id. cleanStart discards an existing
// session; otherwise an existing one is resumed. A connection still owning
// the session loses it first (takeover). expiry is the session expiry the
// new connection asked for (already capped).
func (r *registry) attach(c *client, id string, cleanStart bool, expiry time.Duration) attachResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	var res attachResult
	old := r.sessions[id]
	if old != nil && !old.ownerUnknown && old.owner != c.username {
		// A client id does not make a client: only the user that created
		// the session may resume it, take it over or discard it (clean
		// start), whether it is connected or waiting (issue 13).
		res.notOwner = true
		return res
	}
	if old != nil {
		old.mu.Lock()
		if old.conn != nil {
			res.oldConn = old.conn
			old.conn = nil
			old.online.Store(false)
			r.srv.stats.takeovers.Add(1)
		}
		// A clean session ends with its connection, also when another
		// connection takes it over: its state must not be resumed
		// ([MQTT-3.1.2-6](3.1.1), [MQTT-3.2.2-3](3.1.1); 5.0 §3.1.2.11.2, §3.2.2.1.1).
		// While connected, expiry 0 means exactly that.
		endsWithConn := res.oldConn != nil && old.expiry == 0
		if cleanStart || endsWithConn {
			old.unpersist()
			defer r.srv.redeliverShared(old.takeSharedLocked()) // share.go; runs before r.mu is unlocked: order r.mu, then sessions
			defer releaseWaiters(old.release())                 // [MQTT-3.1.2-4], [MQTT-3.1.2-6](3.1.1)
			old.mu.Unlock()
			delete(r.sessions, id)
			old = nil
		} else {
			old.mu.Unlock()
		}
	}
	s := old
	if s == nil {
		s = newSession(r.srv, id)
		s.owner = c.username
		r.sessions[id] = s
	} else {
		res.present = true // [MQTT-3.2.2-3], [MQTT-3.2.2-2](3.1.1)
	}
	s.mu.Lock()
	if s.ownerUnknown {
		s.adopt(c.username)
	}
	s.conn = c
	s.gen++ // timers set while it was disconnected are stale now
	s.online.Store(true)
	s.expiry = expiry
	if s.expiryTimer != nil {
		s.expiryTimer.Stop()
		s.expiryTimer = nil
	}
	if s.willTimer != nil { // resumed before the delayed will was due
		s.willTimer.Stop()
		s.willTimer = nil
		s.will = nil
	}
	if len(s.inflight) > 0 {
		s.needResend = true
		s.unsent = len(s.inflight)
		for _, f := range s.inflight {
			f.resend = true
		}
	}
	s.persistAttached()
	s.mu.Unlock()
	res.sess = s
	return res
}

// detach is called when c's network connection has ended. If c still owns
// the session, the session either expires later (persistent) or is
// destroyed now. will is the connection's will to publish, nil if none;
// detach schedules it per the will delay.
func (r *registry) detach(c *client, s *session, will *Message, willDelay time.Duration) {
	r.mu.Lock()
	s.mu.Lock()
	if s.conn != c {
		// Taken over: the session belongs to someone else now. The will is
		// published unless it was delayed and the session lives on.
		gone := s.destroyed
		s.mu.Unlock()
		r.mu.Unlock()
		if will != nil && (willDelay == 0 || gone) {
			r.srv.publishWill(will)
		}
		return
	}
	s.conn = nil
	s.online.Store(false)
	s.drainProgress() // a drain waits no more for a connection that ended (drain.go)
	// Nobody drains the queue now: publishers waiting on it are released
	// (an offline session gets the plain overflow policy, never flow control).
	defer releaseWaiters(s.takeWaiters())
	if s.expiry == 0 || r.closed {
		var orphans []queued
		if !r.closed { // at shutdown persistent sessions stay on disk
			s.unpersist()
			orphans = s.takeSharedLocked()
		}
		s.release()
		if r.sessions[s.id] == s {
			delete(r.sessions, s.id)
		}
		s.mu.Unlock()
		r.mu.Unlock()
		r.srv.redeliverShared(orphans) // share.go
		if will != nil {
			r.srv.publishWill(will)
		}
		return
	}
	if will != nil {
		delay := min(willDelay, s.expiry)
		if delay == 0 {
			defer r.srv.publishWill(will)
		} else {
			s.will = will
			s.willAt = time.Now().Add(delay)
			gen := s.gen
			s.willTimer = time.AfterFunc(delay, func() { r.fireWill(s, gen) })
		}
	}
	s.offlineAt = time.Now()
	s.persistMeta(s.offlineAt)
	if s.expiry < neverExpires {
		gen := s.gen
		s.expiryTimer = time.AfterFunc(s.expiry, func() { r.expire(s, gen) })
	}
	s.mu.Unlock()
	r.mu.Unlock()
}

// neverExpires is the v5 session expiry 0xFFFFFFFF, capped by the options
// anyway; kept as a sentinel for clarity.
const neverExpires = time.Duration(1<<63 - 1)

func (r *registry) fireWill(s *session, gen uint64) {
	s.mu.Lock()
	if s.gen != gen { // stale: the session was resumed since this timer was set
		s.mu.Unlock()
		return
	}
	w := s.will
	s.will = nil
	s.willTimer = nil
	ok := s.conn == nil && !s.destroyed
	if ok && w != nil {
		s.persistMeta(s.offlineAt) // the will is gone from the disk too
	}
	s.mu.Unlock()
	if w != nil && ok {
		r.srv.publishWill(w)
	}
}

// expire destroys s if it is still disconnected and still the registered
// session for its id.
func (r *registry) expire(s *session, gen uint64) {
	r.mu.Lock()
	s.mu.Lock()
	if s.gen != gen || s.conn != nil || s.destroyed || r.sessions[s.id] != s {
		s.mu.Unlock()
		r.mu.Unlock()
		return
	}
	w := s.will
	s.will = nil
	s.unpersist()
	orphans := s.takeSharedLocked()
	defer releaseWaiters(s.release())
	delete(r.sessions, s.id)
	s.mu.Unlock()
	r.mu.Unlock()
	r.srv.redeliverShared(orphans) // share.go
	r.srv.stats.expired.Add(1)
	if w != nil {
		r.srv.publishWill(w) // the session ended before the will delay
	}
}

// shutdown stops every session timer; sessions stay in memory until the
// process ends, and persistent ones in the state store (persist.go) when
// there is one.
func (r *registry) shutdown() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	for _, s := range r.sessions {
		s.mu.Lock()
		if s.expiryTimer != nil {
			s.expiryTimer.Stop()
			s.expiryTimer = nil
		}
		if s.willTimer != nil {
			s.willTimer.Stop()
			s.willTimer = nil
		}
		w := s.takeWaiters()
		s.mu.Unlock()
		releaseWaiters(w)
	}
}
