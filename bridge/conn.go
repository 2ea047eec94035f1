package bridge

// The uplink's transport: dialTransport opens it (TCP, TLS or WebSocket)
// and meteredConn wraps it for the session engine, whose wire
// (bridge/wire) owns its writes and their deadlines; a plain TCP socket
// reads and writes through internal/sockio.

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

	"github.com/edgegw/edgegw/bridge/wire"
	"github.com/edgegw/edgegw/internal/sockio"
)

// connSlot holds the current attempt's connection so the owner can tear
// it down from outside the engine (shutdown, a teardown by the bridge).
// Once closed, a connection set later is closed at once.
type connSlot struct {
	mu     sync.Mutex
	conn   net.Conn
	closed bool
}

// set makes c the slot's connection; false: the slot was closed (c is
// closed too).
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

// meteredConn is the engine's transport: reads are time-stamped for
// Stats and the stuck check, writes debit the byte budget. The wire
// queues a publish and writes it later, in a batch: the picker, which
// waits for the rate limit's bucket before each record, would hand out a
// whole batch on credit. So a publish is debited as it is queued
// (queued), and a write debits only what was not debited before.
//
// A plain TCP socket is read and written through internal/sockio
// (rawSocket), so the uplink's traffic does not wake the runtime's
// sysmon after each idle moment; deadlines and close end its calls as
// they end the net package's, which the wire tells apart.
type meteredConn struct {
	net.Conn
	raw      syscall.RawConn // nil unless Conn is a plain TCP socket
	lastRead *atomic.Int64
	budget   *budget
	early    atomic.Int64 // bytes debited when queued, not yet written
}

func newMeteredConn(c net.Conn, lastRead *atomic.Int64, b *budget) *meteredConn {
	return &meteredConn{Conn: c, raw: rawSocket(c), lastRead: lastRead, budget: b}
}

// queued debits a publish of n bytes queued for the wire.
func (c *meteredConn) queued(n int) {
	c.budget.wrote(n)
	c.early.Add(int64(n))
}

func (c *meteredConn) Read(p []byte) (int, error) {
	var n int
	var err error
	switch {
	case len(p) == 0:
	case c.raw != nil:
		n, err = sockio.Read(c.raw, p, true)
	default:
		n, err = c.Conn.Read(p)
	}
	if n > 0 {
		c.lastRead.Store(time.Now().UnixNano())
	}
	return n, err
}

func (c *meteredConn) Write(p []byte) (int, error) {
	var n int
	var err error
	if c.raw != nil {
		n, err = sockio.Write(c.raw, p)
	} else {
		n, err = c.Conn.Write(p)
	}
	debit := int64(n)
	for {
		e := c.early.Load()
		take := min(e, debit)
		if c.early.CompareAndSwap(e, e-take) {
			debit -= take
			break
		}
	}
	c.budget.wrote(int(debit))
	return n, err
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
		// The WebSocket transport (bridge/wire) takes a timeout, not a ctx.
		c, err = wire.DialWebSocket(wu.String(), wt, b.cfg.ConnectTimeout)
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
