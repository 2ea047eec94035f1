package gateway

// The write side of a connection (see the package comment in doc.go).
//
// Why inline flushes: at sensor rates (issue 16) a writer goroutine started
// for every message on an otherwise idle connection, and ended right after,
// was a third of the broker's CPU (2,000 msg/s, one publisher to one
// subscriber: goroutine exit and the scheduler's search for work 19 %,
// goroutine start and its stack growth 11 % of the samples). Now the reader
// that routed a message (or queued an ack) writes it itself when its input
// is drained:
//
//   - while a reader handles its input, kicks for its own connection (acks,
//     a window moved by a PUBACK) start no goroutine (c.held), and the
//     connections it routed to are listed (c.rs.owed);
//   - when the input is drained, before the reader may wait, it flushes
//     them: claims the writer role (c.writing, so still one owner), gathers
//     the control lane and then the sendable messages as the writer
//     goroutine does, and makes one non-blocking write;
//   - a write the socket does not take whole, a batch that grew meanwhile,
//     a final DISCONNECT, or a connection without a plain socket (TLS,
//     WebSocket) is handed to a writer goroutine, whose every write has a
//     deadline. An inline write cannot wait, so it needs none: the routing
//     goroutine is never held up by a slow subscriber.
//
// A burst of messages from one read costs one write per receiving
// connection instead of a goroutine start, a write and a goroutine exit.

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/internal/sockio"
)

// maxBatch bounds how many bytes the writer gathers for one write.
const maxBatch = 64 << 10

// maxInlineTargets bounds how many other connections one reader flushes
// inline per drained input; further ones get writer goroutines, so a
// fan-out to many subscribers keeps its writes spread over the cores.
const maxInlineTargets = 4

// maxInlineQueue is the longest queue a routing reader flushes inline:
// a few readings. A longer queue means the subscriber is busy, and its
// writer goroutine drains it in parallel with the readers.
const maxInlineQueue = 16

// maxInlineRounds bounds the writes of one inline flush: work that arrived
// during a write (another reader's ack moving the window) is taken along,
// but a stream that keeps coming goes to a writer goroutine.
const maxInlineRounds = 3

// startWriterLocked marks new work and starts the writer goroutine if no
// writer runs. While the connection's own reader holds the flush (c.held),
// or a goroutine is queuing acks for a verdict (c.verdicts), it only marks
// the work: they flush it when done. A closing connection always gets its
// writer. Caller holds c.wmu.
func (c *client) startWriterLocked() {
	c.dirty = true
	if !c.writing && (!(c.held || c.verdicts > 0) || c.closing) {
		c.writing = true
		c.wwg.Add(1)
		c.srv.stats.writers.Add(1)
		go c.writeLoop(getWstate(), nil, false)
	}
}

// gather takes the control lane, then (unless closing) the session's
// sendable messages, and encodes them into buf. final: the connection is
// to be closed once buf is written; closed: the socket is closed already,
// and the writer role has been given up. Only the writer calls it.
func (c *client) gather(ws *wstate, buf []byte) (_ []byte, final, closed bool) {
	c.wmu.Lock()
	if c.closed {
		c.writing = false
		c.wmu.Unlock()
		return buf, false, true
	}
	c.dirty = false
	ctrl := c.ctrl
	c.ctrl = c.spare[:0]
	final, ready := c.closing, c.ready
	c.wmu.Unlock()

	var err error
	for i := range ctrl {
		if buf, err = c.appendCtrl(ws, buf, &ctrl[i]); err != nil {
			if errors.Is(err, errAboveClientMax) {
				c.logf(slog.LevelInfo, "closing: a packet exceeds the client's maximum packet size", "err", err)
				c.setReason(CloseProtocolError)
				final = true // what precedes it goes out; nothing after
				ready = false
				break
			}
			c.logf(slog.LevelError, "encode control packet", "err", err)
		}
	}
	clear(ctrl)
	c.wmu.Lock()
	c.spare = ctrl[:0]
	c.wmu.Unlock()

	if ready && !final && c.sess != nil {
		var rel []*keep
		var more bool
		ws.out, rel, more = c.sess.takeSendable(c, c.window, time.Now(), maxBatch, ws.out[:0])
		releaseWaiters(rel) // the queue drained: waiting publishers get their acks
		if more {
			c.wmu.Lock()
			c.dirty = true // a full batch: come back for the rest
			c.wmu.Unlock()
		}
		for i := range ws.out {
			buf = c.appendOutgoing(ws, buf, &ws.out[i])
		}
		clear(ws.out)
	}
	return buf, final, false
}

// writeLoop is the writer goroutine. It first writes pending (bytes an
// inline flush could not write; final: then close), then gathers and
// writes until there is no more work.
func (c *client) writeLoop(ws *wstate, pending []byte, final bool) {
	defer c.wwg.Done()
	buf := pending
	if buf == nil {
		// The pooled buffer: a writer that started from an empty slice
		// grew it anew to 64 KiB on every start, and fan-in at QoS 0 spent
		// 4 % of the broker's CPU in growslice and fell to half the rate.
		buf = ws.buf[:0]
	}
	defer func() {
		ws.buf = buf[:0]
		putWstate(ws)
	}()
	for {
		if len(buf) > 0 {
			c.conn.SetWriteDeadline(time.Now().Add(c.srv.opts.WriteTimeout))
			if _, err := c.conn.Write(buf); err != nil {
				c.writeFailed(err)
				return
			}
		}
		if final {
			c.wmu.Lock()
			c.closed = true
			c.writing = false
			c.wmu.Unlock()
			c.conn.Close()
			return
		}
		c.wmu.Lock()
		if !c.dirty && len(c.ctrl) == 0 {
			c.writing = false
			c.wmu.Unlock()
			return
		}
		c.wmu.Unlock()
		var closed bool
		if buf, final, closed = c.gather(ws, buf[:0]); closed {
			return
		}
	}
}

// writeFailed ends the connection after a failed write. The caller is the
// writer; it gives up the role here.
func (c *client) writeFailed(err error) {
	var ne net.Error
	timeout := errors.As(err, &ne) && ne.Timeout()
	if timeout {
		c.setReason(CloseWriteTimeout)
	} else {
		c.setReason(CloseWriteError)
	}
	c.wmu.Lock()
	c.closed = true
	c.writing = false
	c.wmu.Unlock()
	if timeout {
		abort(c.conn) // the stuck peer gets a reset, not the kernel's backlog
	} else {
		c.conn.Close() // the reader sees it and cleans up
	}
}

// flushInline writes c's pending work on the calling goroutine (a reader
// whose input is drained, holding no lock) if no writer runs: one
// non-blocking write; whatever it cannot finish at once goes to a writer
// goroutine.
func (c *client) flushInline() {
	c.wmu.Lock()
	if c.closed || c.closing || c.writing || !(c.dirty || len(c.ctrl) > 0) {
		c.wmu.Unlock()
		return
	}
	if c.cr.raw == nil { // TLS, WebSocket: writes may wait
		c.writing = true
		c.wwg.Add(1)
		c.srv.stats.writers.Add(1)
		go c.writeLoop(getWstate(), nil, false)
		c.wmu.Unlock()
		return
	}
	c.writing = true
	c.wwg.Add(1)
	c.wmu.Unlock()

	ws := getWstate()
	buf := ws.buf[:0]
	for round := 0; ; round++ {
		var final, closed bool
		buf, final, closed = c.gather(ws, buf[:0])
		if closed {
			ws.buf = buf[:0]
			putWstate(ws)
			c.wwg.Done()
			return
		}
		n, err := c.tryWrite(buf)
		if err != nil {
			ws.buf = buf[:0]
			putWstate(ws)
			c.writeFailed(err)
			c.wwg.Done()
			return
		}
		if n < len(buf) || final {
			// The socket is full (or the connection closes): the rest,
			// with a deadline, on a writer goroutine.
			buf = buf[:copy(buf, buf[n:])]
			c.srv.stats.writers.Add(1)
			go c.writeLoop(ws, buf, final)
			return
		}
		c.wmu.Lock()
		if !c.dirty && len(c.ctrl) == 0 {
			c.writing = false
			c.wmu.Unlock()
			ws.buf = buf[:0]
			putWstate(ws)
			c.wwg.Done()
			return
		}
		c.wmu.Unlock()
		if round == maxInlineRounds-1 {
			// Work keeps arriving: a writer goroutine takes over, and
			// this reader goes back to its own input.
			c.srv.stats.writers.Add(1)
			go c.writeLoop(ws, buf[:0], false)
			return
		}
	}
}

// tryWrite makes one non-blocking write of b to the plain socket and
// returns how much the kernel took (0 when its buffer is full). It goes
// around the poller (which would wait, and which refuses once an earlier
// write's deadline has passed); the writer role (c.writing) keeps it the
// only write in progress.
func (c *client) tryWrite(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	return sockio.TryWrite(c.cr.raw, b)
}

// hold is called by the reader before it handles input: kicks for its own
// connection are flushed by the reader when the input is drained.
func (c *client) hold() {
	c.wmu.Lock()
	c.held = true
	c.wmu.Unlock()
}

// unheld runs wait, a call that may block the reader in the middle of its
// input (a synchronous sink, the state store's sync window), with the
// reader's writes let go: what it holds is written first, and while it
// waits, work that other goroutines queue for its connection (an
// in-process message, an ack released by a sink's verdict) starts the
// writer goroutine instead of waiting for this reader. Reader only.
func (c *client) unheld(wait func() error) error {
	c.flushOwed()
	defer c.hold()
	return wait()
}

// flushOwed is called by the reader when its input is drained (and when
// it ends): the connections it routed to first, then its own.
func (c *client) flushOwed() {
	if c.rs != nil {
		owed := c.rs.owed
		for i, t := range owed {
			t.flushInline()
			owed[i] = nil
		}
		c.rs.owed = owed[:0]
	}
	c.wmu.Lock()
	c.held = false
	c.wmu.Unlock()
	c.flushInline()
}

// slotDoneFlush is slotDone for a verdict that arrives on another goroutine
// than the reader (a bridge spool's group commit, the state store, a
// subscriber's writer ending flow control): the acks it releases are
// written inline after it, with no lock held, instead of by a writer
// goroutine started for each (issue 16: 500 QoS 1 sensors were 500 writer
// goroutines a second). On the reader itself (c.held) the reader flushes
// them with the rest of its input. Called with no gateway lock held.
func (c *client) slotDoneFlush(s *ackSlot, err error) {
	c.wmu.Lock()
	c.verdicts++
	c.wmu.Unlock()
	c.slotDone(s, err)
	c.wmu.Lock()
	c.verdicts--
	held := c.held
	c.wmu.Unlock()
	if !held {
		c.flushInline()
	}
}

// sendAckFlush is sendAck from a callback on another goroutine than the
// reader (see slotDoneFlush). Called with no gateway lock held.
func (c *client) sendAckFlush(t packet.Type, id uint16, code packet.ReasonCode) {
	c.wmu.Lock()
	c.verdicts++
	c.wmu.Unlock()
	c.sendAck(t, id, code)
	c.wmu.Lock()
	c.verdicts--
	held := c.held
	c.wmu.Unlock()
	if !held {
		c.flushInline()
	}
}

// owe records that the reader of c routed work to t: t is flushed when c's
// input is drained. Called on c's reader only.
func (c *client) owe(t *client) {
	if t == c {
		t.kick() // held: flushed with c's own work
		return
	}
	t.wmu.Lock()
	if t.closed || t.closing {
		t.wmu.Unlock()
		return
	}
	t.dirty = true
	idle := !t.writing
	t.wmu.Unlock()
	if !idle {
		return // its writer sees dirty
	}
	if c.rs == nil {
		t.kick() // not handling input (cannot happen while routing; defensive)
		return
	}
	for _, o := range c.rs.owed {
		if o == t {
			return
		}
	}
	if len(c.rs.owed) < maxInlineTargets {
		c.rs.owed = append(c.rs.owed, t)
		return
	}
	t.kick()
}

// wake tells the writer of c that a message was queued for it (queued:
// its queue's length now). The routing reader flushes it itself (owe) when
// it routes its client's PUBLISH at a sensor's pace: the queue is short and
// the publisher's last read did not fill the read buffer. Any other router
// (bridge, will, retained), a queue that is filling up, or a publisher
// with more input waiting (full load: the subscriber's writer belongs on
// the other core, in 64 KiB batches, not in small writes on the
// publishers' readers; fan-in at QoS 0 fell from 7x to 2.6x mosquitto's
// rate without this) kicks the writer goroutine.
func (h *keeper) wake(c *client, queued int) {
	if h != nil && h.from != nil && queued <= maxInlineQueue && !h.from.cr.busy {
		h.from.owe(c)
		return
	}
	c.kick()
}

// kick tells the writer there may be something to send.
func (c *client) kick() {
	c.wmu.Lock()
	if !c.closed && !c.closing {
		c.startWriterLocked()
	}
	c.wmu.Unlock()
}

// ctrlItem is one packet on the control lane: either p, or an
// acknowledgement (PUBACK, PUBREC, PUBREL, PUBCOMP) kept by value so the
// busiest control packets cost no allocation; the writer encodes those from
// its pooled scratch.
type ctrlItem struct {
	p    packet.Packet
	ack  packet.Type
	id   uint16
	code packet.ReasonCode
}

// sendCtrl queues a control packet on the lane that is never gated.
func (c *client) sendCtrl(p packet.Packet) { c.queueCtrl(ctrlItem{p: p}) }

// sendAck queues an acknowledgement of type t for packet id.
func (c *client) sendAck(t packet.Type, id uint16, code packet.ReasonCode) {
	c.queueCtrl(ctrlItem{ack: t, id: id, code: code})
}

// queueCtrlQuiet queues it without starting a writer: the caller kicks
// once more work is queued behind it. A running writer still sees it.
func (c *client) queueCtrlQuiet(it ctrlItem) {
	c.wmu.Lock()
	if !c.closed && !c.closing {
		c.ctrl = append(c.ctrl, it)
		c.dirty = true
	}
	c.wmu.Unlock()
}

func (c *client) queueCtrl(it ctrlItem) {
	c.wmu.Lock()
	if !c.closed && !c.closing {
		c.ctrl = append(c.ctrl, it)
		c.startWriterLocked()
	}
	c.wmu.Unlock()
}

// errAboveClientMax is appendCtrl's refusal of a control packet larger than
// the client's v5 Maximum Packet Size: it cannot be sent [MQTT-3.1.2-24],
// and the exchange cannot go on without it, so the connection is closed.
var errAboveClientMax = errors.New("control packet above the client's maximum packet size")

// appendCtrl encodes one control-lane item. Only the writer calls it.
func (c *client) appendCtrl(ws *wstate, buf []byte, it *ctrlItem) ([]byte, error) {
	p := it.p
	if p == nil {
		switch it.ack {
		case packet.PUBACK:
			ws.puback = packet.Puback{PacketID: it.id, ReasonCode: it.code}
			p = &ws.puback
		case packet.PUBREC:
			ws.pubrec = packet.Pubrec{PacketID: it.id, ReasonCode: it.code}
			p = &ws.pubrec
		case packet.PUBREL:
			ws.pubrel = packet.Pubrel{PacketID: it.id, ReasonCode: it.code}
			p = &ws.pubrel
		default:
			ws.pubcomp = packet.Pubcomp{PacketID: it.id, ReasonCode: it.code}
			p = &ws.pubcomp
		}
	}
	if c.maxOut > 0 && packet.Size(p, c.version) > int(c.maxOut) {
		return buf, fmt.Errorf("%w: %s of %d bytes, maximum %d", errAboveClientMax, p.Type(), packet.Size(p, c.version), c.maxOut)
	}
	return packet.Append(buf, p, c.version)
}

// appendOutgoing encodes one session step. Only the writer calls it.
func (c *client) appendOutgoing(ws *wstate, buf []byte, o *outgoing) []byte {
	if o.pubrel {
		ws.pubrel = packet.Pubrel{PacketID: o.id}
		b, _ := packet.Append(buf, &ws.pubrel, c.version)
		return b
	}
	m := o.q.msg
	p := &ws.pub
	*p = packet.Publish{
		Dup:      o.dup,
		QoS:      o.q.qos,
		Retain:   o.q.retain,
		Topic:    m.Topic,
		PacketID: o.id,
		Payload:  m.Payload,
	}
	if c.version == packet.V5 {
		if m.Props != nil {
			p.Props = *m.Props
		}
		if len(o.q.subIDs) > 0 {
			p.Props.SubscriptionIDs = o.q.subIDs
			p.Props.Set(packet.PropSubscriptionID)
		}
		if !m.Expiry.IsZero() {
			left := time.Until(m.Expiry)
			if left <= 0 && o.dup && o.q.qos == 2 {
				// A QoS 2 PUBLISH already sent is not expired
				// [MQTT-4.3.3-7]: the receiver may hold its packet id
				// until the PUBREL [MQTT-4.3.3-10], so the flow goes on,
				// with the shortest interval the property can say.
				left = time.Second
			}
			if left <= 0 {
				c.dropOutgoing(o)
				return buf
			}
			p.Props.MessageExpiry = uint32((left + time.Second - 1) / time.Second)
			p.Props.Set(packet.PropMessageExpiry) // remaining time [MQTT-3.3.2-6]
		}
		newAlias := false
		if c.aliasMaxOut > 0 {
			if a, ok := c.outAliases[m.Topic]; ok {
				p.Topic = ""
				p.Props.TopicAlias = a
				p.Props.Set(packet.PropTopicAlias)
			} else if len(c.outAliases) < int(c.aliasMaxOut) {
				p.Props.TopicAlias = uint16(len(c.outAliases) + 1)
				p.Props.Set(packet.PropTopicAlias)
				newAlias = true
			}
		}
		// Checked with every property in place, the alias included
		// [MQTT-3.1.2-24]: a PUBLISH the client cannot take is dropped for
		// it as if sent (its alias is not recorded: the client never saw it).
		if c.maxOut > 0 && packet.Size(p, c.version) > int(c.maxOut) {
			c.dropOutgoing(o)
			return buf
		}
		if newAlias {
			if c.outAliases == nil {
				c.outAliases = make(map[string]uint16)
			}
			c.outAliases[strings.Clone(m.Topic)] = p.Props.TopicAlias // the topic may share a payload's memory
		}
	} else if c.maxOut > 0 && packet.Size(p, c.version) > int(c.maxOut) {
		c.dropOutgoing(o) // above limits.max_packet_size (a bridge's message: not checked on its way in)
		return buf
	}
	b, err := packet.Append(buf, p, c.version)
	if err != nil {
		c.logf(slog.LevelError, "encode publish", "topic", m.Topic, "err", err)
		c.dropOutgoing(o)
		return buf
	}
	c.srv.stats.sent.Add(1)
	return b
}

func (c *client) dropOutgoing(o *outgoing) {
	if o.q.msg.expired(time.Now()) {
		c.srv.stats.drop(dropExpired)
	} else {
		c.srv.stats.drop(dropTooLarge)
	}
	if o.id != 0 {
		c.sess.dropUnsendable(c, o.id)
		c.kick() // the window moved
	}
}

// wstate is what a connection's writer needs only while it runs: the batch
// buffer, the outgoing PUBLISH it encodes from and the session steps taken.
type wstate struct {
	buf     []byte
	pub     packet.Publish
	puback  packet.Puback
	pubrec  packet.Pubrec
	pubrel  packet.Pubrel
	pubcomp packet.Pubcomp
	out     []outgoing
}

var wstatePool = sync.Pool{New: func() any { return &wstate{buf: make([]byte, 0, 4<<10)} }}

func getWstate() *wstate { return wstatePool.Get().(*wstate) }

func putWstate(ws *wstate) {
	ws.pub = packet.Publish{}
	ws.puback, ws.pubrec, ws.pubrel, ws.pubcomp = packet.Puback{}, packet.Pubrec{}, packet.Pubrel{}, packet.Pubcomp{}
	if cap(ws.buf) > 1<<20 {
		ws.buf = make([]byte, 0, 4<<10) // let an unusually large batch buffer go
	}
	if cap(ws.out) > 4096 {
		ws.out = nil
	}
	ws.buf, ws.out = ws.buf[:0], ws.out[:0]
	wstatePool.Put(ws)
}
