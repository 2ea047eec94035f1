package gateway

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/internal/sockio"
)

// readLoop reads and handles packets until the connection ends. It returns
// the error that ended it; the close reason is recorded in c.reason.
func (c *client) readLoop() error {
	max := c.srv.opts.MaxPacketSize
	// [MQTT-3.1.0-1] the first packet must be CONNECT, within connect_timeout.
	c.conn.SetReadDeadline(time.Now().Add(c.srv.opts.ConnectTimeout))
	c.rs = getRstate(&c.cr)
	br := c.rs.br
	// Peek only what has arrived: a short non-CONNECT packet must be
	// refused at once, not after connect_timeout.
	if _, err := br.Peek(1); err == nil {
		if head, _ := br.Peek(min(4, br.Buffered())); looksLikeHTTP(head) {
			c.setReason(CloseProtocolError)
			c.logf(slog.LevelWarn, "http request on an mqtt port; use a websocket listener", "reason", CloseProtocolError.String())
			return errors.New("http request on mqtt port")
		}
	}
	pk, err := packet.Decode(br, 0, max)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			c.setReason(CloseConnectTimeout)
			return fmt.Errorf("no connect within %s", c.srv.opts.ConnectTimeout)
		}
		if errors.Is(err, packet.UnsupportedProtocolVersion) {
			// [MQTT-3.1.2-2](3.1.1) return code 0x01 and close. v3 form: v5 clients
			// accept it too when they asked for an unknown level.
			c.writeRaw(&packet.Connack{ReasonCode: packet.V3RefusedProtocolVersion}, packet.V311)
		}
		return c.readFailed(err)
	}
	cp, ok := pk.(*packet.Connect)
	if !ok {
		c.setReason(CloseProtocolError)
		return fmt.Errorf("first packet is %T, not CONNECT", pk)
	}
	if err := c.handleConnect(cp); err != nil {
		return err
	}

	// Work queued while handling input is written when the input is
	// drained (writer.go); also when the reader ends, so nothing it routed
	// is left waiting for another kick.
	defer c.flushOwed()
	// Packets pipelined behind CONNECT are input being handled too: held,
	// so a read for the rest of a split packet among them first flushes
	// what the complete ones routed (connReader.Read flushes only while
	// held).
	c.hold()
	for {
		if c.rs.br.Buffered() == 0 {
			c.flushOwed()
			if err := c.refill(); err != nil {
				return c.readFailed(err)
			}
			c.hold()
		}
		pk, err := c.decodeNext(max)
		if err != nil {
			return c.readFailed(err)
		}
		if err := c.handle(pk); err != nil {
			return err
		}
	}
}

// decodeNext decodes the next packet from the read buffer. A PUBLISH or an
// ack is decoded into the pooled scratch: valid until the next call.
func (c *client) decodeNext(max int) (packet.Packet, error) {
	return packet.DecodeInto(c.rs.br, c.version, max, &c.rs.sc)
}

// refill is called when the read buffer is empty. A busy connection refills
// it with one non-blocking read; a connection with nothing waiting gives the
// buffer back and waits for its next packet with a small read onto the
// stack (idle connections hold no pooled memory). A connection whose last
// read drained the socket goes straight to that wait: its first attempt
// does not block either, so the extra non-blocking read would only find
// nothing more often than not (issue 16: one syscall less per reading of a
// sensor). Every path that may wait sets the keepalive deadline first: a
// packet split across reads is bounded by it too.
func (c *client) refill() error {
	if len(c.rs.src.pend) > 0 {
		return nil // what the idle wait read is still to be replayed
	}
	c.setReadDeadline()
	if c.cr.raw != nil && !c.cr.short {
		c.cr.try = true
		_, err := c.rs.br.Peek(1)
		c.cr.try = false
		if err == nil {
			return nil
		}
		if err != errWouldBlock {
			return err
		}
	}
	putRstate(c.rs)
	c.rs = nil
	return c.waitIdle()
}

// waitIdle blocks until input arrives, on a shallow stack and with no
// buffer (a one-byte read: a larger array on this frame kept 5,000 idle
// readers' stacks from shrinking, +1 KiB each), then takes a read buffer
// from the pool and leaves the byte there to be replayed. Kept small and
// out of line so an idle reader's stack can shrink.
//
//go:noinline
func (c *client) waitIdle() error {
	b := c.cr.idle[:]
	for {
		var n int
		var err error
		if c.cr.raw != nil {
			n, err = sockio.Read(c.cr.raw, b, true)
		} else {
			n, err = c.conn.Read(b)
		}
		if n > 0 {
			c.rs = getRstate(&c.cr)
			c.rs.src.pend = c.rs.pre[:copy(c.rs.pre[:], b[:n])]
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func looksLikeHTTP(b []byte) bool {
	for _, m := range [][]byte{[]byte("GET "), []byte("POST"), []byte("HEAD"), []byte("PUT "), []byte("OPTI")} {
		if bytes.Equal(b, m) {
			return true
		}
	}
	return false
}

func (c *client) setReadDeadline() {
	if c.keepAlive > 0 {
		c.conn.SetReadDeadline(time.Now().Add(c.keepAlive * 3 / 2)) // [MQTT-3.1.2-22], [MQTT-3.1.2-24](3.1.1)
	} else {
		c.conn.SetReadDeadline(time.Time{})
	}
}

// readFailed classifies a read error into a close reason and, for protocol
// errors, tells a v5 client why.
func (c *client) readFailed(err error) error {
	var ne net.Error
	var pe *packet.Error
	switch {
	case errors.As(err, &pe):
		c.logf(slog.LevelInfo, "protocol error", "err", err)
		c.closeWith(CloseProtocolError, pe.Code)
		return err
	case c.takenOver.Load() && (errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed)):
		c.closeWith(CloseTakenOver, packet.SessionTakenOver) // drained; v5 still gets its DISCONNECT [MQTT-3.1.4-3]
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		c.setReason(ClosePeerClosed)
	case errors.As(err, &ne) && ne.Timeout():
		c.closeWith(CloseKeepAlive, packet.KeepAliveTimeout)
	default:
		c.setReason(CloseReadError)
	}
	return err
}

// writeRaw writes p directly, before a writer exists (refused CONNECT).
func (c *client) writeRaw(p packet.Packet, v packet.Version) {
	b, err := packet.Append(nil, p, v)
	if err != nil {
		return
	}
	c.conn.SetWriteDeadline(time.Now().Add(c.srv.opts.WriteTimeout))
	c.conn.Write(b)
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
var errWouldBlock = sockio.ErrWouldBlock

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
	if r.raw == nil || len(p) == 0 {
		n, err := r.conn.Read(p)
		r.short = n <= quietReadSize && n < len(p)
		r.busy = n == len(p) && n > 1
		return n, err
	}
	n, err := sockio.Read(r.raw, p, !r.try)
	if err != nil {
		return 0, err
	}
	r.short = n <= quietReadSize && n < len(p)
	r.busy = n == len(p) && n > 1
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
