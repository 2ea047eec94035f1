package gateway

// Design note: a bridge's inbound QoS 2, exactly once across restarts.
// The cloud broker re-sends a QoS 2 PUBLISH under its packet id until it
// gets PUBREC, and after PUBREC re-sends only PUBREL; it sends PUBREL
// again until it gets PUBCOMP. So a bridge delivers a message exactly
// once if, whenever it answers PUBREC, it remembers the id until PUBREL,
// and remembers it exactly when the message's local routing is kept: a
// resend of a remembered id is answered, never routed again; a resend of
// one not remembered is routed.
//
// The gateway keeps those ids, not the bridge: the routing it must be
// kept with is the gateway's (the copies queued for persistent sessions,
// a retained message), in the gateway's state log, and the spool is
// another file: no write covers both. PublishExactlyOnce routes the
// message inside a state store group (store.Begin): the id and every
// record the routing appended are written as one record, under one CRC,
// so a kill -9 or a power cut keeps both or neither. Its PUBREC waits
// for that record (per persistence.sync, as every acknowledgement that
// promises state). Release forgets the id on PUBREL and waits for that
// record too before the PUBCOMP goes out: after PUBCOMP the cloud may
// reuse the id for a new message, which a restart must not take for the
// old one's resend.
//
// What it does not cover: subscribers with clean sessions get what was
// routed in memory (they have no state to keep across a restart), and a
// message a bridge routes into another bridge's spool (a sink) is kept
// in that spool, a separate file: a crash between the two writes can
// bring it to that spool twice. A sink that refuses the message makes
// the id be forgotten again (its resend is routed again: subscribers that
// got it see it twice) rather than answered without the sink having it.
// Without persistence.dir the ids are kept in memory: exactly once while
// edgegw runs.

import (
	"errors"
	"fmt"
	"sync"

	"github.com/edgegw/edgegw/gateway/packet"
)

// originIDs is the set of inbound QoS 2 packet ids each origin (a bridge)
// has had routed and not yet released. The zero value is ready.
type originIDs struct {
	mu  sync.Mutex
	ids map[string]map[uint16]struct{}

	// routing is held (read) while a bridge's message is routed, and
	// (write) by stop, which Run calls before the registry shuts down:
	// so a message is either routed whole while the sessions still take
	// messages, or refused.
	routing sync.RWMutex
	stopped bool // under routing
}

// stop refuses every later bridge message (ErrStopping), after any being
// routed now.
func (o *originIDs) stop() {
	o.routing.Lock()
	o.stopped = true
	o.routing.Unlock()
}

func (o *originIDs) has(origin string, id uint16) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, ok := o.ids[origin][id]
	return ok
}

func (o *originIDs) add(origin string, id uint16) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ids == nil {
		o.ids = make(map[string]map[uint16]struct{})
	}
	if o.ids[origin] == nil {
		o.ids[origin] = make(map[uint16]struct{})
	}
	o.ids[origin][id] = struct{}{}
}

// remove forgets origin's id, or all of origin's ids (0); it reports
// whether there was any.
func (o *originIDs) remove(origin string, id uint16) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	ids := o.ids[origin]
	if id == 0 {
		delete(o.ids, origin)
		return len(ids) > 0
	}
	_, ok := ids[id]
	delete(ids, id)
	return ok
}

// list returns origin's ids (any order).
func (o *originIDs) list(origin string) []uint16 {
	o.mu.Lock()
	defer o.mu.Unlock()
	l := make([]uint16, 0, len(o.ids[origin]))
	for id := range o.ids[origin] {
		l = append(l, id)
	}
	return l
}

func (o *originIDs) restore(by map[string][]uint16) {
	for origin, ids := range by {
		for _, id := range ids {
			o.add(origin, id)
		}
	}
}

// ErrStopping is PublishExactlyOnce's answer once the broker is stopping.
// From then on the persistent sessions that leave are kept on disk but no
// longer take messages in memory, so a message routed now would reach
// none of them: it must not be acknowledged upstream (the cloud sends it
// again after the restart, when the sessions are back).
var ErrStopping = errors.New("broker stopping")

// syncKeep is the deferrer of PublishExactlyOnce: routing's asynchronous
// verdicts (sinks, the state records) arrive on ch, never blocking the
// routing itself, which must not wait for a state record while its
// store group is open.
type syncKeep struct{ ch chan error }

func (d *syncKeep) deferAck() *keep {
	return &keep{done: func(err error) { d.ch <- err }}
}

// PublishExactlyOnce routes m, a QoS 2 message that origin (a bridge,
// BridgeOrigin) received from its upstream under packet id id, unless
// that id was routed already and not released since: then it reports
// dup and routes nothing. It returns once the routing and the id are
// kept (per persistence.sync); only then may origin answer PUBREC. On an
// error nothing is remembered: origin must not acknowledge, and the
// upstream's resend is routed again. See the design note above.
//
// Calls for one origin must not overlap (a bridge handles its upstream's
// messages in order). A message of QoS 0 or 1 is routed as by Publish.
// Once the broker is stopping a QoS 1/2 message is refused (ErrStopping);
// one being routed when it starts to stop is routed whole first.
func (s *Server) PublishExactlyOnce(origin string, id uint16, m *Message) (dup bool, err error) {
	if m.QoS == 0 {
		return false, s.Publish(m)
	}
	if m.QoS == 1 || id == 0 {
		s.origins.routing.RLock()
		defer s.origins.routing.RUnlock()
		if s.origins.stopped {
			return false, fmt.Errorf("publish %q: %w", m.Topic, ErrStopping)
		}
		return false, s.Publish(m)
	}
	if err := packet.ValidTopicName(m.Topic); err != nil {
		return false, fmt.Errorf("publish %q: %w", m.Topic, err)
	}
	if s.origins.has(origin, id) {
		return true, nil // [MQTT-4.3.3-10]
	}
	d := &syncKeep{ch: make(chan error, 1)}
	if s.state == nil {
		if err := s.routed(m, d); err != nil {
			return false, err
		}
		s.origins.add(origin, id)
		return false, nil
	}
	pending, pos, err := s.routeGroup(origin, id, m, d)
	if errors.Is(err, ErrStopping) {
		return false, err
	}
	if err == nil && pending {
		err = <-d.ch // the sinks; the state records are in the group, waited for below
	}
	if err != nil {
		if pending { // the id went into the group: it must go again
			s.state.Wait(s.state.OriginDel(origin, id))
		}
		return false, fmt.Errorf("publish %q: %w", m.Topic, err)
	}
	if err := s.state.Wait(pos); err != nil {
		// Not kept: as on any refusal, no PUBREC; the resend finds the
		// id unknown and is routed again.
		return false, fmt.Errorf("publish %q: state store: %w", m.Topic, err)
	}
	s.origins.add(origin, id)
	return false, nil
}

// routeGroup routes m inside a state store group for origin's id
// (committed with the id unless routing failed at once), unless the
// broker is stopping; pos is the group's.
func (s *Server) routeGroup(origin string, id uint16, m *Message, d *syncKeep) (pending bool, pos uint64, err error) {
	s.origins.routing.RLock()
	defer s.origins.routing.RUnlock()
	if s.origins.stopped {
		return false, 0, fmt.Errorf("publish %q: %w", m.Topic, ErrStopping)
	}
	g := s.state.Begin(origin, id)
	pending, _, err = s.routeKept(m, d)
	return pending, g.Commit(err == nil), err
}

// routed routes m and waits for its verdict, unless the broker is
// stopping.
func (s *Server) routed(m *Message, d *syncKeep) error {
	s.origins.routing.RLock()
	if s.origins.stopped {
		s.origins.routing.RUnlock()
		return fmt.Errorf("publish %q: %w", m.Topic, ErrStopping)
	}
	pending, _, err := s.routeKept(m, d)
	s.origins.routing.RUnlock()
	if pending {
		err = <-d.ch
	}
	return err
}

// Release forgets origin's inbound QoS 2 packet id id (its PUBREL came)
// and returns once that is kept: only then may origin send PUBCOMP (the
// upstream may then reuse the id). With id 0 it forgets all of origin's
// ids: its upstream has no session any more, so none will be resent.
func (s *Server) Release(origin string, id uint16) error {
	if !s.origins.remove(origin, id) || s.state == nil {
		return nil
	}
	if err := s.state.Wait(s.state.OriginDel(origin, id)); err != nil {
		return fmt.Errorf("release inbound id %d of %s: state store: %w", id, origin, err)
	}
	return nil
}

// Unreleased returns origin's inbound QoS 2 packet ids that were routed
// and not released (restored at start, or kept since), in any order.
func (s *Server) Unreleased(origin string) []uint16 { return s.origins.list(origin) }
