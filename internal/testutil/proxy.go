package testutil

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Dir is one direction through a Proxy.
type Dir int

const (
	Up   Dir = iota // from the client that connected to the proxy towards the target
	Down            // from the target back to the client
)

// Verdict is what a Proxy's packet filter does with one MQTT packet.
type Verdict int

const (
	Pass Verdict = iota // forward it
	Drop                // discard it; later packets still pass
	// Sink discards it and everything after it on that connection in that
	// direction: the link died right there, though neither end knows it.
	Sink
	// Hold keeps it back while later packets pass, until Allow or Release
	// lets it go (the held packets of a connection go in the order they
	// came; those of a closed connection are lost with it).
	Hold
	// Close discards it and closes the connection there, once what was
	// read before it has been written: the peer hung up at this packet.
	Close
)

// Proxy is a TCP proxy on 127.0.0.1 in front of a target, for the faults
// a test puts on a link: it delays what crosses it (SetDelay), counts the
// bytes it wrote each way (Bytes), closes every connection (Cut), turns
// new connections away (Refuse), stops forwarding both ways while keeping
// the sockets open (Freeze, a half-open link), and, given a filter for a
// direction (Filter), reads that direction whole MQTT packet by packet and
// forwards, drops, sinks, holds back or closes at each. A filter runs on
// the connection's own goroutine: while it blocks, that direction of that
// connection waits (a hold, in order). SetRate makes a link of a given
// bandwidth. Everything stops when the test ends.
type Proxy struct {
	ln     net.Listener
	target string
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	delay  [2]atomic.Int64 // nanoseconds, by Dir
	rate   [2]atomic.Int64 // bytes per second, by Dir; 0: unlimited
	bytes  [2]atomic.Int64 // written, by Dir
	refuse atomic.Bool

	mu      sync.Mutex
	conns   []net.Conn
	frozen  chan struct{} // non-nil while frozen; closed by Thaw
	filter  [2]func(pkt []byte) Verdict
	held    [2]int           // packets held back now (Hold), by Dir
	allowed [2]int           // held packets that may still go; < 0: all
	release [2]chan struct{} // closed (and remade) when allowed grows
}

// StartProxy listens on a free 127.0.0.1 port and forwards each
// connection to target. The sockets it accepts have a small fixed receive
// buffer (no autotuning), like a cellular modem's, so that a frozen proxy
// backs the client's writes up quickly.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 64<<10)
		})
		return errors.Join(err, serr)
	}}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{ln: ln, target: target, ctx: ctx, cancel: cancel}
	for d := range p.release {
		p.release[d] = make(chan struct{})
	}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetDelay holds what is read in direction d for delay before it is
// written (a link with that one-way latency; order is kept). It applies
// to what is read from then on.
func (p *Proxy) SetDelay(d Dir, delay time.Duration) { p.delay[d].Store(int64(delay)) }

// SetRate lets at most rate bytes a second through in direction d, on
// each connection (0: no limit): packets queue behind each other, as in a
// modem's buffer. It applies to what is written from then on.
func (p *Proxy) SetRate(d Dir, rate int) { p.rate[d].Store(int64(rate)) }

// Allow lets n of the packets held back in direction d go (Hold), the
// oldest first, and where fewer are held, the next ones held pass at
// once; n < 0 lets every one go, now and later, until the next Allow.
// Allow(d, 0) holds every packet the filter holds from then on.
func (p *Proxy) Allow(d Dir, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.allowed[d] = n
	p.releasedLocked(d)
}

// Release lets n more held packets go in direction d (see Allow).
func (p *Proxy) Release(d Dir, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.allowed[d] >= 0 {
		p.allowed[d] += n
	}
	p.releasedLocked(d)
}

// Held returns how many packets are held back in direction d now, and
// how many more may go (< 0: all).
func (p *Proxy) Held(d Dir) (held, allowed int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held[d], p.allowed[d]
}

func (p *Proxy) releasedLocked(d Dir) {
	close(p.release[d])
	p.release[d] = make(chan struct{})
}

// mayGo reports whether a held packet of direction d may go now, and
// counts it gone if so.
func (p *Proxy) mayGo(d Dir) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.allowed[d] < 0:
	case p.allowed[d] > 0:
		p.allowed[d]--
	default:
		return false
	}
	p.held[d]--
	return true
}

func (p *Proxy) addHeld(d Dir, n int) (released <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.held[d] += n
	return p.release[d]
}

// Bytes is how many bytes the proxy wrote in direction d: a link's bytes
// as the network sees them.
func (p *Proxy) Bytes(d Dir) int64 { return p.bytes[d].Load() }

// Refuse makes the proxy close new connections at once (true: the target
// is unreachable) or forward them again (false).
func (p *Proxy) Refuse(v bool) { p.refuse.Store(v) }

// Filter reads direction d of every connection (made from then on) as
// MQTT packets and gives each to f; nil forwards bytes as they come.
func (p *Proxy) Filter(d Dir, f func(pkt []byte) Verdict) {
	p.mu.Lock()
	p.filter[d] = f
	p.mu.Unlock()
}

// Cut closes every connection through the proxy (a reset link); new ones
// are forwarded as before.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// Freeze stops forwarding both ways, reading nothing more and keeping
// every socket open, until Thaw.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen == nil {
		p.frozen = make(chan struct{})
	}
}

// Thaw forwards again after Freeze.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen != nil {
		close(p.frozen)
		p.frozen = nil
	}
}

// waitThawed returns once the proxy is not frozen, false if it stopped.
func (p *Proxy) waitThawed() bool {
	p.mu.Lock()
	fr := p.frozen
	p.mu.Unlock()
	if fr == nil {
		return p.ctx.Err() == nil
	}
	select {
	case <-fr:
		return true
	case <-p.ctx.Done():
		return false
	}
}

func (p *Proxy) close() {
	p.cancel()
	p.ln.Close()
	p.Cut()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.refuse.Load() {
			c.Close()
			continue
		}
		u, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		if p.ctx.Err() != nil { // stopped while this one was accepted
			p.mu.Unlock()
			c.Close()
			u.Close()
			return
		}
		p.conns = append(p.conns, c, u)
		up, down := p.filter[Up], p.filter[Down]
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, u, Up, up)
		go p.pipe(u, c, Down, down)
	}
}

type chunk struct {
	at   time.Time
	b    []byte
	hold bool
}

// pipe reads src and hands what it read, filtered, to a writer that
// writes it to dst at its time. Either end failing closes both; a Close
// verdict closes dst once the writer wrote what came before, and the
// other direction closes src once it wrote what it read.
func (p *Proxy) pipe(src, dst net.Conn, d Dir, filter func([]byte) Verdict) {
	defer p.wg.Done()
	q := make(chan chunk, 4096)
	wrote := make(chan struct{}) // closed when the writer ends
	var hangUp atomic.Bool       // a Close verdict ended the reader
	p.wg.Add(1)
	go func() { defer close(wrote); p.write(dst, src, d, q, &hangUp) }()
	defer close(q)
	send := func(b []byte, hold bool) bool {
		select {
		case q <- chunk{time.Now().Add(time.Duration(p.delay[d].Load())), b, hold}:
			return true
		case <-wrote:
			return false
		case <-p.ctx.Done():
			return false
		}
	}
	var pending []byte // a filtered direction's bytes not yet a whole packet
	sunk := false
	buf := make([]byte, 32<<10)
	for p.waitThawed() {
		n, err := src.Read(buf)
		if n > 0 && filter == nil && !send(append([]byte(nil), buf[:n]...), false) {
			return
		}
		if n > 0 && filter != nil && !sunk {
			pending = append(pending, buf[:n]...)
			for {
				size, ok := MQTTPacketLen(pending)
				if !ok {
					break
				}
				pkt := pending[:size:size]
				pending = pending[size:]
				v := filter(pkt)
				if v == Close {
					hangUp.Store(true)
					return
				}
				if v == Sink {
					sunk, pending = true, nil
					break
				}
				if (v == Pass || v == Hold) && !send(pkt, v == Hold) {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// write writes each chunk of q to dst once its time came, the link is
// free (SetRate) and the proxy is not frozen, counting the bytes; a held
// chunk waits until Allow or Release lets it go. It closes both ends
// when q ends or a write fails, only dst when the reader hung up.
func (p *Proxy) write(dst, src net.Conn, d Dir, q <-chan chunk, hangUp *atomic.Bool) {
	defer p.wg.Done()
	var held [][]byte
	defer func() {
		p.addHeld(d, -len(held))
		dst.Close()
		if !hangUp.Load() {
			src.Close()
		}
	}()
	var free time.Time // when the link is free again (SetRate)
	until := func(at time.Time) bool {
		if w := time.Until(at); w > 0 {
			t := time.NewTimer(w)
			defer t.Stop()
			select {
			case <-t.C:
			case <-p.ctx.Done():
				return false
			}
		}
		return true
	}
	put := func(b []byte, at time.Time) bool {
		if r := p.rate[d].Load(); r > 0 { // it arrives when its last byte crossed
			free = maxTime(at, free).Add(time.Duration(len(b)) * time.Second / time.Duration(r))
			at = free
		}
		if !until(at) || !p.waitThawed() {
			return false
		}
		n, err := dst.Write(b)
		p.bytes[d].Add(int64(n))
		return err == nil
	}
	released := p.addHeld(d, 0)
	for {
		for len(held) > 0 && p.mayGo(d) {
			b := held[0]
			held = held[1:]
			if !put(b, time.Time{}) {
				return
			}
		}
		var c chunk
		select {
		case g, ok := <-q:
			if !ok {
				return
			}
			c = g
		case <-released:
			released = p.addHeld(d, 0)
			continue
		case <-p.ctx.Done():
			return
		}
		if c.hold {
			if !until(c.at) { // its delay first, as a packet that passes
				return
			}
			held = append(held, c.b)
			released = p.addHeld(d, 1)
			continue
		}
		if !put(c.b, c.at) {
			return
		}
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// MQTTPacketLen returns the length of the whole MQTT packet at the start
// of b (fixed header and remaining length), and whether b holds all of it.
func MQTTPacketLen(b []byte) (int, bool) {
	rem, mult := 0, 1
	for i := 1; i < len(b) && i <= 4; i++ {
		rem += int(b[i]&0x7f) * mult
		if b[i]&0x80 == 0 {
			total := 1 + i + rem
			return total, len(b) >= total
		}
		mult *= 128
	}
	return 0, false
}
