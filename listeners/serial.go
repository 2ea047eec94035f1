package listeners

// The serial listener turns one serial device into a sequence of logical
// MQTT connections. The device is kept open by a serialport.Link (which
// retries with backoff while it is missing or after it vanished); each
// logical connection is handed to the gateway in turn, never two at once:
//
//   - a CONNECT frame on a link that already has a connection ends the old
//     one as an abnormal close (the will fires) and starts a new one: a
//     sensor that rebooted just connects again;
//   - when the gateway ends a logical connection (keepalive, protocol
//     error), frames other than CONNECT are dropped until the next CONNECT;
//   - the gateway closing a logical connection never closes the device.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgegw/edgegw/devices/framing"
	"github.com/edgegw/edgegw/devices/serialport"
)

// Serial is a listener on a serial device.
type Serial struct {
	Name     string
	Device   string
	Baud     int
	Framing  framing.Mode
	MaxFrame int // encoded frame bound; 0 = framing.DefaultMaxFrame
	Log      *slog.Logger

	// Open overrides how the device is opened (tests); nil uses serialport.Open.
	Open serialport.OpenFunc

	link    *serialport.Link
	mu      sync.Mutex
	frames  framing.Stats // totals of finished ports
	cur     *framing.Conn // framed conn of the open port, if any
	skipped atomic.Uint64 // non-CONNECT frames dropped between connections
	logical atomic.Uint64 // logical connections served
	opened  atomic.Int64  // unix nanos of the device's last successful open; 0 = never
}

// SerialStats is what metrics show of a serial listener.
type SerialStats struct {
	State    string
	Opens    uint64
	Failures uint64
	Lost     uint64
	Reopens  uint64 // raw framing: reopened between logical connections
	Frames   framing.Stats
	Skipped  uint64    // frames dropped while waiting for CONNECT
	Logical  uint64    // logical MQTT connections served
	LastOpen time.Time // the device's last successful open (a reconnect after the first); zero = never
}

// Listen prepares the link. A missing device is not an error: the link
// waits for it.
func (s *Serial) Listen() error {
	if s.Device == "" {
		return fmt.Errorf("listener %s: serial device not set", s.Name)
	}
	log := s.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s.Log = log.With("listener", s.Name)
	s.link = serialport.NewLink(serialport.LinkConfig{
		Port: serialport.Config{Path: s.Device, Baud: s.Baud},
		Open: s.Open,
	}, s.Log)
	return nil
}

// Close does nothing: Listen opens no device (Serve does).
func (s *Serial) Close() error { return nil }

// Stats returns the link and frame counters.
func (s *Serial) Stats() SerialStats {
	st := SerialStats{Skipped: s.skipped.Load(), Logical: s.logical.Load(), State: "stopped"}
	if n := s.opened.Load(); n != 0 {
		st.LastOpen = time.Unix(0, n)
	}
	if s.link != nil {
		ls := s.link.Stats()
		st.State = s.link.State().String()
		st.Opens, st.Failures, st.Lost, st.Reopens = ls.Opens, ls.Failures, ls.Lost, ls.Reopens
	}
	s.mu.Lock()
	st.Frames = s.frames
	if s.cur != nil {
		st.Frames = addStats(st.Frames, s.cur.Stats())
	}
	s.mu.Unlock()
	return st
}

func addStats(a, b framing.Stats) framing.Stats {
	return framing.Stats{Good: a.Good + b.Good, BadCRC: a.BadCRC + b.BadCRC, BadCOBS: a.BadCOBS + b.BadCOBS,
		Oversize: a.Oversize + b.Oversize, Short: a.Short + b.Short}
}

// Serve keeps the device open and serves logical connections until ctx is
// cancelled.
func (s *Serial) Serve(ctx context.Context, establish EstablishFunc) error {
	if s.link == nil {
		if err := s.Listen(); err != nil {
			return err
		}
	}
	s.Log.Info("serial listener started", "device", s.Device, "framing", s.Framing.String())
	return s.link.Run(ctx, func(ctx context.Context, port io.ReadWriteCloser) error {
		s.opened.Store(time.Now().UnixNano())
		fc := framing.NewConn(port, framing.Config{
			Mode: s.Framing, MaxFrame: s.MaxFrame, Name: s.Device,
			SplitOnConnect: s.Framing == framing.ModeCOBSCRC16,
		})
		s.mu.Lock()
		s.cur = fc
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			s.frames = addStats(s.frames, fc.Stats())
			s.cur = nil
			s.mu.Unlock()
		}()
		return s.serveLink(ctx, fc, establish)
	})
}

// serveLink serves logical connections one after the other on an open port.
func (s *Serial) serveLink(ctx context.Context, fc *framing.Conn, establish EstablishFunc) error {
	var buf []byte // framed: one whole packet, see logicalConn.Read
	if s.Framing == framing.ModeCOBSCRC16 {
		// A frame of MaxFrame encoded bytes decodes to fewer bytes, so any
		// packet fits and framing.Conn returns it in one Read.
		maxFrame := s.MaxFrame
		if maxFrame <= 0 {
			maxFrame = framing.DefaultMaxFrame
		}
		buf = make([]byte, max(maxFrame, framing.MinMaxFrame))
	}
	for ctx.Err() == nil {
		var first []byte // the CONNECT, replayed to the next connection
		if buf != nil {
			pkt, err := s.awaitConnect(fc, buf)
			if err != nil {
				return err
			}
			first = pkt
		}
		lc := &logicalConn{fc: fc, buf: buf, rest: first}
		s.logical.Add(1)
		err := establish(ctx, lc, s.Name, "")
		if lc.portErr != nil {
			return lc.portErr // the device is gone: let the link reopen it
		}
		if lc.split {
			s.Log.Info("new CONNECT on the link; previous connection ended", "device", s.Device)
		} else if err != nil {
			s.Log.Debug("serial connection ended", "device", s.Device, "err", err)
		}
		if s.Framing == framing.ModeRaw && ctx.Err() == nil {
			// Without frames there is no resynchronisation point: give the
			// device a fresh start by reopening it.
			return fmt.Errorf("raw serial connection ended (%v): %w", err, serialport.ErrReopen)
		}
	}
	return nil
}

// awaitConnect reads packets until a CONNECT, dropping (and counting) the
// others, and returns it in buf. framing.Conn returns at most one packet per
// Read, all of it as buf can hold any packet, which is what makes this a
// packet-level filter.
func (s *Serial) awaitConnect(fc *framing.Conn, buf []byte) ([]byte, error) {
	fc.SetReadDeadline(time.Time{})
	for {
		n, err := fc.Read(buf)
		if errors.Is(err, framing.ErrNewConnect) {
			continue // the CONNECT comes on the next Read
		}
		if err != nil {
			return nil, err
		}
		if n > 0 && buf[0]>>4 == 1 {
			return buf[:n], nil
		}
		s.skipped.Add(1)
	}
}

// logicalConn is one MQTT connection on a serial link. Closing it ends the
// connection, not the port: a blocked Read is interrupted with a past read
// deadline.
//
// In framed mode it reads whole packets into buf and hands them out from
// rest, so that the unread part of a packet the gateway stopped reading (a
// packet refused at its fixed header) ends with the connection. Left in the
// framing.Conn, it would be read by awaitConnect as if it were a packet, and
// one whose first byte looks like CONNECT (0x1X) would start a phantom
// connection that swallows the frames after it.
type logicalConn struct {
	fc   *framing.Conn
	buf  []byte // framed: shared by the port's connections, one at a time
	rest []byte // unread bytes of the current packet (aliases buf)

	mu      sync.Mutex
	closed  bool
	split   bool  // ended by a new CONNECT on the link
	portErr error // the port failed (unplug): the link must reopen
}

var errLogicalClosed = fmt.Errorf("serial connection closed: %w", net.ErrClosed)

func (c *logicalConn) Read(p []byte) (int, error) {
	if len(c.rest) > 0 {
		n := copy(p, c.rest)
		c.rest = c.rest[n:]
		return n, nil
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return 0, errLogicalClosed
	}
	var n int
	var err error
	if c.buf != nil {
		if n, err = c.fc.Read(c.buf); err == nil {
			c.rest = c.buf[:n]
			n = copy(p, c.rest)
			c.rest = c.rest[n:]
			return n, nil
		}
		n = 0
	} else if n, err = c.fc.Read(p); err == nil {
		return n, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case errors.Is(err, framing.ErrNewConnect):
		// The sensor restarted its connection: end this one abnormally
		// (its will fires); the CONNECT is read by the next connection.
		c.split = true
		c.closed = true
		return n, io.ErrUnexpectedEOF
	case c.closed:
		return n, errLogicalClosed
	case errors.Is(err, os.ErrDeadlineExceeded):
		return n, err // keepalive: the gateway decides
	default:
		c.portErr = err
		return n, err
	}
}

func (c *logicalConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return 0, errLogicalClosed
	}
	return c.fc.Write(p)
}

// Close ends the logical connection and interrupts a blocked Read. The port
// stays open.
func (c *logicalConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.closed = true
		c.fc.SetReadDeadline(time.Unix(1, 0))
	}
	return nil
}

func (c *logicalConn) LocalAddr() net.Addr  { return c.fc.LocalAddr() }
func (c *logicalConn) RemoteAddr() net.Addr { return c.fc.RemoteAddr() }

func (c *logicalConn) SetDeadline(t time.Time) error {
	c.SetReadDeadline(t)
	return c.SetWriteDeadline(t)
}

func (c *logicalConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil // keep the interrupting deadline
	}
	return c.fc.SetReadDeadline(t)
}

func (c *logicalConn) SetWriteDeadline(t time.Time) error { return c.fc.SetWriteDeadline(t) }
