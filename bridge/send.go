package bridge

// The sender of an upstream connection: the picker's order, the send
// window, the counters, the flows the engine re-sent on connect. The
// engine's side of a publish (packet id, flow, wire) is uplinkengine.go.

import (
	"context"
	"fmt"
	"time"

	"github.com/edgegw/edgegw/bridge/session"
	"github.com/edgegw/edgegw/bridge/spool"
)

// inflight is a publish handed to the engine and not yet answered: what
// the sender passes the acker, in send order.
type inflight struct {
	id   spool.ID
	lane spool.Lane // its record's lane (MQTT 5: a refused record is sent again first in it)
	st   stamp      // its room in the send window: size, QoS, send time
	// done is closed when the broker ended the flow: PUBACK or PUBCOMP,
	// or a PUBACK/PUBREC refusing it (5), or the engine reset it.
	done <-chan struct{}
	ef   *session.Flow // the engine's flow (QoS 1/2)
	// topic and wire are the message's upstream topic and its PUBLISH's
	// exact size, for the stuck-record check (stuck.go); unknown ("", 0)
	// for a flow re-sent on connect.
	topic string
	wire  int
}

// send is the connection's sender: it keeps spool messages in flight as
// the send window allows (window.go), in the picker's order (lanes.go),
// starting from the oldest unacked ones. A message waits for room in its
// turn (order is kept): over 3.1.1 a QoS 2 message for a slot of
// max_inflight_qos2 too, over MQTT 5 a QoS 1/2 one for the broker's
// receive quota. The flows the engine re-sent on connect come first: they
// hold room and are not sent again.
func (s *uplink) send(ctx context.Context, win *sendWindow, pending *flowQueue) {
	b := s.b
	now := time.Now()
	for _, f := range s.resumed() {
		// A resumed QoS 1/2 flow still holds the broker's quota. These
		// are on the wire already: they take room whether it is there or
		// not (never more than the caps: they were in flight under them).
		size, qos := s.room(f)
		f.st = win.add(size, s.pick.quotaQoS(qos), now)
		s.pick.resume(f.id, f.st)
		b.inflight.Add(1)
		b.sent.Add(1)
		pending.push(f)
	}
	var f inflight
	for {
		id, m, err := s.pick.next(ctx) // by lane and drain policy (lanes.go)
		if err != nil {
			if ctx.Err() == nil {
				s.teardown(fmt.Errorf("spool: %w", err))
			}
			return
		}
		if !s.grantQoS(ctx, &m) { // upstream.go: qos_not_granted
			return
		}
		wire := s.packetSize(m)
		if rc := s.refuse(m, wire); rc != 0 {
			b.dropRefused(id, rc)
			s.pick.done(id)
			continue
		}
		size := publishSize(m.Topic, len(m.Payload)) // the window's measure
		st, ok := win.acquire(ctx, size, s.pick.quotaQoS(m.QoS))
		if !ok {
			return
		}
		f = inflight{id: id, lane: m.Lane, st: st, topic: m.Topic, wire: wire}
		b.inflight.Add(1)
		f.st.sent = time.Now()
		complete, err := s.publish(ctx, &f, m)
		if err != nil && ctx.Err() != nil { // stopping or torn down: not the publish's fault
			b.inflight.Add(-1)
			win.release(f.st, time.Now())
			return
		}
		b.sent.Add(1)
		if complete || err != nil {
			b.inflight.Add(-1)
			win.release(f.st, time.Now())
			if err != nil {
				s.teardown(fmt.Errorf("publish: %w", err))
				return
			}
			b.completed(id)
			s.pick.done(id)
			continue
		}
		pending.push(f)
	}
}
