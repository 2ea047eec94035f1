package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"

	"github.com/edgegw/edgegw/internal/sockio"
)

// rawConn reads and writes a net.Conn through internal/sockio, as edgegw's
// connections do: a net.Conn's own Read and Write are ordinary system
// calls, and the first one after the process went idle wakes the
// runtime's monitor thread (sysmon), at sensor rates once per reading.
// A floor that paid that would measure a cost edgegw does not pay.
type rawConn struct {
	net.Conn
	raw syscall.RawConn
}

func newRawConn(c net.Conn) (*rawConn, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil, fmt.Errorf("%T has no raw connection", c)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("raw connection: %w", err)
	}
	return &rawConn{Conn: c, raw: raw}, nil
}

func (c *rawConn) Read(p []byte) (int, error)  { return sockio.Read(c.raw, p, true) }
func (c *rawConn) Write(p []byte) (int, error) { return sockio.Write(c.raw, p) }

// peer is a connection others write to (a subscriber, the uplink).
type peer struct {
	mu sync.Mutex
	c  net.Conn
}

func (p *peer) write(b []byte) {
	p.mu.Lock()
	p.c.Write(b)
	p.mu.Unlock()
}

// floor is the goroutine-per-connection design.
type floor struct {
	mu   sync.Mutex
	subs []*peer
	up   *peer // nil without -upstream
	upID uint16
}

func runGoroutines(addr, upstream string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	f := &floor{}
	if upstream != "" {
		uc, err := net.Dial("tcp", upstream)
		if err != nil {
			return fmt.Errorf("upstream: %w", err)
		}
		ruc, err := newRawConn(uc)
		if err != nil {
			return fmt.Errorf("upstream: %w", err)
		}
		uc = ruc
		uc.Write(connectPacket("gofloor-up"))
		go io.Copy(io.Discard, uc) // its CONNACK and PUBACKs
		f.up = &peer{c: uc}
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go f.serve(c)
	}
}

func (f *floor) serve(nc net.Conn) {
	defer nc.Close()
	c, err := newRawConn(nc)
	if err != nil {
		return
	}
	r := bufio.NewReaderSize(c, 512)
	self := &peer{c: c}
	var pk []byte
	for {
		var err error
		if pk, err = readPacket(r, pk[:0]); err != nil {
			return
		}
		h, body := pk[0], pk[headerLen(pk):]
		switch h >> 4 {
		case 1: // CONNECT
			self.write([]byte{0x20, 2, 0, 0})
		case 8: // SUBSCRIBE
			self.write(subackFor(body))
			f.mu.Lock()
			f.subs = append(f.subs, self)
			f.mu.Unlock()
		case 3: // PUBLISH
			f.mu.Lock()
			subs := f.subs
			f.mu.Unlock()
			for _, s := range subs {
				s.write(pk)
			}
			if h>>1&3 == 1 {
				at := publishID(body)
				id0, id1 := body[at], body[at+1]
				if f.up != nil {
					f.up.mu.Lock()
					id := nextID(&f.upID)
					body[at], body[at+1] = byte(id>>8), byte(id)
					f.up.c.Write(pk)
					f.up.mu.Unlock()
				}
				self.write([]byte{0x40, 2, id0, id1})
			}
		case 12: // PINGREQ
			self.write([]byte{0xd0, 0})
		case 14: // DISCONNECT
			return
		}
	}
}

// readPacket appends one whole packet (fixed header included) to buf.
func readPacket(r *bufio.Reader, buf []byte) ([]byte, error) {
	h, err := r.ReadByte()
	if err != nil {
		return buf, err
	}
	buf = append(buf, h)
	n := 0
	for shift := 0; ; shift += 7 {
		d, err := r.ReadByte()
		if err != nil {
			return buf, err
		}
		buf = append(buf, d)
		n |= int(d&0x7f) << shift
		if d&0x80 == 0 {
			break
		}
	}
	start := len(buf)
	buf = append(buf, make([]byte, n)...)
	_, err = io.ReadFull(r, buf[start:])
	return buf, err
}

// headerLen is the length of pk's fixed header.
func headerLen(pk []byte) int {
	i := 2
	for pk[i-1]&0x80 != 0 {
		i++
	}
	return i
}
