package gateway

// The deferred acknowledgement: acknowledged means kept. A QoS 1/2 PUBLISH
// is answered (PUBACK/PUBREC) only once everything that must keep it has:
// the asynchronous sinks (a bridge's spool commits in groups), the state
// store's records (persist.go) and, under flow control, a congested
// subscriber's queue (session.deliver). The acknowledgement waits; the
// publisher's reader does not.
//
// The reader's pendingAck is the deferrer of the PUBLISH being routed
// (handlePublish). routeKept hands it to a keeper, which makes the message's
// keep on first need: deferAck is then called once and opens an ack slot.
// Every asynchronous sink, the state store and every waiting subscriber
// holds one count of the keep; the last finish gives the combined verdict
// (with any synchronous sink's error) to the slot (slotDone). Slots are
// released strictly in PUBLISH order; a message that was not kept gets a
// negative ack (v5) or no ack and a closed connection (3.1.1) (notKept).

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgegw/edgegw/gateway/packet"
)

// deferrer is a publisher whose acknowledgement can wait: deferAck is called
// at most once per message, when something (a sink, or a congested
// subscriber) needs the ack to wait, and returns the message's keep, whose
// last finish releases it. The client's reader implements it without
// allocating unless called, and then with one allocation (the slot and its
// keep together: a reading deferred at a sensor fleet's rate made three,
// and their garbage was a GC cycle every few seconds, issue 16).
type deferrer interface {
	deferAck() *keep
}

// keeper creates a message's keep on first need.
type keeper struct {
	d    deferrer
	k    *keep
	pos  uint64  // highest state-store record the acknowledgement waits for (persist.go)
	from *client // the reader routing its client's PUBLISH; nil for other routers (writer.go)
	hold *hold   // the message's copies wait for the verdicts it counts (hold.go)
}

// statePositioner is a deferrer whose message already has a state record
// to wait for (an inbound QoS 2 packet id).
type statePositioner interface{ statePos() uint64 }

func (h *keeper) get() *keep {
	if h == nil || h.d == nil {
		return nil
	}
	if h.k == nil {
		h.k = h.d.deferAck()
		h.k.left.Store(1) // the guard, released when routing is done
	}
	return h.k
}

// keep gathers the verdicts of the asynchronous sinks of one message.
type keep struct {
	left atomic.Int32 // outstanding verdicts, plus one guard while dispatching
	mu   sync.Mutex
	errs []error
	slot *ackSlot // told the combined verdict by the last finish
	// done, when set, is told it instead of a slot (exactlyonce.go).
	done func(error)
}

func (k *keep) finish(name string, err error) {
	if err != nil {
		k.mu.Lock()
		k.errs = append(k.errs, fmt.Errorf("sink %s: %w", name, err))
		k.mu.Unlock()
	}
	if k.left.Add(-1) == 0 {
		k.mu.Lock()
		err := errors.Join(k.errs...)
		k.mu.Unlock()
		if k.done != nil {
			k.done(err)
			return
		}
		k.slot.decide(err)
	}
}

// releaseWaiters lets waiting publishers' acknowledgements go.
func releaseWaiters(w []*keep) {
	for _, k := range w {
		k.finish("", nil)
	}
}

// pendingAck is the reader's deferrer for the PUBLISH being routed: a slot
// is only made when routing asks for one.
type pendingAck struct {
	c     *client
	qos   byte
	id    uint16
	topic string
	q2    *inbound2 // QoS 2: the session's state of this id, told the verdict
}

// deferAck opens an ack slot. It takes c.amu, so it must not be called with
// a session lock held (lock order: doc.go).
func (pa *pendingAck) deferAck() *keep {
	c := pa.c
	slot := &ackSlot{qos: pa.qos, id: pa.id, topic: pa.topic, c: c, sess: c.sess, q2: pa.q2}
	slot.keep.slot = slot
	c.amu.Lock()
	c.acks = append(c.acks, slot)
	c.amu.Unlock()
	return &slot.keep
}

// decide gives a deferred slot its verdict.
func (s *ackSlot) decide(err error) {
	if s.q2 != nil {
		s.sess.qos2Verdict(s.id, s.q2, err) // before the PUBREC goes out
	}
	s.c.slotDoneFlush(s, err) // written inline, not by a goroutine per ack (writer.go)
}

// statePos is the inbound QoS 2 id's record, which the PUBREC promises.
func (pa *pendingAck) statePos() uint64 {
	if pa.q2 != nil {
		return pa.q2.pos
	}
	return 0
}

// ackSlot is a QoS 1/2 acknowledgement waiting for the sinks' verdict.
// Acks are released strictly in PUBLISH order, the order MQTT asks of a
// client's PUBACKs and PUBRECs [MQTT-4.6.0-2], [MQTT-4.6.0-3].
type ackSlot struct {
	qos   byte
	id    uint16
	topic string
	code  packet.ReasonCode // the success code to send (0x10 when nothing matched)
	done  bool
	err   error

	// A slot opened by deferAck: whose it is, and the message's keep.
	c    *client
	sess *session  // c's session when the slot was opened
	q2   *inbound2 // QoS 2: the session's state of the id, told the verdict
	keep keep
}

func (c *client) addSlot(p *packet.Publish) *ackSlot {
	s := &ackSlot{qos: p.QoS, id: p.PacketID, topic: p.Topic}
	c.amu.Lock()
	c.acks = append(c.acks, s)
	c.amu.Unlock()
	return s
}

func (c *client) slotsPending() bool {
	c.amu.Lock()
	defer c.amu.Unlock()
	return len(c.acks) > 0
}

// slotDone records a verdict and sends every acknowledgement at the head
// of the queue that is now decided. Called from sink goroutines; the acks
// are queued on the control lane under amu so their order holds.
func (c *client) slotDone(s *ackSlot, err error) {
	c.amu.Lock()
	defer c.amu.Unlock()
	s.done, s.err = true, err
	n := 0
	for n < len(c.acks) && c.acks[n].done {
		h := c.acks[n]
		c.acks[n] = nil
		n++
		if h.err != nil {
			c.notKept(h.qos, h.id, h.topic, h.err)
			continue
		}
		c.ackID(h.qos, h.id, h.code)
	}
	c.acks = c.acks[n:]
	if len(c.acks) == 0 {
		c.acks = nil
	}
}

// ack answers a QoS 1/2 PUBLISH (nothing for QoS 0). Before v5 there is no
// negative ack: the message is acknowledged and dropped, as mosquitto does.
func (c *client) ack(p *packet.Publish, code packet.ReasonCode) error {
	c.ackID(p.QoS, p.PacketID, code)
	return nil
}

func (c *client) ackID(qos byte, id uint16, code packet.ReasonCode) {
	if c.version != packet.V5 {
		code = packet.Success
	}
	// The flow is closed in the count before its ack is queued: once
	// queued, the ack may reach the client, and its next PUBLISH be read,
	// before this goroutine (a sink's, often) gets any further.
	switch qos {
	case 1:
		c.in.done()
		c.sendAck(packet.PUBACK, id, code)
	case 2:
		if code.IsError() {
			c.in.done() // a refused QoS 2 flow ends at its PUBREC
		}
		c.sendAck(packet.PUBREC, id, code)
	}
}

// notKept handles a message a sink (bridge spool) could not store: a v5
// client gets a negative ack; a 3.1.1 client, which has no such thing, is
// disconnected without an ack so it sends the message again later — never
// acknowledge what was not kept.
func (c *client) notKept(qos byte, id uint16, topic string, err error) error {
	// Counted here and logged once per burst by the sink that refused
	// (a bridge's spool): one line per refused message would bury the
	// cause and wear the flash it is failing to write.
	c.srv.stats.notStored.Add(1)
	c.logf(slog.LevelDebug, "message not stored", "topic", topic, "err", err)

	if c.version == packet.V5 {
		c.ackID(qos, id, packet.ImplementationSpecificError)
		return nil
	}
	c.srv.refusals.closed(c.id, time.Now())
	c.closeWith(CloseNotStored, 0)
	return fmt.Errorf("publish %q not stored: %w", topic, err)
}

// refusalPace paces a 3.1.1 publisher closed because its message was not
// kept: it sends the message again on its next connection, and a client
// that reconnects at once would be refused and closed hundreds of times a
// second while the disk stays full. Its next CONNACK (by client id) waits
// until refusalPause after that close, on its own reader. A pause before
// the close would do the same but hold the refused message's place in the
// ack order and the reader with it; pacing the reconnect holds nothing.
type refusalPace struct {
	mu sync.Mutex
	at map[string]time.Time // client id -> when it was closed not_stored
}

const (
	refusalPause = time.Second
	refusalMax   = 4096 // client ids remembered; past it, those older than the pause go
)

func (p *refusalPace) closed(id string, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.at == nil {
		p.at = make(map[string]time.Time)
	}
	if len(p.at) >= refusalMax {
		for k, t := range p.at {
			if now.Sub(t) >= refusalPause {
				delete(p.at, k)
			}
		}
		if len(p.at) >= refusalMax {
			return
		}
	}
	p.at[id] = now
}

// wait is how long a CONNECT with client id waits before its CONNACK.
func (p *refusalPace) wait(id string, now time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.at[id]
	if !ok {
		return 0
	}
	if left := refusalPause - now.Sub(t); left > 0 {
		return left
	}
	delete(p.at, id)
	return 0
}
