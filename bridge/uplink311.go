package bridge

import (
	"context"
	"fmt"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgegw/edgegw/bridge/spool"
)

// uplink311 is one MQTT 3.1.1 upstream connection: a paho client on it.
type uplink311 struct {
	*uplink
	client mqtt.Client
}

// serve runs a connected MQTT 3.1.1 uplink until it is lost or ctx ends.
func (b *Bridge) serve(ctx context.Context, s *uplink311) {
	b.serveUplink(ctx, uplinkOps{
		s: s.uplink, quota: b.cfg.MaxInflightQoS2, quotaQoS: sameQoS,
		loops: func(win *sendWindow, maxCount int) (send, ack func(context.Context)) {
			pending := make(chan inflight, maxCount) // never blocks: the window's count bounds it
			return func(ctx context.Context) { s.send(ctx, win, pending) }, func(ctx context.Context) { s.ack(ctx, win, pending) }
		},
		drain: s.drain,
		bye:   func() { s.client.Disconnect(250) },
		close: s.slot.close,
	})
}

// inflight is a publish handed to paho and not yet acknowledged.
type inflight struct {
	id  spool.ID
	tok mqtt.Token // nil for a publish paho re-sent from the store on connect
	out *outbound  // its store entry (QoS 1/2); nil for QoS 0 or if paho refused it
	st  stamp      // its room in the send window: size, QoS, send time
}

// drain waits, on a stop, for the QoS 1/2 publishes in flight to complete
// (their completion acks the spool through the store), so that a restart
// does not send them again under new packet ids: the in-process store does
// not survive the process. It gives up after stopDrain or when the uplink
// is lost.
func (s *uplink311) drain() {
	chs := s.b.store.doneChans()
	if len(chs) == 0 {
		return
	}
	t := time.NewTimer(min(stopDrain, s.b.cfg.AckTimeout))
	defer t.Stop()
	for _, ch := range chs {
		select {
		case <-ch:
		case <-s.lost:
			return
		case <-t.C:
			s.b.log.Warn("stopping with publishes in flight; they are sent again after the restart", "in_flight", s.b.store.len())
			return
		}
	}
}

// send is the 3.1.1 uplink's sender: it keeps spool messages in flight as
// the send window allows (window.go), in the picker's order (lanes.go),
// starting from the oldest unacked ones. A message waits for room in its turn (order is
// kept): a QoS 2 message for a slot of max_inflight_qos2 too. The
// publishes paho re-sent on connect come first: they hold room and are
// not sent again.
func (s *uplink311) send(ctx context.Context, win *sendWindow, pending chan<- inflight) {
	b := s.b
	now := time.Now()
	for _, e := range b.store.pending() {
		// A resumed QoS 2 flow still holds the broker's quota. These are
		// on the wire already: they take room whether it is there or not
		// (never more than the caps: they were in flight under them).
		qos := byte(1)
		if b.store.isQoS2(e) {
			qos = 2
		}
		st := win.add(b.store.wireSize(e), qos, now)
		s.pick.resume(e.rec, st)
		b.inflight.Add(1)
		b.sent.Add(1)
		pending <- inflight{id: e.rec, out: e, st: st}
	}
	for {
		id, m, err := s.pick.next(ctx) // by lane and drain policy (lanes.go)
		if err != nil {
			if ctx.Err() == nil {
				s.teardown(fmt.Errorf("spool: %w", err))
			}
			return
		}
		// For QoS 2 the window holds the upstream's receive quota too;
		// over 3.1.1 a refusal is invisible.
		st, ok := win.acquire(ctx, publishSize(m.Topic, len(m.Payload)), m.QoS)
		if !ok {
			return
		}
		var out *outbound
		if m.QoS > 0 {
			if busy := b.store.wireBusy(id); busy != nil {
				select { // a record 65535 older holds the wire id
				case <-busy:
				case <-ctx.Done():
					return
				}
			}
			out = b.store.announce(id)
		}
		b.inflight.Add(1)
		st.sent = time.Now()
		tok := s.client.Publish(m.Topic, m.QoS, m.Retain, m.Payload)
		if out != nil && !b.store.taken(out) {
			out = nil // refused by paho: its token carries the error
		}
		b.sent.Add(1)
		pending <- inflight{id: id, tok: tok, out: out, st: st}
	}
}

// ack is the 3.1.1 uplink's acker and ack watchdog: it waits for publishes in
// send order (acknowledgements come in that order; 5.0 §4.6 requires
// it of clients, [MQTT-4.6.0-2]), frees their
// window slots, and tears the uplink down if the oldest one is older than
// ack_timeout with nothing read from upstream since it was sent.
func (s *uplink311) ack(ctx context.Context, win *sendWindow, pending <-chan inflight) {
	b := s.b
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		var f inflight
		select {
		case f = <-pending:
		case <-ctx.Done():
			return
		}
		timer.Reset(time.Until(f.st.sent.Add(b.cfg.AckTimeout)))
		// A QoS 1/2 publish is complete when paho deletes it from the
		// store (PUBACK/PUBCOMP); its token, if any, reports a failure to
		// send it. A QoS 0 publish is complete when its token is.
		var tokDone, stored <-chan struct{}
		if f.tok != nil {
			tokDone = f.tok.Done()
		}
		if f.out != nil {
			stored = f.out.done
		}
	wait:
		for {
			select {
			case <-stored:
				timer.Stop()
				break wait
			case <-tokDone:
				if err := f.tok.Error(); err != nil {
					s.teardown(fmt.Errorf("publish: %w", err))
					return
				}
				if stored == nil {
					timer.Stop()
					break wait
				}
				tokDone = nil // acked; paho's Del came first or follows at once
			case <-timer.C:
				if b.lastRead.Load() < f.st.sent.UnixNano() {
					b.trips.Add(1)
					s.teardown(fmt.Errorf("ack watchdog: no ack for %s and nothing from upstream", b.cfg.AckTimeout))
					return
				}
				timer.Reset(b.cfg.AckTimeout)
			case <-ctx.Done():
				return
			}
		}
		// Only a PUBACK/PUBCOMP read from the wire completes a QoS 1/2
		// record (the store's Del): a paho token can complete without one
		// (resume's claimID, TestTokenCompletedByResumeIsNotAnAck).
		if f.out == nil {
			if f.st.qos > 0 { // paho refused it without an error: never the case in 1.5.1
				s.teardown(fmt.Errorf("publish of record %d completed without being stored", f.id))
				return
			}
			b.completed(f.id) // QoS 0: complete once written
		}
		s.pick.done(f.id)
		b.inflight.Add(-1)
		win.release(f.st, time.Now())
	}
}
