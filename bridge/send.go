package bridge

// The sender of an upstream connection, over MQTT 3.1.1 and MQTT 5 alike:
// what is the same (the picker's order, the send window, the counters, the
// flows re-sent on connect) is here; what differs is the protocol's
// (uplink311.go: paho; uplink5.go: paho.golang, the broker's limits and
// reason codes).

import (
	"context"
	"fmt"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgegw/edgegw/bridge/session"
	"github.com/edgegw/edgegw/bridge/spool"
)

// inflight is a publish handed to the upstream client and not yet
// answered: what the sender passes the acker, in send order.
type inflight struct {
	id   spool.ID
	lane spool.Lane // its record's lane (MQTT 5: a refused record is sent again first in it)
	st   stamp      // its room in the send window: size, QoS, send time
	// done is closed when the broker ended the flow: PUBACK or PUBCOMP
	// (3.1.1: the store's Del), or a PUBACK/PUBREC refusing it (5). nil:
	// the flow ends with tok (3.1.1: QoS 0, or a publish paho refused).
	done <-chan struct{}
	// direct: a QoS 1 publish the bridge wrote itself (3.1.1, direct.go).
	// done is then the store's directEnded, a wake-up shared by all of
	// them, not closed for this one: the flow ended once out.ended.
	direct bool
	// tok is paho's token (3.1.1): an error ends the uplink. nil for a
	// flow re-sent on connect and over MQTT 5.
	tok mqtt.Token
	out *outbound     // 3.1.1: its store entry (QoS 1/2), once announced
	f   *flow5        // MQTT 5: its flow in the session (QoS 1/2)
	ef  *session.Flow // the session engine's flow (QoS 1/2; uplinkengine.go)
	// topic and wire are the message's upstream topic and its PUBLISH's
	// exact size, for the stuck-record check (stuck.go); unknown ("", 0)
	// for a flow re-sent on connect.
	topic string
	wire  int
}

// protocol is what the shared sender and acker ask of an uplink's MQTT
// version: how its client library takes a publish and what the broker's
// answer means.
type protocol interface {
	// resumed returns the flows the client re-sent on connect, oldest
	// record first: they hold room and are not sent again.
	resumed() []inflight
	// room returns the size and the QoS of resumed flow f (a QoS 2 flow
	// may be at its PUBREL by now).
	room(f inflight) (size int, qos byte)
	// packetSize returns the size of m's PUBLISH on this protocol's wire,
	// exactly (packetsize.go).
	packetSize(m spool.Message) int
	// refuse returns the reason code the broker would refuse m, a PUBLISH
	// of size bytes (packetSize), with (0: none): such a message is
	// dropped, never sent.
	refuse(m spool.Message, size int) byte
	// claim takes record f.id's packet id for a QoS 1/2 publish m of size
	// bytes, waiting while a record 65535 older holds it; false: ctx ended.
	claim(ctx context.Context, f *inflight, m spool.Message, size int) bool
	// publish hands m to the client. complete: the publish ended when it
	// was written (nothing for the acker); err: the client did not take
	// it, and the uplink is torn down.
	publish(ctx context.Context, f *inflight, m spool.Message) (complete bool, err error)
	// finish is the acker's end of flow f, in send order, once the broker
	// answered it; false: the uplink was torn down.
	finish(f inflight) bool
}

var (
	_ protocol = (*uplink311)(nil)
	_ protocol = (*uplink5)(nil)
	_ protocol = (*uplinkEngine)(nil)
)

// send is the connection's sender: it keeps spool messages in flight as
// the send window allows (window.go), in the picker's order (lanes.go),
// starting from the oldest unacked ones. A message waits for room in its
// turn (order is kept): over 3.1.1 a QoS 2 message for a slot of
// max_inflight_qos2 too, over MQTT 5 a QoS 1/2 one for the broker's
// receive quota. The flows the client re-sent on connect come first: they
// hold room and are not sent again.
func (s *uplink) send(ctx context.Context, win *sendWindow, pending *flowQueue, p protocol) {
	b := s.b
	now := time.Now()
	for _, f := range p.resumed() {
		// A resumed QoS 1/2 flow still holds the broker's quota. These
		// are on the wire already: they take room whether it is there or
		// not (never more than the caps: they were in flight under them).
		size, qos := p.room(f)
		f.st = win.add(size, s.pick.quotaQoS(qos), now)
		s.pick.resume(f.id, f.st)
		b.inflight.Add(1)
		b.sent.Add(1)
		pending.push(f)
	}
	// f is passed by pointer through the protocol interface, so it lives
	// on the heap: one for the sender, not one per message.
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
		wire := p.packetSize(m)
		if rc := p.refuse(m, wire); rc != 0 {
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
		if m.QoS > 0 && !p.claim(ctx, &f, m, size) {
			return
		}
		b.inflight.Add(1)
		f.st.sent = time.Now()
		complete, err := p.publish(ctx, &f, m)
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
