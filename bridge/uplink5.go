package bridge

// Design note: the MQTT 5 uplink (Config.Protocol "5", or "auto" while the
// broker accepts version 5). It keeps every promise of the 3.1.1 uplink and
// adds the two MQTT 5 gives:
//
//   - the broker's Receive Maximum (CONNACK) bounds the QoS 1 and 2
//     publishes in flight [MQTT-4.9.0-2], so the bridge never exceeds the
//     quota a 3.1.1 broker enforces silently (mosquitto: 20); the byte
//     window (window.go) holds as well, and max_inflight_qos2 is not used;
//   - PUBACK/PUBREC carry a reason code: a refused message is never counted
//     as delivered. A temporary refusal (0x97 quota exceeded, ...) keeps it
//     in the spool and pauses the sender for a backoff, after which the
//     refused messages go first in their lanes; a permanent one (0x87 not authorized,
//     0x90 topic name invalid, ...) drops it, counted by reason
//     (Stats.UpstreamDropped, protocol.go).
//
// One goroutine (the owner's, as for 3.1.1) dials the connection itself
// (dial: deadline conn, batched writes with write_timeout per chunk, reads
// time-stamped for the ack watchdog; no packet id rewriting, see
// session5.go) and runs a fresh paho.golang Client on it per connection;
// the session state (session5.go) lives as long as the bridge. While
// connected, a sender and an acker run as for 3.1.1: the sender takes the
// records from the connection's picker (lanes.go: priority lanes, drain
// policy, byte budget and rate limit, the same code as over 3.1.1), the
// acker waits for each flow's end in send order and is the ack watchdog.
//
// With "auto" a broker that refuses version 5 (CONNACK 0x84, or the 3.1.1
// CONNACK "unacceptable protocol version" a 3.1.1-only broker sends) is
// connected with MQTT 3.1.1 at once, and the bridge stays on 3.1.1 until
// it restarts.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/edgegw/edgegw/bridge/spool"
)

// errV5Refused is why connect5 failed when the broker does not speak MQTT 5.
var errV5Refused = errors.New("upstream refuses MQTT 5")

// uplink5 is one MQTT 5 upstream connection.
type uplink5 struct {
	*uplink
	c    *paho.Client
	done <-chan struct{} // closed when paho's client has shut down

	recvMax   int  // the broker's Receive Maximum
	maxPacket int  // the broker's Maximum Packet Size (0: none)
	maxQoS    byte // the broker's Maximum QoS
	retain    bool // the broker takes retained messages

	bo backoff // after a temporary refusal; the acker's only
}

// ended5 is the session's report that the broker answered flow f (see
// session5): success acks its record, a permanent refusal drops it; a
// temporary one leaves it to the session's acker.
func (b *Bridge) ended5(f *flow5) {
	switch {
	case f.reason < 0x80:
		b.completed(f.rec)
	case permanentRefusal(f.reason):
		b.dropRefused(f.rec, f.reason)
	}
}

// dropRefused removes a record the upstream refused for good: it is
// counted by reason, never as delivered (Stats.Acked).
func (b *Bridge) dropRefused(rec spool.ID, rc byte) {
	if err := b.spool.Load().Drop(rec, spool.DropRefused); err != nil { // in the ledger as refused, not delivered
		b.log.Error("spool drop", "id", uint64(rec), "err", err)
	}
	b.upRefused.dropped[rc].Add(1)
	b.upRefusedLog.note(b.log, rc)
}

// inflight5 is an MQTT 5 publish handed to paho and not yet answered.
type inflight5 struct {
	id   spool.ID
	lane spool.Lane
	f    *flow5
	st   stamp
}

// quotaQoS is the QoS under which a publish takes room in the send
// window: over MQTT 5 the window's QoS 2 count is the broker's receive
// quota [MQTT-4.9.0-1], which QoS 1 and QoS 2 publishes take alike
// [MQTT-4.9.0-2].
func quotaQoS(qos byte) byte {
	if qos > 0 {
		return 2
	}
	return 0
}

// serve5 runs a connected MQTT 5 uplink until it is lost or ctx ends.
func (b *Bridge) serve5(ctx context.Context, s *uplink5) {
	b.serveUplink(ctx, uplinkOps{
		s: s.uplink, quota: s.recvMax, quotaQoS: quotaQoS,
		loops: func(win *sendWindow, maxCount int) (send, ack func(context.Context)) {
			pending := make(chan inflight5, maxCount)
			return func(ctx context.Context) { s.send(ctx, win, pending) }, func(ctx context.Context) { s.ack(ctx, win, pending) }
		},
		drain: s.drain,
		bye:   func() { _ = s.c.Disconnect(&paho.Disconnect{ReasonCode: 0}) },
		close: s.waitLost5,
	})
}

// drain waits, on a stop, for the flows in flight to end (bounded), as
// the 3.1.1 uplink's drain does.
func (s *uplink5) drain() {
	fs := s.b.sess5.pending()
	t := time.NewTimer(min(stopDrain, s.b.cfg.AckTimeout))
	defer t.Stop()
	for _, f := range fs {
		select {
		case <-f.done:
		case <-s.lost:
			return
		case <-t.C:
			s.b.log.Warn("stopping with publishes in flight; they are sent again after the restart", "in_flight", len(s.b.sess5.pending()))
			return
		}
	}
}

// send is the MQTT 5 sender: the flows re-sent on connect first (they hold
// room), then the spool in the picker's order (lanes.go: by lane, drain
// policy and budget, as over 3.1.1, with the temporarily refused records
// first in their lanes after a backoff), each within the send window and
// the receive quota.
func (s *uplink5) send(ctx context.Context, win *sendWindow, pending chan<- inflight5) {
	b := s.b
	now := time.Now()
	for _, f := range b.sess5.pending() {
		st := win.add(f.size, quotaQoS(f.qos), now)
		s.pick.resume(f.rec, st)
		b.inflight.Add(1)
		b.sent.Add(1)
		pending <- inflight5{id: f.rec, lane: f.lane, f: f, st: st}
	}
	for {
		id, m, err := s.pick.next(ctx)
		if err != nil {
			if ctx.Err() == nil {
				s.teardown(fmt.Errorf("spool: %w", err))
			}
			return
		}
		size := publishSize(m.Topic, len(m.Payload))
		if rc := s.refuseLocally(m, size); rc != 0 {
			b.dropRefused(id, rc)
			s.pick.done(id)
			continue
		}
		st, ok := win.acquire(ctx, size, quotaQoS(m.QoS))
		if !ok {
			return
		}
		var f *flow5
		for m.QoS > 0 && f == nil {
			var busy <-chan struct{}
			if f, busy = b.sess5.begin(id, m.QoS, m.Lane, size); f == nil {
				select { // a record 65535 older holds the packet id
				case <-busy:
				case <-ctx.Done():
					return
				}
			}
		}
		b.inflight.Add(1)
		st.sent = time.Now()
		p := &paho.Publish{QoS: m.QoS, Retain: m.Retain, Topic: m.Topic, Payload: m.Payload}
		if f != nil {
			p.PacketID = f.id
		}
		_, err = s.c.PublishWithOptions(ctx, p, paho.PublishOptions{Method: paho.PublishMethod_AsyncSend})
		b.sent.Add(1)
		if f == nil { // QoS 0: complete once written
			b.inflight.Add(-1)
			win.release(st, time.Now())
			if err != nil {
				s.teardown(fmt.Errorf("publish: %w", err))
				return
			}
			b.completed(id)
			s.pick.done(id)
			continue
		}
		if err != nil && !errors.Is(err, paho.ErrNetworkErrorAfterStored) {
			b.sess5.abandon(f) // not taken: the next connection sends the record again
			b.inflight.Add(-1)
			win.release(st, time.Now())
			s.teardown(fmt.Errorf("publish: %w", err))
			return
		}
		pending <- inflight5{id: id, lane: m.Lane, f: f, st: st}
	}
}

// refuseLocally returns the reason code a broker would refuse m with,
// from what its CONNACK announced, or 0: such a message is never sent
// (a client must not send it: [MQTT-3.2.2-15] size, [MQTT-3.2.2-11] QoS,
// [MQTT-3.2.2-14] retain; the broker would close the connection), it is
// dropped and counted.
func (s *uplink5) refuseLocally(m spool.Message, size int) byte {
	switch {
	case s.maxPacket > 0 && size > s.maxPacket:
		return rcPacketTooLarge
	case m.QoS > s.maxQoS:
		return rcQoSNotSupported
	case m.Retain && !s.retain:
		return rcRetainNotSupported
	}
	return 0
}

// retry schedules record rec of lane, temporarily refused, to be sent
// again, and holds the sender back for a backoff. The acker's only.
func (s *uplink5) retry(rec spool.ID, lane spool.Lane) {
	s.pick.again(rec, lane, time.Now().Add(s.bo.next()))
}

// accepted resets the refusal backoff. The acker's only.
func (s *uplink5) accepted() { s.bo.reset() }

// ack is the MQTT 5 acker and ack watchdog (see uplink311.ack): it waits
// for each flow's end in send order and frees its room in the window.
func (s *uplink5) ack(ctx context.Context, win *sendWindow, pending <-chan inflight5) {
	b := s.b
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		var f inflight5
		select {
		case f = <-pending:
		case <-ctx.Done():
			return
		}
		timer.Reset(time.Until(f.st.sent.Add(b.cfg.AckTimeout)))
	wait:
		for {
			select {
			case <-f.f.done:
				timer.Stop()
				break wait
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
		s.pick.done(f.id) // before a retry takes it again
		switch {
		case f.f.reset:
			// The broker lost the session (only at a connect, before this
			// acker ran): the record stays and is sent again.
		case f.f.reason >= 0x80 && !permanentRefusal(f.f.reason):
			b.upRefused.retried.Add(1)
			b.upRefusedLog.note(b.log, f.f.reason)
			s.retry(f.id, f.lane)
		case f.f.reason < 0x80:
			s.accepted()
		}
		b.inflight.Add(-1)
		win.release(f.st, time.Now())
	}
}
