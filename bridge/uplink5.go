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
		b.completedByPeer(f.rec)
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
func (b *Bridge) serve5(ctx context.Context, s *uplink5) error {
	return b.serveUplink(ctx, uplinkOps{
		s: s.uplink, quota: s.recvMax, quotaQoS: quotaQoS,
		proto: s,
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

// resumed returns the flows the session re-sent on connect, oldest record
// first (protocol).
func (s *uplink5) resumed() []inflight {
	var fs []inflight
	for _, f := range s.b.sess5.pending() {
		fs = append(fs, inflight{id: f.rec, lane: f.lane, f: f, done: f.done})
	}
	return fs
}

// room returns a resumed flow's size and QoS (protocol).
func (s *uplink5) room(f inflight) (int, byte) { return f.f.size, f.f.qos }

// packetSize is m's PUBLISH on this wire, exactly (protocol).
func (s *uplink5) packetSize(m spool.Message) int { return publishSize5(m) }

// refuse returns the reason code a broker would refuse m (a PUBLISH of
// size bytes) with, from what its CONNACK announced and max_packet_size
// (the smaller limit applies), or 0 (protocol): such a message is never
// sent (a client must not send it: [MQTT-3.2.2-15] size, [MQTT-3.2.2-11]
// QoS, [MQTT-3.2.2-14] retain; the broker would close the connection), it
// is dropped and counted.
func (s *uplink5) refuse(m spool.Message, size int) byte {
	limit := s.maxPacket
	if c := s.b.cfg.MaxPacketSize; c > 0 && (limit == 0 || c < limit) {
		limit = c
	}
	switch {
	case limit > 0 && size > limit:
		return rcPacketTooLarge
	case m.QoS > s.maxQoS:
		return rcQoSNotSupported
	case m.Retain && !s.retain:
		return rcRetainNotSupported
	}
	return 0
}

// claim registers the flow of record f.id in the session under its
// packet id, once no flow 65535 records older holds it (protocol).
func (s *uplink5) claim(ctx context.Context, f *inflight, m spool.Message, size int) bool {
	for f.f == nil {
		var busy <-chan struct{}
		if f.f, busy = s.b.sess5.begin(f.id, m.QoS, m.Lane, size); f.f == nil && !s.waitForID(ctx, busy, s.b.sess5.requestWait(busy)) {
			return false
		}
	}
	f.done = f.f.done
	return true
}

// publish hands m to paho.golang under its flow's packet id (protocol).
// Unlike paho's, its Publish returns once the packet is written (or
// stored, for QoS 1/2), so a QoS 0 publish is complete here; a QoS 1/2
// one paho.golang did not take is abandoned, and the next connection
// sends its record again.
func (s *uplink5) publish(ctx context.Context, f *inflight, m spool.Message) (bool, error) {
	p := publish5(m)
	if f.f != nil {
		p.PacketID = f.f.id
	}
	_, err := s.c.PublishWithOptions(ctx, p, paho.PublishOptions{Method: paho.PublishMethod_AsyncSend})
	if f.f == nil { // QoS 0: complete once written
		return true, err
	}
	if err != nil && !errors.Is(err, paho.ErrNetworkErrorAfterStored) {
		s.b.sess5.abandon(f.f) // not taken: the next connection sends the record again
		return false, err
	}
	return false, nil
}

// publish5 is the PUBLISH of m as uplink5 publish sends it, packet id
// aside: publishSize5 counts exactly this (TestPublishSizeIsTheWire), so a
// property added here must be counted there.
func publish5(m spool.Message) *paho.Publish {
	return &paho.Publish{QoS: m.QoS, Retain: m.Retain, Topic: m.Topic, Payload: m.Payload}
}

// retry schedules record rec of lane, temporarily refused, to be sent
// again, and holds the sender back for a backoff. The acker's only.
func (s *uplink5) retry(rec spool.ID, lane spool.Lane) {
	s.pick.again(rec, lane, time.Now().Add(s.bo.next()))
}

// accepted resets the refusal backoff. The acker's only.
func (s *uplink5) accepted() { s.bo.reset() }

// finish ends flow f for the acker (protocol): the session has acked or
// dropped its record already (ended5); a temporary refusal sends it again
// after a backoff.
func (s *uplink5) finish(f inflight) bool {
	b := s.b
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
	return true
}
