package bridge

// Design note. One goroutine (Run's) owns the uplink: it dials, brings a
// connection of the session engine up (uplinkengine.go), subscribes the
// in rules, and while connected runs two helpers it joins before the
// next attempt:
//
//   - the sender (send.go) asks the connection's picker (lanes.go) for the
//     next spool message by lane and drain policy (it blocks while there
//     is none to send), waits for room in the send window (window.go:
//     sized by the link with max_inflight auto, within a fixed count
//     otherwise, and for QoS 2 within max_inflight_qos2, the upstream's
//     receive quota, which MQTT 3.1.1 cannot see exceeded; over MQTT 5 the
//     broker's Receive Maximum), and hands it to the engine; after a
//     reconnect it starts again from the oldest unacknowledged message of
//     each lane, so the backlog drains as fast as the window (and, with
//     drain live-first, backlog_share) allows;
//   - the acker (ack.go) waits for the publishes in send order, frees
//     their room in the window (which learns the link from their round
//     trips) and hands a temporary refusal back to the picker.
//
// The spool is the source of truth for what is still to be delivered.
// The engine keeps the QoS 1/2 flows in flight across reconnects (QoS 2
// ones across restarts too, in the spool's session log): with a
// persistent upstream session it re-sends them on connect under their
// packet ids, which is what makes QoS 2 exactly once across reconnects,
// and the sender skips them in the spool. With a clean session the
// engine forgets them on connect and the sender sends everything from
// the spool again.

import (
	"context"
	"errors"
	"net/url"
	"sync"
	"time"

	"github.com/edgegw/edgegw/bridge/session"
)

// uplink is one upstream connection of the session engine: its address
// and socket, the engine's link, the report that it was lost, its picker
// and why the bridge tore it down. ("Session" in this package is the
// MQTT session: the state the client and the broker keep across
// connections, which the engine keeps.)
type uplink struct {
	b    *Bridge
	addr *url.URL
	slot connSlot
	lost chan error // the link's end, reported by watch; capacity 1
	pick *picker    // what to send next (lanes.go); set by serveUplink

	e       *session.Engine
	link    *session.Link
	mc      *meteredConn
	v5      bool
	watched chan struct{} // closed when watch has ended
	bo      backoff       // after a temporary refusal (MQTT 5); the acker's only

	maxQoS     byte // the highest QoS sent on it (upstream.go); set before it serves
	downgraded bool // a message was sent below its rule's QoS (logged once); the sender's only

	causeMu sync.Mutex
	cause   error // first reason the bridge itself gave for tearing down

	// The flow the acker waits for, the oldest written and not
	// acknowledged (waiting false: none). Written by the acker only, read
	// by serveUplink once the acker has ended (stuck.go).
	oldest  inflight
	waiting bool
}

// setCause records why the bridge tears the connection down (first wins).
func (s *uplink) setCause(why error) {
	s.causeMu.Lock()
	if s.cause == nil {
		s.cause = why
	}
	s.causeMu.Unlock()
}

func (s *uplink) getCause() error {
	s.causeMu.Lock()
	defer s.causeMu.Unlock()
	return s.cause
}

// teardown reports the uplink down at once and closes its socket; the
// engine's reader then fails and watch reports the link lost to the owner.
func (s *uplink) teardown(why error) {
	s.setCause(why)
	s.b.setState(Disconnected, "", why)
	s.slot.close()
}

// windowLimits returns the count cap of the send window and whether it is
// sized by the link (max_inflight auto).
func (b *Bridge) windowLimits() (maxCount int, auto bool) {
	if b.cfg.MaxInflight == MaxInflightAuto {
		return autoMaxCount, true
	}
	return b.cfg.MaxInflight, false
}

// serveUplink runs a connected upstream connection until it is lost or
// ctx ends: its send window and picker, its sender and acker, and on the
// way out the stop's drain and the state change. It returns why the
// connection ended.
func (b *Bridge) serveUplink(ctx context.Context, s *uplink) error {
	// Over 3.1.1 (lanes.go) the QoS 2 window is max_inflight_qos2, or the
	// smaller window the engine learned from the upstream's closes
	// (session/quota.go).
	quota, qq := b.cfg.MaxInflightQoS2, sameQoS
	if s.v5 {
		quota, qq = s.link.ReceiveMaximum, quotaQoS
	} else if w := s.e.QoS2Window(); w > 0 && w < quota {
		quota = w
	}
	trips, writeTimeouts := b.trips.Load(), b.writeTimeouts.Load() // noteEnd: did the bridge end it?
	b.lastRead.Store(time.Now().UnixNano())
	b.connects.Add(1)
	b.setState(Connected, s.addr.Redacted(), nil)

	sctx, cancel := context.WithCancel(ctx)
	maxCount, auto := b.windowLimits()
	win := newSendWindow(maxCount, quota, auto, time.Now())
	b.win.Store(win)
	s.pick = newPicker(b.spool.Load(), b.cfg.Drain, b.cfg.BacklogShare, win, qq) // lanes.go
	s.pick.budget = b.budget
	pending := newFlowQueue() // never blocks: the window's count bounds it (flowqueue.go)
	var wg sync.WaitGroup
	wg.Add(2)
	senderDone := make(chan struct{})
	go func() {
		defer wg.Done()
		defer close(senderDone)
		defer s.pick.stop() // off the spool's wake-up list: the next connection has its own picker
		s.send(sctx, win, pending)
	}()
	go func() { defer wg.Done(); s.ack(sctx, win, pending) }()

	var why error
	select {
	case why = <-s.lost:
	case <-ctx.Done():
		why = errors.New("stopped")
		<-senderDone // it stops with ctx; nothing new is sent
		s.drain()
	}
	if c := s.getCause(); c != nil {
		why = c
	}
	cancel()
	if ctx.Err() != nil {
		s.link.Close(true) // a polite DISCONNECT; the socket is closed below anyway
	}
	s.close()
	wg.Wait()
	why = b.noteEnd(ctx, s, pending, why, trips, writeTimeouts) // stuck.go
	b.inflight.Store(0)
	b.win.Store(nil)
	b.disconnects.Add(1)
	b.setState(Disconnected, "", why)
	return why
}

// stopDrain bounds how long a stopping bridge waits for its in-flight
// publishes (never more than ack_timeout).
const stopDrain = 2 * time.Second
