package wire

// Design note: one writer goroutine owns the socket's writes (the
// flusher); Send and SendControl encode a packet into a lane's buffer
// under mu and wake it. The flusher takes both buffers at once, control
// lane first, and writes them in chunks of writeChunk with a deadline of
// the write timeout each: the deadline measures progress, not the time a
// large batch takes on a slow link. A chunk that times out, or any write
// error, breaks the connection: the socket is closed (so the reader's
// Read fails too), Done is closed and Err says why. Send waits while
// maxPending bytes of data are queued (back-pressure on a stalled link:
// it fails within the write timeout once the flusher's write does);
// SendControl never waits, so a PINGREQ or an ack is never held behind
// publishes that are still being queued.

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgegw/edgegw/gateway/packet"
)

// writeChunk is the most written under one deadline: small enough that
// a 64 kbit/s link that is still moving passes it within a few seconds.
// TLS does not allow a write to be resumed after its deadline, so the
// chunk, not a retry, is what measures progress.
const writeChunk = 4 << 10

// maxPending is the most data-lane bytes queued before Send waits (one
// larger packet is queued alone).
const maxPending = 64 << 10

// readBuffer is the reader's buffer size.
const readBuffer = 8 << 10

// Errors a broken connection reports (Err), wrapped with the cause.
var (
	// ErrWriteTimeout: a write made no progress for the write timeout.
	ErrWriteTimeout = errors.New("write timeout")
	// ErrClosed: the connection was closed (Close, Abort).
	ErrClosed = errors.New("connection closed")
)

// Conn is a packet-level MQTT connection over a net.Conn. Read is for one
// reader goroutine; Send and SendControl are safe for concurrent use.
type Conn struct {
	nc      net.Conn
	codec   Codec
	r       *bufio.Reader
	maxRead int
	timeout time.Duration

	lastRead  atomic.Int64 // unix nanos of the last packet read
	lastWrite atomic.Int64 // unix nanos of the last write that completed

	mu      sync.Mutex
	ctl     []byte        // control lane: queued packets
	data    []byte        // data lane: queued packets
	spare   []byte        // the flusher's last buffer, reused
	room    chan struct{} // made by a waiting Send; closed when the flusher takes data
	closing bool          // Close: flush, then close
	err     error         // why the connection broke (sticky)
	written uint64        // bytes written to the socket
	kick    chan struct{} // capacity 1: something to write, or closing
	broken  chan struct{} // closed when err is set
	done    chan struct{} // closed when the flusher has ended
}

// Options are a Conn's settings.
type Options struct {
	// WriteTimeout bounds every chunk a write makes progress on; required.
	WriteTimeout time.Duration
	// MaxPacketSize is the largest packet Read accepts (0: the protocol's
	// maximum).
	MaxPacketSize int
}

// New starts a Conn over nc speaking codec. The caller owns nc until
// New; from then on the Conn does (Close or Abort ends it).
func New(nc net.Conn, codec Codec, o Options) *Conn {
	c := &Conn{
		nc: nc, codec: codec, r: bufio.NewReaderSize(nc, readBuffer),
		maxRead: o.MaxPacketSize, timeout: o.WriteTimeout,
		kick: make(chan struct{}, 1), broken: make(chan struct{}), done: make(chan struct{}),
	}
	now := time.Now().UnixNano()
	c.lastRead.Store(now)
	c.lastWrite.Store(now)
	go c.flushLoop()
	return c
}

// Codec returns the connection's codec.
func (c *Conn) Codec() Codec { return c.codec }

// Read reads the next packet. After an error the connection is broken.
func (c *Conn) Read() (packet.Packet, error) {
	p, err := c.codec.Decode(c.r, c.maxRead)
	if err != nil {
		if cause := c.Err(); cause != nil {
			err = cause // the socket was closed because of it
		}
		c.fail(fmt.Errorf("read: %w", err))
		return nil, c.Err()
	}
	c.lastRead.Store(time.Now().UnixNano())
	return p, nil
}

// Buffered reports how many bytes already read from the socket wait in
// the reader: 0 means the next Read may block.
func (c *Conn) Buffered() int { return c.r.Buffered() }

// LastRead returns when the last packet was read (the connection's
// start before any).
func (c *Conn) LastRead() time.Time { return time.Unix(0, c.lastRead.Load()) }

// LastWrite returns when the last write to the socket completed.
func (c *Conn) LastWrite() time.Time { return time.Unix(0, c.lastWrite.Load()) }

// Written returns the bytes written to the socket so far.
func (c *Conn) Written() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.written
}

// Send queues p in the data lane, waiting while maxPending bytes are
// queued there. It fails once the connection is broken or closing.
func (c *Conn) Send(p packet.Packet) error {
	c.mu.Lock()
	for c.err == nil && !c.closing && len(c.data) >= maxPending {
		if c.room == nil {
			c.room = make(chan struct{})
		}
		room := c.room
		c.mu.Unlock()
		select {
		case <-room:
		case <-c.broken:
		}
		c.mu.Lock()
	}
	err := c.appendLocked(&c.data, p)
	c.mu.Unlock()
	if err == nil {
		c.wake()
	}
	return err
}

// SendControl queues p in the control lane, written before any queued
// data; it never waits.
func (c *Conn) SendControl(p packet.Packet) error {
	c.mu.Lock()
	err := c.appendLocked(&c.ctl, p)
	c.mu.Unlock()
	if err == nil {
		c.wake()
	}
	return err
}

// appendLocked encodes p at the end of lane. Caller holds mu.
func (c *Conn) appendLocked(lane *[]byte, p packet.Packet) error {
	if c.err != nil {
		return c.err
	}
	if c.closing {
		return ErrClosed
	}
	b, err := c.codec.Append(*lane, p)
	if err != nil {
		return err // the packet, not the connection
	}
	*lane = b
	return nil
}

func (c *Conn) wake() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// Done is closed when the connection broke or was closed.
func (c *Conn) Done() <-chan struct{} { return c.broken }

// Err returns why the connection broke (nil while it works).
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// fail records why the connection broke (first wins) and closes the
// socket, so a blocked Read or write returns.
func (c *Conn) fail(err error) {
	c.mu.Lock()
	first := c.err == nil
	if first {
		c.err = err
		close(c.broken)
		c.freeRoomLocked()
	}
	c.mu.Unlock()
	if first {
		c.nc.Close()
		c.wake()
	}
}

// Close writes what is queued (a DISCONNECT, say) within the write
// timeout, then closes the socket and waits for the flusher.
func (c *Conn) Close() error {
	c.mu.Lock()
	c.closing = true
	c.mu.Unlock()
	c.wake()
	t := time.NewTimer(c.timeout)
	defer t.Stop()
	select {
	case <-c.done:
	case <-t.C:
	}
	c.fail(ErrClosed)
	<-c.done
	return nil
}

// Abort closes the connection at once, dropping what is queued, with err
// as its reason (nil: ErrClosed), and waits for the flusher.
func (c *Conn) Abort(err error) {
	if err == nil {
		err = ErrClosed
	}
	c.fail(err)
	<-c.done
}

func (c *Conn) freeRoomLocked() {
	if c.room != nil {
		close(c.room)
		c.room = nil
	}
}

// flushLoop is the writer goroutine: it writes the control lane, then
// the data lane, in one batch.
func (c *Conn) flushLoop() {
	defer close(c.done)
	var buf []byte
	for {
		c.mu.Lock()
		for c.err == nil && len(c.ctl) == 0 && len(c.data) == 0 && !c.closing {
			c.mu.Unlock()
			<-c.kick
			c.mu.Lock()
		}
		if c.err != nil {
			c.mu.Unlock()
			return
		}
		closing := c.closing
		buf = append(c.spare[:0], c.ctl...)
		buf = append(buf, c.data...)
		c.ctl, c.data = c.ctl[:0], c.data[:0]
		c.freeRoomLocked()
		c.mu.Unlock()
		if len(buf) == 0 && closing {
			return // Close: everything was written
		}
		if err := c.write(buf); err != nil {
			c.fail(err)
			return
		}
		c.mu.Lock()
		c.written += uint64(len(buf))
		c.mu.Unlock()
		c.lastWrite.Store(time.Now().UnixNano())
		if cap(buf) <= 4*maxPending {
			c.spare = buf
		}
	}
}

// write writes p in chunks with a deadline each.
func (c *Conn) write(p []byte) error {
	for done := 0; done < len(p); {
		end := min(len(p), done+writeChunk)
		if err := c.nc.SetWriteDeadline(time.Now().Add(c.timeout)); err != nil {
			return fmt.Errorf("set write deadline: %w", err)
		}
		n, err := c.nc.Write(p[done:end])
		done += n
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return fmt.Errorf("%w (%s): %w", ErrWriteTimeout, c.timeout, err)
			}
			return fmt.Errorf("write: %w", err)
		}
	}
	return nil
}
