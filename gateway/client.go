package gateway

// A client is one network connection speaking MQTT: its reader and writer
// goroutines are described in doc.go (Connections).

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/edgegw/edgegw/gateway/packet"
)

// Memory: an idle connection costs its reader goroutine's stack, this
// struct and its session. Everything sized by traffic (read buffer, decode
// scratch, write buffer, the writer's batch) is pooled and held only while
// there is input or output; the logger is built per log line (cold paths)
// rather than kept per connection.
type client struct {
	srv      *Server
	conn     net.Conn
	listener string
	certCN   string
	done     <-chan struct{} // the serving context's: closed when the server stops
	since    time.Time       // when the network connection was handed to the broker (status page)

	// Set by the reader while handling CONNECT, read-only afterwards (the
	// writer is first started after that).
	id          string
	username    string
	version     packet.Version
	keepAlive   time.Duration
	sess        *session
	window      int    // outgoing in-flight window: min(max_inflight, client receive maximum)
	maxOut      uint32 // client's v5 maximum packet size, 0 = no limit
	aliasMaxOut uint16 // client's v5 topic alias maximum

	// Reader-only.
	rs         *rstate // pooled; nil while idle between packets
	cr         connReader
	inAliases  map[uint16]string
	will       *Message
	willDelay  time.Duration
	willExpiry time.Duration
	keepWill   bool // v5 DISCONNECT with reason 0x04
	in         inboundFlows

	// Writer-only.
	outAliases map[string]uint16

	pa   pendingAck // reader-only: the deferrer of the PUBLISH being routed
	amu  sync.Mutex // guards acks (lock order: doc.go)
	acks []*ackSlot // QoS 1/2 acks waiting for a sink's verdict, in PUBLISH order

	wmu     sync.Mutex // guards the fields below
	ctrl    []ctrlItem
	spare   []ctrlItem
	writing bool // a writer runs: the goroutine, or an inline flush (writer.go)
	held    bool // the reader is handling input and flushes before it waits (writer.go)
	dirty   bool // work was added since the writer last looked
	ready   bool // CONNACK is queued: publishes may follow
	closing bool // a final DISCONNECT is queued; the writer closes after it
	closed  bool // the socket is closed; nothing more is written
	wwg     sync.WaitGroup

	// A close asked for while the reader was between accepting CONNECT
	// and queuing its CONNACK (a takeover in that window): carried out
	// right after the CONNACK is queued, so every accepted CONNECT is
	// answered.
	connecting   bool
	pendingClose *pendingClose

	readDone  chan struct{} // made by a takeover waiting for the reader; closed when it ends
	readEnded bool
	takenOver atomic.Bool // a takeover shut the read side (drainForTakeover)

	reason   atomic.Int32 // first CloseReason wins
	verdicts int32        // guarded by wmu: goroutines queuing acks for a verdict, flushing when done (writer.go)
}

func newClient(s *Server, conn net.Conn, listener, certCN string) *client {
	c := &client{
		srv:      s,
		conn:     conn,
		listener: listener,
		certCN:   certCN,
		since:    time.Now(),
	}
	c.cr.conn, c.cr.owner = conn, c
	if sc, ok := conn.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			c.cr.raw = raw
		}
	}
	return c
}

// logf logs one line with the connection's attributes. The child logger is
// built only when the level is enabled: logging is off the hot path, and a
// child logger kept per connection cost every idle connection ~0.5 KiB.
func (c *client) logf(level slog.Level, msg string, args ...any) {
	l := c.srv.log
	if !l.Enabled(context.Background(), level) {
		return
	}
	l = l.With("listener", c.listener, "remote", c.conn.RemoteAddr().String())
	if c.id != "" {
		l = l.With("client", c.id)
	}
	l.Log(context.Background(), level, msg, args...)
}

func (c *client) setReason(r CloseReason) { c.reason.CompareAndSwap(0, int32(r)) }

// sleep waits d on the reader's goroutine (the login tarpit); false when
// the server stopped meanwhile.
func (c *client) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.done:
		return false
	}
}

// serve runs the connection to its end.
func (c *client) serve(ctx context.Context) error {
	c.done = ctx.Done()
	c.srv.watch(ctx, c)
	defer c.srv.unwatch(ctx, c)

	err := c.readLoop()
	c.readerEnded()
	c.finish()
	r := CloseReason(c.reason.Load())
	c.srv.stats.closes[r].Add(1)
	if c.sess != nil {
		will := c.will
		if r == CloseClientDisconnect && !c.keepWill {
			will = nil // discarded on a normal DISCONNECT [MQTT-3.1.2-10]; 0x04 keeps it (set in handleDisconnect)
		}
		if will != nil && c.willExpiry > 0 {
			w := *will
			w.Expiry = time.Now().Add(c.willDelay + c.willExpiry)
			will = &w
		}
		c.srv.reg.detach(c, c.sess, will, c.willDelay)
	}
	if c.rs != nil {
		putRstate(c.rs)
		c.rs = nil
	}
	// At INFO like "client connected": every connect has its close line.
	c.logf(slog.LevelInfo, "client closed", "reason", r.String(), "err", err)
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// finish closes the socket and waits for the writer. A queued final
// DISCONNECT gets its chance to go out first (bounded by the write deadline).
func (c *client) finish() {
	c.wmu.Lock()
	final := c.closing && !c.closed
	if !final {
		c.closed = true
	}
	c.wmu.Unlock()
	if !final {
		c.conn.Close() // also unblocks a writer stuck in Write
	}
	c.wwg.Wait()
	c.wmu.Lock()
	c.closed = true
	c.wmu.Unlock()
	c.conn.Close()
}

// closeWith ends the connection. For v5 clients with a reason code it sends
// DISCONNECT first (server-initiated disconnect, 5.0 §3.14).
func (c *client) closeWith(r CloseReason, code packet.ReasonCode) {
	c.wmu.Lock()
	if c.closed || c.closing {
		c.wmu.Unlock()
		return
	}
	if !c.ready && c.connecting {
		if c.pendingClose == nil {
			c.pendingClose = &pendingClose{r, code}
		}
		c.wmu.Unlock()
		return
	}
	c.setReason(r)
	// ready first: version is published by it. Control packets already
	// queued, or being written, go out before the close (a CONNACK queued just before a
	// takeover: every accepted CONNECT gets its answer), then a v5
	// DISCONNECT with the reason.
	v5 := c.ready && c.version == packet.V5 && code != 0
	if v5 || (c.ready && (len(c.ctrl) > 0 || c.writing)) {
		if v5 {
			c.ctrl = append(c.ctrl, ctrlItem{p: &packet.Disconnect{ReasonCode: code}})
		}
		c.closing = true
		c.startWriterLocked()
		c.wmu.Unlock()
		return
	}
	c.closed = true
	c.wmu.Unlock()
	c.conn.Close()
}

// pendingClose is a closeWith deferred until the CONNACK is queued.
type pendingClose struct {
	r    CloseReason
	code packet.ReasonCode
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

// connReader is the source of a connection's pooled bufio.Reader. An idle
// connection waits for its next packet with a one-byte read onto the stack
// and no pooled buffer; that byte is replayed first (from the pooled
// rstate) once traffic arrives. On a plain socket (raw != nil) the reader can also make one
// non-blocking attempt (try): a busy connection refills its buffer with a
// single read, and only a connection with nothing waiting pays for the wait.
type connReader struct {
	conn  net.Conn
	raw   syscall.RawConn // nil unless conn is a plain socket
	try   bool            // the next read must not wait: errWouldBlock instead
	short bool            // the last read got a few bytes, all there were: a quiet connection
	busy  bool            // the last read filled the buffer: input is waiting (writer.go)
	idle  [1]byte         // waitIdle's read: a local array escapes, one allocation per idle wait
	owner *client         // flushes what its reader holds before a read that may wait (writer.go)
}

// errWouldBlock is what a non-blocking attempt returns when no input waits.
var errWouldBlock = errors.New("read would block")

// replayReader is what a pooled read buffer reads from: first what the
// idle wait read (pend), then the connection. It lives in the rstate, so an
// idle connection pays nothing for it.
type replayReader struct {
	pend []byte
	cr   *connReader
}

func (r *replayReader) Read(p []byte) (int, error) {
	if len(r.pend) > 0 && len(p) > 0 {
		n := copy(p, r.pend)
		r.pend = r.pend[n:]
		return n, nil
	}
	return r.cr.Read(p)
}

// Read reads for the pooled buffer. A read that may wait while the reader
// holds writes (a packet split across reads: the buffer ended mid-packet)
// first takes what has arrived without waiting and, if the rest is not
// there yet, flushes what the reader holds (writer.go): the messages it
// routed to other connections and its own acks must not wait for the rest
// of this client's packet (a client sending half a packet would otherwise
// hold up delivery to every subscriber it had just published to).
func (r *connReader) Read(p []byte) (int, error) {
	if r.try || len(p) == 0 || r.owner == nil || !r.owner.held {
		return r.read(p)
	}
	if r.raw != nil {
		r.try = true
		n, err := r.read(p)
		r.try = false
		if err != errWouldBlock {
			return n, err
		}
	}
	r.owner.flushOwed()
	n, err := r.read(p)
	r.owner.hold()
	return n, err
}

func (r *connReader) read(p []byte) (int, error) {
	if !r.try || r.raw == nil || len(p) == 0 {
		n, err := r.conn.Read(p)
		r.short = n <= quietReadSize && n < len(p)
		r.busy = n == len(p) && n > 1
		return n, err
	}
	var n int
	var err error
	if rerr := r.raw.Read(func(fd uintptr) bool {
		n, err = syscall.Read(int(fd), p)
		return true // never wait: that is the blocking path's job
	}); rerr != nil {
		return 0, rerr
	}
	switch {
	case err == syscall.EAGAIN || err == syscall.EINTR:
		return 0, errWouldBlock
	case err != nil:
		return 0, os.NewSyscallError("read", err)
	case n == 0:
		return 0, io.EOF
	}
	r.short = n <= quietReadSize && n < len(p)
	r.busy = n == len(p)
	return n, nil
}

const readBufSize = 4 << 10

// quietReadSize: a read of at most this many bytes that left the socket
// empty marks a quiet connection (a sensor's reading or two), which goes
// straight to its idle wait next time (reader.go refill).
const quietReadSize = 256

// rstate is what a connection's reader needs only while input flows: the
// read buffer and the packets decoded in place (about 5.5 KiB together).
type rstate struct {
	br   *bufio.Reader
	sc   packet.Scratch
	src  replayReader
	pre  [1]byte   // what the idle wait read (one byte: reader.go waitIdle), replayed first
	owed []*client // other connections to flush when this input is drained (writer.go)
}

var rstatePool = sync.Pool{New: func() any { return &rstate{br: bufio.NewReaderSize(nil, readBufSize)} }}

func getRstate(cr *connReader) *rstate {
	rs := rstatePool.Get().(*rstate)
	rs.src.cr = cr
	rs.br.Reset(&rs.src)
	return rs
}

func putRstate(rs *rstate) {
	rs.br.Reset(nil)
	rs.sc = packet.Scratch{} // drop references to payloads and strings
	clear(rs.owed)
	rs.src, rs.owed = replayReader{}, rs.owed[:0]
	rstatePool.Put(rs)
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

// errClosed is returned by the reader once the connection is closed by the
// server side (takeover, shutdown, write failure).
var errClosed = fmt.Errorf("connection closed by server")
