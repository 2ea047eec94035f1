package bridge

// Design note: the bridge writes its QoS 0 and QoS 1 publishes itself
// over MQTT 3.1.1 (issue 16). paho hands a publish through three
// goroutines before it is written (Publish -> its forwarder -> its
// outgoing writer) and a PUBACK through two before its store's Del (its
// reader -> its comms goroutine), each hand-off a wake-up; at a sensor
// fleet's 500 msg/s that chain was the largest part of the bridge's CPU.
// A QoS 0 or 1 publish needs none of it: the sender encodes the PUBLISH
// under its wire id (wireid.go) and writes it to the connection's batch
// writer (the same Write paho's packets take: write deadline, budget,
// back-pressure); the connection's reader, which sees every PUBACK
// already (ackRewriter), completes it at its PUBACK (completeDirect) and
// does not pass that PUBACK to paho. Nothing else completes it.
//
// The session is kept as paho keeps it. A direct QoS 1 publish is an
// entry of the uplinkStore like paho's (by wire id; the acker waits for
// it to end, the ack watchdog sees it, a QoS 2 publish waits for its id,
// a stop's drain waits for it). Its done channel is made only for those
// other waiters (doneLocked): the acker, which waits for every one of
// them, is woken by one channel of the store's (directEnded) and looks at
// the flow's ended flag, so a reading costs no channel of its own.
// When a connection ends it stays there;
// on the next connect with a resumed session (clean_session false) paho
// asks the store for what to re-send (All), and the store hands the
// direct entries to paho then, as stored PUBLISHes under paho ids of
// their own (adoptDirectLocked). So paho re-sends them exactly as it
// re-sent every QoS 1 publish before: first, before anything new, in the
// order of their spool records mixed with the QoS 2 flows, under their
// original wire ids (rewriteOutgoing) with DUP set (3.1.1)
// [MQTT-4.4.0-1] [MQTT-3.3.1-1]; their PUBACKs then go to paho and end
// them through Del. With a clean session paho calls Reset instead, which
// drops them, and the sender sends their records again as new messages.
//
// Order: the sender writes a direct publish only once the last PUBLISH
// it left to paho (a QoS 2 one, or one re-sent on connect) has passed
// the connection's Write (outbound.written, markWritten): paho's chain
// is slower, and a direct write must not overtake it.
//
// QoS 2 stays with paho: its exactly-once across reconnects rests on
// paho's store re-sending the PUBLISH or PUBREL under the same id
// (session311.go). MQTT 5 is paho.golang's (uplink5.go).
//
// Measured with bench/run.sh's sensors scenario (1,000 clients, a 100-byte
// QoS 1 reading every 2 s each, 500 msg/s, bridged at QoS 1 to a local
// mosquitto, spool on disk; 10 s; the shared 2-core machine at load 2.5
// to 2.8), three runs each, alternating with the paho path (main at
// e2df27e): gateway CPU 10.4, 9.7, 9.8 % of a core (mean 10.0) against
// 11.2, 11.1, 10.0 % (mean 10.8), 195-208 against 201-225 µs per message;
// wakeups 1,206-1,389/s against 1,215-1,445/s. About -0.8 points, less
// than a single run's noise (one paho run was 10.0 %). Four more pairs on
// a quieter machine (load 0.5 to 1.2, before the review's keepalive
// fix): 9.4, 10.0, 10.2, 10.4 % (mean 10.0) against 10.7, 11.3, 12.8,
// 11.0 % (mean 11.45), lower in every pair (bench/README.md, "Issue 16,
// session 6"); an earlier experiment on an older main measured -1.6 to
// -2.2.

import (
	"context"
	"time"

	"github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/edgegw/edgegw/bridge/spool"
)

// announceDirect registers the QoS 1 publish of record rec (message m)
// that the sender writes itself under wire id w.
func (s *uplinkStore) announceDirect(rec spool.ID, w uint16, m spool.Message) *outbound {
	e := &outbound{rec: rec, wire: w, direct: true, msg: directMsg{topic: m.Topic, payload: m.Payload, retain: m.Retain}}
	s.mu.Lock()
	s.wire[w], s.picked = e, 0
	s.mu.Unlock()
	return e
}

// completeDirect completes the direct publish under wire id w, if there
// is one: its PUBACK was read. false: w is not a direct publish (the ack
// is paho's, or unknown).
func (s *uplinkStore) completeDirect(w uint16) bool {
	s.mu.Lock()
	e := s.wire[w]
	if e == nil || !e.direct {
		s.mu.Unlock()
		return false
	}
	delete(s.wire, w)
	s.mu.Unlock()
	s.complete(e.rec) // before anyone hears it ended
	s.mu.Lock()
	e.ended.Store(true)
	done := e.done // made if something waits (doneLocked)
	s.mu.Unlock()
	if done != nil {
		close(done)
	}
	select { // the acker looks at ended once woken
	case s.directEnded <- struct{}{}:
	default: // a wake-up is pending: it will
	}
	return true
}

// adoptDirectLocked hands the direct publishes to paho for its resume:
// each becomes a stored QoS 1 PUBLISH under a free paho packet id (paho
// claims the ids it re-sends; it has claimed none before resume), keeping
// its wire id and its done (made now: Del closes it). Caller holds mu.
func (s *uplinkStore) adoptDirectLocked() {
	var pid uint16
	for _, e := range s.wire {
		if !e.direct {
			continue
		}
		for pid++; s.out[pid] != nil; pid++ {
		}
		p := packets.NewControlPacket(packets.Publish).(*packets.PublishPacket)
		p.Qos, p.Retain, p.TopicName, p.Payload, p.MessageID = 1, e.msg.retain, e.msg.topic, e.msg.payload, pid
		e.pid, e.pkt, e.direct, e.msg = pid, p, false, directMsg{}
		e.doneLocked() // the resumed flow's acker waits on it
		s.out[pid] = e
	}
}

// markWritten is told by the connection's Write that the PUBLISH paho
// numbered pid has been handed to the batch writer.
func (s *uplinkStore) markWritten(pid uint16) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.out[pid]; e != nil && e.written != nil && !e.wrote {
		close(e.written)
		e.wrote = true
	}
}

// resendTail returns what to wait on until the PUBLISHes paho re-sends on
// connect have passed the connection's Write (nil: nothing). paho writes
// them one by one in record order, so the last is enough.
func (s *uplinkStore) resendTail() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	es := s.sortedLocked()
	for i := len(es) - 1; i >= 0; i-- {
		if _, ok := es[i].pkt.(*packets.PublishPacket); ok {
			return es[i].written
		}
	}
	return nil
}

// writeDirect writes m (QoS 0 or 1; f.out its store entry for QoS 1)
// to the connection's batch writer, once the last PUBLISH left to paho
// was written (order). false and no error: ctx ended first, nothing was
// written.
func (s *uplink311) writeDirect(ctx context.Context, f *inflight, m spool.Message) (bool, error) {
	var w uint16
	if f.out != nil {
		w = f.out.wire
		f.done, f.direct = s.b.store.directEnded, true
	}
	if s.pahoTail != nil {
		select {
		case <-s.pahoTail:
		case <-ctx.Done():
			return false, nil // the connection is ending: the sender stops
		}
		s.pahoTail = nil
	}
	s.slot.mu.Lock()
	c := s.slot.conn
	s.slot.mu.Unlock()
	if c == nil {
		return false, errWriterClosed
	}
	s.wbuf = appendPublish311(s.wbuf[:0], m, w)
	n, err := c.w.Write(s.wbuf)
	c.budget.wrote(n)
	if err == nil {
		s.toldSent = s.inUse(s.toldSent, keepaliveClient.UpdateLastSent)
	}
	return err == nil, err
}

// keepaliveClient is what paho's client (1.5.1) offers to be told of
// traffic: its keepalive pings when it has neither sent nor received
// anything for a keepalive period, and it sees neither the PUBLISHes the
// bridge writes itself nor their PUBACKs. Pinging a busy connection is
// not only useless (any packet counts, (3.1.1) [MQTT-3.1.2-23]): on a
// slow link the PINGREQ waits behind the window's bytes and its PINGRESP
// behind their PUBACKs, longer than the ping timeout, and paho drops a
// healthy uplink in the middle of a drain (TestBusyUplinkNeedsNoPing).
type keepaliveClient interface {
	UpdateLastSent()
	UpdateLastReceived()
}

// inUse tells paho's keepalive (update) of traffic, at most every
// quarter keepalive (each report allocates), and returns when it last
// told it.
func (s *uplink311) inUse(told time.Time, update func(keepaliveClient)) time.Time {
	if s.keepalive == nil {
		return told
	}
	now := time.Now()
	if now.Sub(told) < s.b.cfg.KeepAlive/4 {
		return told
	}
	update(s.keepalive)
	return now
}

// appendPublish311 appends an MQTT 3.1.1 PUBLISH of m at QoS 0 or 1 (w:
// its packet id, for QoS 1), DUP clear: a first send [MQTT-3.3.1-2].
func appendPublish311(buf []byte, m spool.Message, w uint16) []byte {
	h := byte(0x30 | m.QoS<<1)
	if m.Retain {
		h |= 1
	}
	rl := 2 + len(m.Topic) + len(m.Payload)
	if m.QoS > 0 {
		rl += 2
	}
	buf = append(buf, h)
	for {
		b := byte(rl & 0x7f)
		rl >>= 7
		if rl > 0 {
			b |= 0x80
		}
		buf = append(buf, b)
		if rl == 0 {
			break
		}
	}
	buf = append(buf, byte(len(m.Topic)>>8), byte(len(m.Topic)))
	buf = append(buf, m.Topic...)
	if m.QoS > 0 {
		buf = append(buf, byte(w>>8), byte(w))
	}
	return append(buf, m.Payload...)
}
