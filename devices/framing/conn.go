package framing

// Design note. Conn turns a framed serial link into the byte stream an MQTT
// implementation expects. Reads and writes are independent lanes with their
// own locks: the read side (rmu) owns the frame Reader and the leftover bytes
// of the last packet; the write side (wmu) owns the frame Writer and the bytes
// of a packet whose end has not been written yet. Neither lock is held by the
// other side, so a reader blocked on the port never stalls a writer.

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Mode selects how MQTT packets are carried on the link.
type Mode int

// Framing modes.
const (
	// ModeCOBSCRC16 sends each MQTT control packet as one frame,
	// COBS(packet || CRC-16/CCITT-FALSE) || 0x00. The default.
	ModeCOBSCRC16 Mode = iota
	// ModeRaw sends the plain MQTT byte stream.
	ModeRaw
)

// String returns the configuration name of the mode: "cobs-crc16" or "raw".
func (m Mode) String() string {
	switch m {
	case ModeCOBSCRC16:
		return "cobs-crc16"
	case ModeRaw:
		return "raw"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// ParseMode parses a framing name as used in configuration ("cobs-crc16",
// "raw"); the empty string selects the default, cobs-crc16.
func ParseMode(s string) (Mode, error) {
	switch s {
	case "", "cobs-crc16":
		return ModeCOBSCRC16, nil
	case "raw":
		return ModeRaw, nil
	}
	return 0, fmt.Errorf("framing: unknown framing %q (want cobs-crc16 or raw)", s)
}

// ErrMalformed is returned by Conn.Write when the written stream is not a
// sequence of MQTT control packets (a remaining length longer than 4 bytes).
var ErrMalformed = errors.New("framing: malformed mqtt fixed header")

// ErrNewConnect is returned by Conn.Read, with SplitOnConnect set, when a
// CONNECT frame arrives after other packets: the peer has restarted its MQTT
// connection (typically a sensor reboot). The bytes of earlier packets have
// all been returned; the next Read returns the new CONNECT packet.
var ErrNewConnect = errors.New("framing: new connect on link")

// Config configures a Conn. The zero value is cobs-crc16 framing with
// DefaultMaxFrame.
type Config struct {
	Mode     Mode
	MaxFrame int    // max encoded frame size; <= 0 selects DefaultMaxFrame
	Name     string // address reported by LocalAddr/RemoteAddr, e.g. the device path

	// SplitOnConnect makes Read return ErrNewConnect before an MQTT CONNECT
	// packet that is not the first packet read, so the caller can end the
	// previous logical connection (abnormally, firing its will) and serve
	// the same Conn again for the new one. Framed mode only: in raw mode
	// packet boundaries are not known to Conn.
	SplitOnConnect bool
}

// Addr is the net.Addr of a serial link.
type Addr string

// Network returns "serial".
func (Addr) Network() string { return "serial" }

// String returns the device name.
func (a Addr) String() string { return string(a) }

// deadliner is implemented by ports that support deadlines (os.File on a
// pollable tty, net.Conn, serialport.Port).
type deadliner interface {
	SetReadDeadline(t time.Time) error
	SetWriteDeadline(t time.Time) error
}

// Conn presents a serial link as a plain MQTT byte stream and implements
// net.Conn. In cobs-crc16 mode, Read returns the packets of good frames back
// to back, and Write accepts any chunking of an MQTT packet stream (several
// packets in one call, or one packet over several calls) and writes exactly
// one frame per control packet, as soon as its last byte is written. In raw
// mode both directions pass through unchanged.
//
// Deadlines are passed to the port if it has SetReadDeadline and
// SetWriteDeadline (a pollable *os.File, serialport.Port, net.Conn); otherwise
// they are accepted and ignored. Read and Write may be called concurrently
// with each other; Close closes the port.
type Conn struct {
	rw        io.ReadWriteCloser
	cfg       Config
	maxPacket int

	rmu     sync.Mutex // read lane
	fr      *Reader
	pending []byte // unread bytes of the last packet; aliases fr's buffer
	nread   uint64 // packets read since the last split (SplitOnConnect)

	wmu  sync.Mutex // write lane
	fw   *Writer
	wbuf []byte // bytes of the packet being assembled

	closeOnce sync.Once
	closeErr  error
}

// NewConn returns a Conn over rw, which it owns: Conn.Close closes rw.
func NewConn(rw io.ReadWriteCloser, cfg Config) *Conn {
	if cfg.MaxFrame <= 0 {
		cfg.MaxFrame = DefaultMaxFrame
	}
	cfg.MaxFrame = max(cfg.MaxFrame, MinMaxFrame)
	if cfg.Name == "" {
		if n, ok := rw.(interface{ Name() string }); ok {
			cfg.Name = n.Name()
		} else {
			cfg.Name = "serial"
		}
	}
	c := &Conn{rw: rw, cfg: cfg, maxPacket: MaxPacketLen(cfg.MaxFrame)}
	if cfg.Mode == ModeCOBSCRC16 {
		c.fr = NewReader(rw, cfg.MaxFrame)
		c.fw = NewWriter(rw, cfg.MaxFrame)
	}
	return c
}

// Mode returns the framing mode.
func (c *Conn) Mode() Mode { return c.cfg.Mode }

// Stats returns the frame counters of the read side (zero in raw mode).
func (c *Conn) Stats() Stats {
	if c.fr == nil {
		return Stats{}
	}
	return c.fr.Stats()
}

// Read reads MQTT bytes: in framed mode, the packets of good frames.
func (c *Conn) Read(p []byte) (int, error) {
	if c.fr == nil {
		return c.rw.Read(p)
	}
	if len(p) == 0 {
		return 0, nil
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	for len(c.pending) == 0 {
		pkt, err := c.fr.ReadFrame()
		if err != nil {
			return 0, err
		}
		// The first byte's high nibble is the packet type; 1 is CONNECT.
		if c.cfg.SplitOnConnect && c.nread > 0 && pkt[0]>>4 == 1 {
			c.nread = 1
			c.pending = pkt // stays valid: ReadFrame is not called before it is drained
			return 0, ErrNewConnect
		}
		c.nread++
		c.pending = pkt
	}
	n := copy(p, c.pending)
	c.pending = c.pending[n:]
	return n, nil
}

// Write writes MQTT bytes. In framed mode each complete control packet is
// sent as one frame as soon as its last byte arrives; the bytes of an
// incomplete packet are kept for the next Write and counted as written. It
// returns ErrMalformed for a bad remaining length and ErrFrameTooLarge for a
// packet longer than MaxPacketLen(MaxFrame); the stream cannot be resumed
// after either.
func (c *Conn) Write(p []byte) (int, error) {
	if c.fw == nil {
		return c.rw.Write(p)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	n := 0
	for len(p) > 0 {
		if len(c.wbuf) == 0 {
			// Fast path: whole packets straight from p, no copy.
			size, err := packetLen(p)
			if err != nil {
				return n, err
			}
			if size > c.maxPacket {
				return n, fmt.Errorf("write packet of %d bytes: %w", size, ErrFrameTooLarge)
			}
			if size > 0 && size <= len(p) {
				if err := c.fw.WriteFrame(p[:size]); err != nil {
					return n, err
				}
				n += size
				p = p[size:]
				continue
			}
		}
		size, err := packetLen(c.wbuf)
		if err != nil {
			c.wbuf = c.wbuf[:0]
			return n, err
		}
		if size == 0 { // header incomplete: take one more byte
			c.wbuf = append(c.wbuf, p[0])
			n++
			p = p[1:]
			continue
		}
		if size > c.maxPacket {
			c.wbuf = c.wbuf[:0]
			return n, fmt.Errorf("write packet of %d bytes: %w", size, ErrFrameTooLarge)
		}
		k := min(size-len(c.wbuf), len(p))
		c.wbuf = append(c.wbuf, p[:k]...)
		n += k
		p = p[k:]
		if len(c.wbuf) == size {
			err := c.fw.WriteFrame(c.wbuf)
			c.wbuf = c.wbuf[:0]
			if err != nil {
				return n, err
			}
		}
	}
	// A header-only prefix may have been completed by the last byte.
	if size, err := packetLen(c.wbuf); err == nil && size > 0 && size == len(c.wbuf) {
		err := c.fw.WriteFrame(c.wbuf)
		c.wbuf = c.wbuf[:0]
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// packetLen returns the total length of the MQTT control packet that starts
// at b, or 0 if b does not yet hold its whole fixed header. The remaining
// length is a variable byte integer of at most 4 bytes, 5.0 §1.5.5
// (3.1.1 §2.2.3).
func packetLen(b []byte) (int, error) {
	rem, mult := 0, 1
	for i := 1; i <= 4; i++ {
		if i >= len(b) {
			return 0, nil
		}
		d := b[i]
		rem += int(d&0x7F) * mult
		if d&0x80 == 0 {
			return 1 + i + rem, nil
		}
		mult *= 128
	}
	return 0, ErrMalformed
}

// Close closes the port. It is safe to call more than once.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() { c.closeErr = c.rw.Close() })
	return c.closeErr
}

// LocalAddr returns the link's name as an Addr.
func (c *Conn) LocalAddr() net.Addr { return Addr(c.cfg.Name) }

// RemoteAddr returns the link's name as an Addr.
func (c *Conn) RemoteAddr() net.Addr { return Addr(c.cfg.Name) }

// SetDeadline sets both deadlines, see SetReadDeadline and SetWriteDeadline.
func (c *Conn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}

// SetReadDeadline sets the port's read deadline if the port supports
// deadlines; otherwise it does nothing. A Read that times out may be retried:
// no frame bytes are lost.
func (c *Conn) SetReadDeadline(t time.Time) error {
	if d, ok := c.rw.(deadliner); ok {
		return d.SetReadDeadline(t)
	}
	return nil
}

// SetWriteDeadline sets the port's write deadline if the port supports
// deadlines; otherwise it does nothing.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	if d, ok := c.rw.(deadliner); ok {
		return d.SetWriteDeadline(t)
	}
	return nil
}
