package bridge

// Design note. One goroutine (Run's) owns the uplink: it dials, connects a
// fresh client per connection (paho over 3.1.1, paho.golang over 5;
// AutoReconnect off), subscribes the in rules, and while connected runs two
// helpers it joins before the next attempt, the same code for both
// protocols (each protocol's part is the protocol interface, send.go):
//
//   - the sender (send.go) asks the connection's picker (lanes.go) for the next spool
//     message by lane and drain policy (it blocks while there is none to
//     send), waits for room in the send window (window.go:
//     sized by the link with max_inflight auto, within a fixed count
//     otherwise, and for QoS 2 within max_inflight_qos2, the upstream's
//     receive quota, which MQTT 3.1.1 cannot see exceeded; over MQTT 5 the
//     broker's Receive Maximum), and hands it to the client; after a reconnect it starts again from the oldest
//     unacknowledged message of each lane, so the backlog drains as fast as
//     the window (and, with drain live-first, backlog_share) allows;
//   - the acker (ack.go) waits for the publishes in send order, acks the spool, frees
//     their room in the window (which learns the link from their round
//     trips), and is the ack watchdog: its timer runs only while a publish
//     is in flight (idle costs nothing).
//
// The spool is the source of truth for what is still to be delivered. The
// QoS 1/2 publishes in flight over MQTT 3.1.1 (paho's QoS 2 ones and the
// QoS 1 ones the bridge writes itself, direct.go) are also in the bridge's
// uplinkStore, shared by all its paho clients (session311.go): with a
// persistent upstream session paho re-sends them on connect under their
// original packet ids,
// which is what makes QoS 2 exactly once across reconnects, and the sender
// skips them in the spool. With a clean session the store is emptied on
// connect and the sender re-sends everything from the spool.

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"
)

// uplink is one upstream connection, what the MQTT 3.1.1 (uplink311) and
// MQTT 5 (uplink5) connections share: its address and socket, the
// client's report that it was lost, its picker and why the bridge tore it
// down. ("Session" in this package is the MQTT session: the state the
// client and the broker keep across connections, session311.go and
// session5.go.)
type uplink struct {
	b    *Bridge
	addr *url.URL
	slot connSlot
	lost chan error // the client's connection-lost report; capacity 1
	pick *picker    // what to send next (lanes.go); set by serveUplink

	maxQoS     byte // the highest QoS sent on it (upstream.go); set before it serves
	downgraded bool // a message was sent below its rule's QoS (logged once); the sender's only

	causeMu sync.Mutex
	cause   error // first reason the bridge itself gave for tearing down

	// The flow the acker waits for, the oldest written and not
	// acknowledged (waiting false: none). Written by the acker only, read
	// by serveUplink once the acker has ended (stuck.go).
	oldest  inflight
	waiting bool

	// engineWatchdog: the session engine is the ack watchdog
	// (uplinkengine.go), not the acker.
	engineWatchdog bool
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

// waitForID waits until busy is closed: the packet id a QoS 2 publish
// needs is held by a flow 65535 records older or, byRequest, by a
// SUBSCRIBE/UNSUBSCRIBE (requestid.go). false: ctx ended, or a request
// kept the id past ack_timeout and the uplink was torn down. A broker
// that never answers a request on a live connection would otherwise stop
// the sender for good; the next connection frees the request's id. A
// flow's wait is not bounded here: the flow is in the acker's hands, and
// its watchdog tears the uplink down only if nothing at all arrived from
// upstream since the flow was sent. On a slow link whose acks take longer
// than ack_timeout while traffic flows (a long backlog sent with
// live-first or lanes), a bound here would tear a healthy uplink down,
// and its successor again, since the flow is resumed first.
func (s *uplink) waitForID(ctx context.Context, busy <-chan struct{}, byRequest bool) bool {
	var expired <-chan time.Time
	if byRequest {
		t := time.NewTimer(s.b.cfg.AckTimeout)
		defer t.Stop()
		expired = t.C
	}
	select {
	case <-busy:
		return true
	case <-ctx.Done():
		return false
	case <-expired:
		s.teardown(fmt.Errorf("a SUBSCRIBE or UNSUBSCRIBE held the packet id a QoS 2 publish needs past ack_timeout (%s) without an answer", s.b.cfg.AckTimeout))
		return false
	}
}

// teardown reports the uplink down at once and closes its socket; paho's
// reader then fails and reports the connection lost to the owner.
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

// uplinkOps is what serveUplink needs of one upstream connection, over
// MQTT 3.1.1 (serve) or MQTT 5 (serve5).
type uplinkOps struct {
	s        *uplink
	quota    int             // the QoS 2 window: max_inflight_qos2, or the broker's Receive Maximum
	quotaQoS func(byte) byte // the QoS under which a publish takes room in the window
	proto    protocol        // for the sender and the acker (send.go, ack.go)
	drain    func()          // on a stop: wait (bounded) for the publishes in flight
	bye      func()          // on a stop: a polite DISCONNECT
	close    func()          // close the socket; return once the client let go of it
}

// serveUplink runs a connected upstream connection until it is lost or
// ctx ends: its send window and picker, its sender and acker, and on the
// way out the stop's drain and the state change. It returns why the
// connection ended.
func (b *Bridge) serveUplink(ctx context.Context, u uplinkOps) error {
	s := u.s
	trips, writeTimeouts := b.trips.Load(), b.writeTimeouts.Load() // noteEnd: did the bridge end it?
	b.lastRead.Store(time.Now().UnixNano())
	b.connects.Add(1)
	b.setState(Connected, s.addr.Redacted(), nil)

	sctx, cancel := context.WithCancel(ctx)
	maxCount, auto := b.windowLimits()
	win := newSendWindow(maxCount, u.quota, auto, time.Now())
	b.win.Store(win)
	s.pick = newPicker(b.spool.Load(), b.cfg.Drain, b.cfg.BacklogShare, win, u.quotaQoS) // lanes.go
	s.pick.budget = b.budget
	pending := newFlowQueue() // never blocks: the window's count bounds it (flowqueue.go)
	var wg sync.WaitGroup
	wg.Add(2)
	senderDone := make(chan struct{})
	go func() {
		defer wg.Done()
		defer close(senderDone)
		defer s.pick.stop() // off the spool's wake-up list: the next connection has its own picker
		s.send(sctx, win, pending, u.proto)
	}()
	go func() { defer wg.Done(); s.ack(sctx, win, pending, u.proto) }()

	var why error
	select {
	case why = <-s.lost:
	case <-ctx.Done():
		why = errors.New("stopped")
		<-senderDone // it stops with ctx; nothing new is sent
		u.drain()
	}
	if c := s.getCause(); c != nil {
		why = c
	}
	cancel()
	if ctx.Err() != nil {
		u.bye() // the socket is closed below anyway
	}
	u.close()
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
