package gateway

// A client is one network connection speaking MQTT. The goroutine that calls
// Server.ServeConn is its reader: it decodes and handles packets. Its writer
// goroutine owns the write side of the socket and exists only while there is
// something to write: it is started when work appears, drains the control
// lane and the session's sendable messages, and exits when both are empty,
// never two at once. Everything else only enqueues (field report 000: acks
// never wait behind a PUBLISH; only new PUBLISH packets are gated by the
// in-flight window).

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgegw/edgegw/gateway/packet"
)

type client struct {
	srv      *Server
	conn     net.Conn
	listener string
	certCN   string
	log      *slog.Logger

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
	br         *bufio.Reader // pooled; nil while idle between packets
	pr         prefixReader
	inAliases  map[uint16]string
	will       *Message
	willDelay  time.Duration
	willExpiry time.Duration
	keepWill   bool // v5 DISCONNECT with reason 0x04

	// Writer-only.
	outAliases map[string]uint16
	pub        packet.Publish // scratch, reused for every outgoing PUBLISH
	out        []outgoing

	amu  sync.Mutex // guards acks; taken before wmu, never after
	acks []*ackSlot // QoS 1/2 acks waiting for a sink's verdict, in PUBLISH order

	wmu     sync.Mutex // guards the fields below
	ctrl    []packet.Packet
	spare   []packet.Packet
	writing bool // a writer goroutine is running
	dirty   bool // work was added since the writer last looked
	ready   bool // CONNACK is queued: publishes may follow
	closing bool // a final DISCONNECT is queued; the writer closes after it
	closed  bool // the socket is closed; nothing more is written
	wwg     sync.WaitGroup

	reason atomic.Int32 // first CloseReason wins
}

func newClient(s *Server, conn net.Conn, listener, certCN string) *client {
	c := &client{
		srv:      s,
		conn:     conn,
		listener: listener,
		certCN:   certCN,
		log:      s.log.With("listener", listener, "remote", conn.RemoteAddr().String()),
	}
	c.pr.conn = conn
	return c
}

func (c *client) setReason(r CloseReason) { c.reason.CompareAndSwap(0, int32(r)) }

// serve runs the connection to its end.
func (c *client) serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() {
		c.closeWith(CloseShutdown, packet.ServerShuttingDown)
	})
	defer stop()

	err := c.readLoop()
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
	if c.br != nil {
		putReader(c.br)
		c.br = nil
	}
	lvl := slog.LevelInfo
	if r == CloseClientDisconnect || r == CloseShutdown {
		lvl = slog.LevelDebug
	}
	c.log.Log(context.Background(), lvl, "client closed", "client", c.id, "reason", r.String(), "err", err)
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
// DISCONNECT first (server-initiated disconnect, v5 3.14).
func (c *client) closeWith(r CloseReason, code packet.ReasonCode) {
	c.wmu.Lock()
	if c.closed || c.closing {
		c.wmu.Unlock()
		return
	}
	c.setReason(r)
	if c.ready && c.version == packet.V5 && code != 0 { // ready first: version is published by it
		c.ctrl = append(c.ctrl, &packet.Disconnect{ReasonCode: code})
		c.closing = true
		c.startWriterLocked()
		c.wmu.Unlock()
		return
	}
	c.closed = true
	c.wmu.Unlock()
	c.conn.Close()
}

// kick tells the writer there may be something to send.
func (c *client) kick() {
	c.wmu.Lock()
	if !c.closed && !c.closing {
		c.startWriterLocked()
	}
	c.wmu.Unlock()
}

// sendCtrl queues a control packet on the lane that is never gated.
func (c *client) sendCtrl(p packet.Packet) {
	c.wmu.Lock()
	if !c.closed && !c.closing {
		c.ctrl = append(c.ctrl, p)
		c.startWriterLocked()
	}
	c.wmu.Unlock()
}

// startWriterLocked marks new work and starts the writer if none runs.
// Caller holds c.wmu.
func (c *client) startWriterLocked() {
	c.dirty = true
	if !c.writing {
		c.writing = true
		c.wwg.Add(1)
		go c.writeLoop()
	}
}

// maxBatch bounds how many bytes the writer gathers for one write.
const maxBatch = 64 << 10

func (c *client) writeLoop() {
	defer c.wwg.Done()
	bp := getWriteBuf()
	buf := (*bp)[:0]
	defer func() {
		*bp = buf
		putWriteBuf(bp)
	}()
	for {
		c.wmu.Lock()
		if c.closed {
			c.writing = false
			c.wmu.Unlock()
			return
		}
		c.dirty = false
		ctrl := c.ctrl
		c.ctrl = c.spare[:0]
		final, ready := c.closing, c.ready
		c.wmu.Unlock()

		buf = buf[:0]
		var err error
		for _, p := range ctrl {
			if buf, err = packet.Append(buf, p, c.version); err != nil {
				c.log.Error("encode control packet", "client", c.id, "err", err)
			}
		}
		clear(ctrl)
		c.wmu.Lock()
		c.spare = ctrl[:0]
		c.wmu.Unlock()

		if ready && !final && c.sess != nil {
			c.out = c.sess.takeSendable(c, c.window, time.Now(), maxBatch, c.out[:0])
			for i := range c.out {
				buf = c.appendOutgoing(buf, &c.out[i])
			}
			clear(c.out)
		}
		if len(buf) > 0 {
			c.conn.SetWriteDeadline(time.Now().Add(c.srv.opts.WriteTimeout))
			if _, err := c.conn.Write(buf); err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					c.setReason(CloseWriteTimeout)
				} else {
					c.setReason(CloseWriteError)
				}
				c.wmu.Lock()
				c.closed = true
				c.writing = false
				c.wmu.Unlock()
				c.conn.Close() // the reader sees it and cleans up
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
	}
}

// appendOutgoing encodes one session step. Only the writer calls it.
func (c *client) appendOutgoing(buf []byte, o *outgoing) []byte {
	if o.pubrel {
		b, _ := packet.Append(buf, &packet.Pubrel{PacketID: o.id}, c.version)
		return b
	}
	m := o.q.msg
	p := &c.pub
	*p = packet.Publish{
		Dup:      o.dup,
		QoS:      o.q.qos,
		Retain:   o.q.retain,
		Topic:    m.Topic,
		PacketID: o.id,
		Payload:  m.Payload,
	}
	if c.version == packet.V5 {
		p.Props = m.Props
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
		if c.maxOut > 0 && packet.Size(p, c.version) > int(c.maxOut) {
			c.dropOutgoing(o) // [MQTT-3.1.2-24] never send a packet above the client's maximum
			return buf
		}
		if c.aliasMaxOut > 0 {
			if a, ok := c.outAliases[m.Topic]; ok {
				p.Topic = ""
				p.Props.TopicAlias = a
				p.Props.Set(packet.PropTopicAlias)
			} else if len(c.outAliases) < int(c.aliasMaxOut) {
				if c.outAliases == nil {
					c.outAliases = make(map[string]uint16)
				}
				a := uint16(len(c.outAliases) + 1)
				c.outAliases[m.Topic] = a
				p.Props.TopicAlias = a
				p.Props.Set(packet.PropTopicAlias)
			}
		}
	}
	b, err := packet.Append(buf, p, c.version)
	if err != nil {
		c.log.Error("encode publish", "client", c.id, "topic", m.Topic, "err", err)
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

// prefixReader lets an idle connection wait for its next packet with a
// one-byte read and no pooled buffer; the byte is replayed to the buffered
// reader taken from the pool once traffic arrives.
type prefixReader struct {
	conn net.Conn
	b    [1]byte
	has  bool
}

func (p *prefixReader) Read(b []byte) (int, error) {
	if p.has && len(b) > 0 {
		b[0] = p.b[0]
		p.has = false
		return 1, nil
	}
	return p.conn.Read(b)
}

const readBufSize = 4 << 10

var readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, readBufSize) }}

func getReader(r io.Reader) *bufio.Reader {
	br := readerPool.Get().(*bufio.Reader)
	br.Reset(r)
	return br
}

func putReader(br *bufio.Reader) {
	br.Reset(nil)
	readerPool.Put(br)
}

var writeBufPool = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

func getWriteBuf() *[]byte { return writeBufPool.Get().(*[]byte) }

func putWriteBuf(b *[]byte) {
	if cap(*b) > 1<<20 {
		return // let an unusually large batch buffer go
	}
	*b = (*b)[:0]
	writeBufPool.Put(b)
}

// newClientID makes an id for a client that sent an empty one.
func newClientID() string {
	var b [12]byte
	rand.Read(b[:])
	return "edgegw-" + hex.EncodeToString(b[:])
}

// errClosed is returned by the reader once the connection is closed by the
// server side (takeover, shutdown, write failure).
var errClosed = fmt.Errorf("connection closed by server")
