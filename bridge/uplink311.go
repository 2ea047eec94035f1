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

	// The sender's (direct.go): the last PUBLISH left to paho, until it
	// was written, and the buffer a direct PUBLISH is encoded in.
	pahoTail <-chan struct{}
	wbuf     []byte
	// paho's keepalive, told of the traffic it does not see (direct.go
	// inUse): the sender's last report of a write, the acker's of a
	// PUBACK read.
	keepalive          keepaliveClient
	toldSent, toldRead time.Time
}

// serve runs a connected MQTT 3.1.1 uplink until it is lost or ctx ends.
func (b *Bridge) serve(ctx context.Context, s *uplink311) error {
	return b.serveUplink(ctx, uplinkOps{
		s: s.uplink, quota: b.cfg.MaxInflightQoS2, quotaQoS: sameQoS,
		proto: s,
		drain: s.drain,
		bye:   func() { s.client.Disconnect(250) },
		close: s.slot.close,
	})
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

// resumed returns the publishes paho re-sent from the store on connect,
// oldest first (protocol); the QoS 1 publishes the bridge wrote itself
// are among them (direct.go). Nothing new is written directly before the
// last of them was.
func (s *uplink311) resumed() []inflight {
	s.pahoTail = s.b.store.resendTail()
	var fs []inflight
	for _, e := range s.b.store.pending() {
		fs = append(fs, inflight{id: e.rec, out: e, done: e.done})
	}
	return fs
}

// room returns the size and QoS of a resumed flow's stored packet
// (protocol): a PUBREL is a QoS 2 flow.
func (s *uplink311) room(f inflight) (int, byte) {
	qos := byte(1)
	if s.b.store.isQoS2(f.out) {
		qos = 2
	}
	return s.b.store.wireSize(f.out), qos
}

// packetSize is m's PUBLISH on this wire, exactly (protocol).
func (s *uplink311) packetSize(m spool.Message) int { return publishSize311(m) }

// refuse returns 0x95 packet too large for a message whose PUBLISH of
// size bytes would exceed max_packet_size, else 0 (protocol): a 3.1.1
// CONNACK announces no limit and a broker cannot refuse one message, it
// closes the connection (mosquitto's max_packet_size; AWS IoT's 128 KiB),
// and the bridge would send the same message first on every reconnect
// while everything behind it waits. So only the configured limit is
// known; without it such a message blocks the uplink, and the bridge
// says so (stuck.go) but does not drop it.
func (s *uplink311) refuse(_ spool.Message, size int) byte {
	if limit := s.b.cfg.MaxPacketSize; limit > 0 && size > limit {
		return rcPacketTooLarge
	}
	return 0
}

// claim announces record f.id to the store under a free wire id
// (protocol): a QoS 2 publish waits while a record 65535 apart holds its
// own (wireid.go). A QoS 1 publish is the bridge's own (direct.go), a
// QoS 2 one paho's.
func (s *uplink311) claim(ctx context.Context, f *inflight, m spool.Message, _ int) bool {
	for {
		w, busy := s.b.store.pickWire(f.id, m.QoS)
		if busy == nil {
			if m.QoS == 1 {
				f.out = s.b.store.announceDirect(f.id, w, m)
			} else {
				f.out = s.b.store.announce(f.id, w)
			}
			return true
		}
		if !s.waitForID(ctx, busy, s.b.store.requestWait(busy)) {
			return false
		}
	}
}

// publish writes a QoS 0 or 1 message itself (direct.go; QoS 0 is
// complete once written, QoS 1 at its PUBACK) and hands a QoS 2 one to
// paho (protocol). paho's Publish is asynchronous: its token reports a
// failure, and the acker waits for it; nothing ends here.
func (s *uplink311) publish(ctx context.Context, f *inflight, m spool.Message) (bool, error) {
	if m.QoS < 2 {
		wrote, err := s.writeDirect(ctx, f, m)
		return m.QoS == 0 && wrote, err
	}
	f.tok = s.client.Publish(m.Topic, m.QoS, m.Retain, m.Payload)
	if f.out != nil && !s.b.store.taken(f.out) {
		f.out = nil // refused by paho: its token carries the error
	}
	if f.out != nil {
		f.done = f.out.done
		s.pahoTail = f.out.written
	}
	return false, nil
}

// finish ends flow f for the acker (protocol). Only a PUBACK/PUBCOMP read
// from the wire completes a QoS 1/2 record (the store's Del): a paho token
// can complete without one (resume's claimID,
// TestTokenCompletedByResumeIsNotAnAck).
func (s *uplink311) finish(f inflight) bool {
	if f.out != nil && f.tok == nil {
		s.toldRead = s.inUse(s.toldRead, keepaliveClient.UpdateLastReceived) // its PUBACK was read (direct.go)
	}
	if f.out == nil {
		if f.st.qos > 0 { // paho refused it without an error: never the case in 1.5.1
			s.teardown(fmt.Errorf("publish of record %d completed without being stored", f.id))
			return false
		}
		s.b.completed(f.id) // QoS 0: complete once written
	}
	s.pick.done(f.id)
	return true
}
