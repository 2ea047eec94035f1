package gateway

// A client is one network connection speaking MQTT: its reader and writer
// goroutines are described in doc.go (Connections).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
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
	amu  sync.Mutex // guards acks and rels (lock order: doc.go)
	acks []*ackSlot // QoS 1/2 acks waiting for a sink's verdict, in PUBLISH order
	rels []*relSlot // PUBRELs waiting for their PUBREC's state record, in PUBREC order (handle.go)

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
	leftDone  chan struct{} // made by a takeover waiting for the session to be left; closed after detach
	left      bool
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
			will = nil // discarded on a normal DISCONNECT [MQTT-3.1.2-10]; a v5 one with a reason code other than 0x00 keeps it (handleDisconnect)
		}
		if will != nil && c.willExpiry > 0 {
			w := *will
			w.Expiry = time.Now().Add(c.willDelay + c.willExpiry)
			will = &w
		}
		c.srv.reg.detach(c, c.sess, will, c.willDelay)
	}
	c.sessionLeft()
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

// errClosed is returned by the reader once the connection is closed by the
// server side (takeover, shutdown, write failure).
var errClosed = fmt.Errorf("connection closed by server")
