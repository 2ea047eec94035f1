package bridge

// The uplink's transport: paho dials through dial (its custom
// open-connection hook) and gets a deadlineConn, so that every write paho
// makes, PINGREQ included, has a deadline (field report 003), and every read
// is time-stamped for the ack watchdog; the publish flows' packet ids are
// rewritten on the way (wireid.go), and writes are batched
// (batchwrite.go).

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/edgegw/edgegw/internal/sockio"
)

// deadlineConn wraps the uplink's net.Conn. It owns the write deadline:
// its batchWriter writes in chunks with a deadline of timeout each, so the
// deadline measures progress, and paho's own SetWriteDeadline calls are
// ignored (paho clears the deadline after each packet, which would undo
// ours). A chunk of a WebSocket transport is its own frame, which MQTT
// over WebSocket allows (a packet may span frames). A write that times out
// calls onTimeout and closes the connection, so paho's reader fails and
// reports the connection lost.
type deadlineConn struct {
	net.Conn
	raw      syscall.RawConn // nil unless Conn is a plain TCP socket (internal/sockio)
	lastRead *atomic.Int64   // unix nanos of the last read that returned data
	store    *uplinkStore    // nil: no packet id rewriting (MQTT 5, session5.go)
	w        *batchWriter
	budget   *budget // debited with every byte written (budget.go); nil: none

	// Read side, used only by paho's reader goroutine.
	acks  ackRewriter
	rbuf  []byte // read from the socket
	ready []byte // filtered, not yet returned to paho
	rerr  error  // the socket's error, returned once ready is drained
}

// writeChunk is the most written under one deadline: write_timeout bounds
// a write that makes no progress, not the time a large PUBLISH (or a
// batch of small ones, batchwrite.go) takes on a slow link. Small enough
// that a 64 kbit/s link that is still moving passes it well within the
// default write_timeout; TLS does not allow a write to be resumed after
// its deadline, so the chunk, not a retry, is what measures progress.
const writeChunk = 4 << 10

// Write takes one packet from paho (paho writes one per call), rewrites
// its packet id and hands it to the batch writer.
func (c *deadlineConn) Write(p []byte) (int, error) {
	var pid uint16
	if c.store != nil {
		pid = rewriteOutgoing(c.store, p)
	}
	n, err := c.w.Write(p)
	c.budget.wrote(n)
	if pid != 0 && err == nil {
		c.store.markWritten(pid) // a direct publish may follow it (direct.go)
	}
	return n, err
}

// Close flushes what is buffered (within the write timeout) and closes.
func (c *deadlineConn) Close() error { return c.w.Close() }

// abort closes at once, dropping what is buffered.
func (c *deadlineConn) abort() { c.w.abort() }

// Read returns the upstream bytes with the packet ids of acks rewritten
// (wireid.go). paho reads a packet's header a byte at a time, so the
// connection reads the socket in blocks of its own.
func (c *deadlineConn) Read(p []byte) (int, error) {
	for len(c.ready) == 0 {
		if c.rerr != nil {
			return 0, c.rerr
		}
		if c.rbuf == nil {
			c.rbuf = make([]byte, readBlock, 2*readBlock+8)
		}
		var n int
		var err error
		if c.raw != nil {
			n, err = sockio.Read(c.raw, c.rbuf[:readBlock], true)
		} else {
			n, err = c.Conn.Read(c.rbuf[:readBlock])
		}
		if n > 0 {
			c.lastRead.Store(time.Now().UnixNano())
			if c.store != nil {
				c.ready = c.acks.filter(c.rbuf[:n], c.rbuf[readBlock:readBlock])
			} else {
				c.ready = c.rbuf[:n]
			}
		}
		c.rerr = err
		if err != nil {
			if broken := c.w.brokenErr(); broken != nil {
				c.rerr = fmt.Errorf("uplink broken: %w", broken)
			}
		}
	}
	n := copy(p, c.ready)
	c.ready = c.ready[n:]
	return n, nil
}

// readBlock is the most read from the socket at once.
const readBlock = 4 << 10

// SetDeadline only sets the read deadline: writes keep their own.
func (c *deadlineConn) SetDeadline(t time.Time) error { return c.Conn.SetReadDeadline(t) }

// SetWriteDeadline is a no-op: Write sets the deadline itself.
func (c *deadlineConn) SetWriteDeadline(time.Time) error { return nil }

// connSlot holds the current attempt's raw connection so the owner can tear
// it down from outside paho (watchdog trip, shutdown). Once closed, a
// connection set later is closed at once.
type connSlot struct {
	mu     sync.Mutex
	conn   *deadlineConn
	other  net.Conn // the session engine's connection (uplinkengine.go), instead of conn
	closed bool
}

// setOther is set for the session engine's connection.
func (s *connSlot) setOther(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return false
	}
	s.other = c
	return true
}

func (s *connSlot) set(c *deadlineConn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.abort()
		return false
	}
	s.conn = c
	return true
}

func (s *connSlot) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.conn != nil {
		s.conn.abort()
	}
	if s.other != nil {
		s.other.Close()
	}
}

// dial opens the transport for u within ConnectTimeout (TCP, TLS or
// WebSocket), wrapped in a deadlineConn that rewrites packet ids through
// st (nil: none).
func (b *Bridge) dial(ctx context.Context, u *url.URL, st *uplinkStore, slot *connSlot, onTimeout func(error)) (net.Conn, error) {
	c, err := b.dialTransport(ctx, u)
	if err != nil {
		return nil, err
	}
	if st != nil { // MQTT 3.1.1: the last connection's requests died with it (requestid.go)
		st.dropRequests()
		st.connecting()
	}
	raw := rawSocket(c)
	dc := &deadlineConn{
		Conn: c, raw: raw, lastRead: &b.lastRead, store: st, acks: ackRewriter{st: st},
		w: newBatchWriter(c, raw, b.cfg.WriteTimeout, onTimeout), budget: b.budget,
	}
	if !slot.set(dc) {
		return nil, fmt.Errorf("dial %s: %w", u.Redacted(), context.Canceled)
	}
	return dc, nil
}

// dialTransport opens the transport for u within ConnectTimeout: TCP,
// TLS or WebSocket.
func (b *Bridge) dialTransport(ctx context.Context, u *url.URL) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.ConnectTimeout)
	defer cancel()
	var (
		c   net.Conn
		err error
	)
	tcfg := b.c.Load().tls
	if tcfg != nil && tcfg.ServerName == "" {
		tcfg = tcfg.Clone()
		tcfg.ServerName = u.Hostname()
	}
	switch u.Scheme {
	case "tcp", "mqtt":
		var d net.Dialer
		c, err = d.DialContext(ctx, "tcp", u.Host)
	case "tls", "ssl", "mqtts":
		d := tls.Dialer{Config: tcfg}
		c, err = d.DialContext(ctx, "tcp", u.Host)
	case "ws", "wss":
		wu := *u
		wu.User = nil
		var wt *tls.Config
		if u.Scheme == "wss" {
			wt = tcfg
		}
		// paho's WebSocket transport (gorilla) takes a timeout, not a ctx.
		c, err = mqtt.NewWebsocket(wu.String(), wt, b.cfg.ConnectTimeout, nil, nil)
	default:
		err = fmt.Errorf("unsupported scheme %q", u.Scheme)
	}
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", u.Redacted(), err)
	}
	return c, nil
}

// rawSocket is c's RawConn when c is a plain TCP socket: its reads and
// writes then go through internal/sockio (RawSyscall), so that the
// uplink's traffic does not wake the runtime's sysmon after each idle
// moment (issue 16: 4-5 % of the gateway's CPU with 1,000 sensors). TLS
// and WebSocket connections keep the ordinary calls.
func rawSocket(c net.Conn) syscall.RawConn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return nil
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	return raw
}
