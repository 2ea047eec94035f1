package bridge

// The uplink's transport: paho dials through dial (its custom
// open-connection hook) and gets a deadlineConn, so that every write paho
// makes, PINGREQ included, has a deadline (field report 003), and every read
// is time-stamped for the ack watchdog; the publish flows' packet ids are
// rewritten on the way (wireid.go).

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
)

// deadlineConn wraps the uplink's net.Conn. It owns the write deadline:
// each Write sets now+timeout, and paho's own SetWriteDeadline calls are
// ignored (paho clears the deadline after each packet, which would undo
// ours). Writes are split into chunks with a deadline each, so the deadline
// measures progress. A chunk of a WebSocket transport is its own frame,
// which MQTT over WebSocket allows (a packet may span frames). A write that times out calls onTimeout and closes the connection,
// so paho's reader fails and reports the connection lost.
type deadlineConn struct {
	net.Conn
	timeout   time.Duration
	lastRead  *atomic.Int64 // unix nanos of the last read that returned data
	onTimeout func(error)
	store     *uplinkStore

	// Read side, used only by paho's reader goroutine.
	acks  ackRewriter
	rbuf  []byte // read from the socket
	ready []byte // filtered, not yet returned to paho
	rerr  error  // the socket's error, returned once ready is drained
}

// writeChunk is the most written under one deadline: write_timeout bounds
// a write that makes no progress, not the time a large PUBLISH takes on a
// slow link.
const writeChunk = 32 << 10

func (c *deadlineConn) Write(p []byte) (int, error) {
	rewriteOutgoing(c.store, p)
	done := 0
	for done < len(p) {
		end := min(len(p), done+writeChunk)
		if err := c.Conn.SetWriteDeadline(time.Now().Add(c.timeout)); err != nil {
			return done, fmt.Errorf("set write deadline: %w", err)
		}
		n, err := c.Conn.Write(p[done:end])
		done += n
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				c.onTimeout(err)
				c.Conn.Close()
			}
			return done, err
		}
	}
	return done, nil
}

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
		n, err := c.Conn.Read(c.rbuf[:readBlock])
		if n > 0 {
			c.lastRead.Store(time.Now().UnixNano())
			c.ready = c.acks.filter(c.rbuf[:n], c.rbuf[readBlock:readBlock])
		}
		c.rerr = err
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
	conn   net.Conn
	closed bool
}

func (s *connSlot) set(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
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
		s.conn.Close()
	}
}

// dial opens the transport for u within ConnectTimeout (TCP, TLS or
// WebSocket), wrapped in a deadlineConn.
func (b *Bridge) dial(ctx context.Context, u *url.URL, slot *connSlot, onTimeout func(error)) (net.Conn, error) {
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
	if !slot.set(c) {
		return nil, fmt.Errorf("dial %s: %w", u.Redacted(), context.Canceled)
	}
	return &deadlineConn{
		Conn: c, timeout: b.cfg.WriteTimeout, lastRead: &b.lastRead, onTimeout: onTimeout,
		store: b.store, acks: ackRewriter{st: b.store},
	}, nil
}
