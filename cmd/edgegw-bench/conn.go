package main

// A minimal MQTT client for load generation. Design note: one reader
// goroutine per connection parses frames in place from its bufio.Reader (no
// allocation per message); writes go through a bufio.Writer under wmu and
// are flushed in batches: by a publisher when its window is full or its
// batch ends, by the reader when it has drained its input and owes acks.
// The handshake (CONNECT/SUBSCRIBE) goes through the project codec's
// Decode; the hot path encodes with packet.Append into the writer's own
// buffer and parses PUBLISH/acks by hand (fixed layouts), which the codec
// cannot do without allocating a packet per message.

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/edgegw/edgegw/gateway/packet"
)

const maxFrame = 1 << 20

var errMalformed = errors.New("malformed packet from broker")

type conn struct {
	nc net.Conn
	br *bufio.Reader
	v  packet.Version

	wmu     sync.Mutex // guards bw, dirty and the reusable packets below
	bw      *bufio.Writer
	dirty   bool
	puback  packet.Puback
	pubrec  packet.Pubrec
	pubrel  packet.Pubrel
	pubcomp packet.Pubcomp

	rbuf []byte // only touched by the reader goroutine
}

type dialOpts struct {
	addr       string
	clientID   string
	v          packet.Version
	clean      bool
	keepAlive  uint16
	recvMax    uint16 // v5 receive maximum; 0 = not sent
	sessExpiry uint32 // v5 session expiry; 0 = not sent
	rbufSize   int
	wbufSize   int
}

// dial connects and completes CONNECT/CONNACK within the context's deadline
// (or 10 s).
func dial(ctx context.Context, o dialOpts) (*conn, error) {
	d := net.Dialer{Timeout: 10 * time.Second}
	nc, err := d.DialContext(ctx, "tcp", o.addr)
	if err != nil {
		return nil, err
	}
	if o.rbufSize == 0 {
		o.rbufSize = 32 << 10
	}
	if o.wbufSize == 0 {
		o.wbufSize = 32 << 10
	}
	c := &conn{nc: nc, br: bufio.NewReaderSize(nc, o.rbufSize), bw: bufio.NewWriterSize(nc, o.wbufSize), v: o.v}
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(10 * time.Second)
	}
	nc.SetDeadline(dl)
	cp := &packet.Connect{Version: o.v, CleanStart: o.clean, KeepAlive: o.keepAlive, ClientID: o.clientID}
	if o.v == packet.V5 {
		if o.recvMax > 0 {
			cp.Props.ReceiveMaximum = o.recvMax
			cp.Props.Set(packet.PropReceiveMaximum)
		}
		if o.sessExpiry > 0 {
			cp.Props.SessionExpiry = o.sessExpiry
			cp.Props.Set(packet.PropSessionExpiry)
		}
	}
	if err := c.writeNow(cp); err != nil {
		nc.Close()
		return nil, fmt.Errorf("write connect: %w", err)
	}
	p, err := packet.Decode(c.br, o.v, maxFrame)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("read connack: %w", err)
	}
	ca, ok := p.(*packet.Connack)
	if !ok {
		nc.Close()
		return nil, fmt.Errorf("read connack: got %v", p.Type())
	}
	if ca.ReasonCode != 0 {
		nc.Close()
		return nil, fmt.Errorf("connack: refused with code %#x", byte(ca.ReasonCode))
	}
	nc.SetDeadline(time.Time{})
	return c, nil
}

// writeNow encodes p and flushes at once (handshake only).
func (c *conn) writeNow(p packet.Packet) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	b, err := packet.Append(c.bw.AvailableBuffer(), p, c.v)
	if err != nil {
		return err
	}
	if _, err := c.bw.Write(b); err != nil {
		return err
	}
	return c.bw.Flush()
}

// subscribe sends SUBSCRIBE and waits for SUBACK; call before the reader
// goroutine starts.
func (c *conn) subscribe(ctx context.Context, filter string, qos byte) error {
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(10 * time.Second)
	}
	c.nc.SetDeadline(dl)
	defer c.nc.SetDeadline(time.Time{})
	sp := &packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: filter, QoS: qos}}}
	if err := c.writeNow(sp); err != nil {
		return fmt.Errorf("write subscribe: %w", err)
	}
	for {
		p, err := packet.Decode(c.br, c.v, maxFrame)
		if err != nil {
			return fmt.Errorf("read suback: %w", err)
		}
		sa, ok := p.(*packet.Suback)
		if !ok {
			continue // e.g. a retained PUBLISH; ignore during setup
		}
		if len(sa.ReasonCodes) != 1 || sa.ReasonCodes[0] >= 0x80 {
			return fmt.Errorf("suback: refused %v", sa.ReasonCodes)
		}
		return nil
	}
}

// close sends DISCONNECT (best effort, short deadline) and closes.
func (c *conn) close() {
	c.nc.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
	c.wmu.Lock()
	if b, err := packet.Append(c.bw.AvailableBuffer(), &packet.Disconnect{}, c.v); err == nil {
		c.bw.Write(b)
		c.bw.Flush()
	}
	c.wmu.Unlock()
	c.nc.Close()
}

// appendLocked encodes p into the write buffer. Caller holds c.wmu.
func (c *conn) appendLocked(p packet.Packet) error {
	b, err := packet.Append(c.bw.AvailableBuffer(), p, c.v)
	if err != nil {
		return err
	}
	_, err = c.bw.Write(b)
	c.dirty = true
	return err
}

func (c *conn) flush() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if !c.dirty {
		return nil
	}
	c.dirty = false
	return c.bw.Flush()
}

// sendAck queues an acknowledgement; the reader flushes when it has drained
// its input.
func (c *conn) sendAck(t packet.Type, id uint16) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	switch t {
	case packet.PUBACK:
		c.puback.PacketID = id
		return c.appendLocked(&c.puback)
	case packet.PUBREC:
		c.pubrec.PacketID = id
		return c.appendLocked(&c.pubrec)
	case packet.PUBREL:
		c.pubrel.PacketID = id
		return c.appendLocked(&c.pubrel)
	default:
		c.pubcomp.PacketID = id
		return c.appendLocked(&c.pubcomp)
	}
}

// readFrame returns the first byte and the body of the next packet. The
// body aliases the reader's buffer and is valid until the next call.
func (c *conn) readFrame() (byte, []byte, error) {
	first, err := c.br.ReadByte()
	if err != nil {
		return 0, nil, err
	}
	n, mult := 0, 1
	for i := 0; ; i++ {
		b, err := c.br.ReadByte()
		if err != nil {
			return 0, nil, err
		}
		n += int(b&0x7f) * mult
		if b&0x80 == 0 {
			break
		}
		if i == 3 {
			return 0, nil, errMalformed
		}
		mult <<= 7
	}
	if n > maxFrame {
		return 0, nil, errMalformed
	}
	if n <= c.br.Size() {
		body, err := c.br.Peek(n)
		if err != nil {
			return 0, nil, err
		}
		c.br.Discard(n)
		return first, body, nil
	}
	if cap(c.rbuf) < n {
		c.rbuf = make([]byte, n)
	}
	body := c.rbuf[:n]
	if _, err := io.ReadFull(c.br, body); err != nil {
		return 0, nil, err
	}
	return first, body, nil
}

// parsePublish extracts QoS, packet id and payload from a PUBLISH body in
// place (topic and v5 properties are skipped).
func parsePublish(first byte, body []byte, v packet.Version) (qos byte, id uint16, payload []byte, err error) {
	qos = first >> 1 & 3
	if len(body) < 2 {
		return 0, 0, nil, errMalformed
	}
	off := 2 + int(binary.BigEndian.Uint16(body))
	if qos > 0 {
		if len(body) < off+2 {
			return 0, 0, nil, errMalformed
		}
		id = binary.BigEndian.Uint16(body[off:])
		off += 2
	}
	if v == packet.V5 {
		pl, mult := 0, 1
		for i := 0; ; i++ {
			if off >= len(body) || i == 4 {
				return 0, 0, nil, errMalformed
			}
			b := body[off]
			off++
			pl += int(b&0x7f) * mult
			if b&0x80 == 0 {
				break
			}
			mult <<= 7
		}
		off += pl
	}
	if off > len(body) {
		return 0, 0, nil, errMalformed
	}
	return qos, id, body[off:], nil
}

// events is what a reader loop reports; nil funcs are skipped.
type events struct {
	publish func(payload []byte) // an incoming PUBLISH (before its ack is queued)
	acked   func(id uint16)      // PUBACK, or PUBCOMP, for our outgoing publish
	noAck   bool                 // never acknowledge incoming PUBLISH (slowsub)
}

// readLoop runs until the connection fails or closes. It answers the QoS
// 1/2 flows and flushes owed acks whenever its input is drained.
func (c *conn) readLoop(ev events) error {
	for {
		first, body, err := c.readFrame()
		if err != nil {
			return err
		}
		switch packet.Type(first >> 4) {
		case packet.PUBLISH:
			qos, id, payload, err := parsePublish(first, body, c.v)
			if err != nil {
				return err
			}
			if ev.publish != nil {
				ev.publish(payload)
			}
			if !ev.noAck {
				switch qos {
				case 1:
					err = c.sendAck(packet.PUBACK, id)
				case 2:
					err = c.sendAck(packet.PUBREC, id)
				}
			}
			if err != nil {
				return err
			}
		case packet.PUBACK, packet.PUBCOMP:
			if len(body) < 2 {
				return errMalformed
			}
			if ev.acked != nil {
				ev.acked(binary.BigEndian.Uint16(body))
			}
		case packet.PUBREC:
			if len(body) < 2 {
				return errMalformed
			}
			if len(body) > 2 && body[2] >= 0x80 { // v5 refusal ends the flow
				if ev.acked != nil {
					ev.acked(binary.BigEndian.Uint16(body))
				}
				break
			}
			if err := c.sendAck(packet.PUBREL, binary.BigEndian.Uint16(body)); err != nil {
				return err
			}
		case packet.PUBREL:
			if len(body) < 2 {
				return errMalformed
			}
			if !ev.noAck {
				if err := c.sendAck(packet.PUBCOMP, binary.BigEndian.Uint16(body)); err != nil {
					return err
				}
			}
		case packet.DISCONNECT:
			return errors.New("broker sent DISCONNECT")
		}
		if c.br.Buffered() == 0 {
			if err := c.flush(); err != nil {
				return err
			}
		}
	}
}
