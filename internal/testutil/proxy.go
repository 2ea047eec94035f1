package testutil

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
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
)

// Proxy is a TCP proxy on 127.0.0.1 in front of a target, for the faults
// a test puts on a link: it delays what crosses it (SetDelay), counts the
// bytes it wrote each way (Bytes), closes every connection (Cut), turns
// new connections away (Refuse), stops forwarding both ways while keeping
// the sockets open (Freeze, a half-open link), and, given a filter for a
// direction (Filter), reads that direction whole MQTT packet by packet and
// forwards, drops or sinks each. A filter runs on the connection's own
// goroutine: while it blocks, that direction of that connection waits (a
// hold, in order). Everything stops when the test ends.
type Proxy struct {
	ln     net.Listener
	target string
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	delay  [2]atomic.Int64 // nanoseconds, by Dir
	bytes  [2]atomic.Int64 // written, by Dir
	refuse atomic.Bool

	mu     sync.Mutex
	conns  []net.Conn
	frozen chan struct{} // non-nil while frozen; closed by Thaw
	filter [2]func(pkt []byte) Verdict
}

// StartProxy listens on a free 127.0.0.1 port and forwards each
// connection to target.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{ln: ln, target: target, ctx: ctx, cancel: cancel}
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
	at time.Time
	b  []byte
}

// pipe reads src and hands what it read, filtered, to a writer that
// writes it to dst at its time. Either end failing closes both.
func (p *Proxy) pipe(src, dst net.Conn, d Dir, filter func([]byte) Verdict) {
	defer p.wg.Done()
	q := make(chan chunk, 4096)
	wrote := make(chan struct{}) // closed when the writer ends
	p.wg.Add(1)
	go func() { defer close(wrote); p.write(dst, src, d, q) }()
	defer close(q)
	send := func(b []byte) bool {
		select {
		case q <- chunk{time.Now().Add(time.Duration(p.delay[d].Load())), b}:
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
		if n > 0 && filter == nil && !send(append([]byte(nil), buf[:n]...)) {
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
				if v == Sink {
					sunk, pending = true, nil
					break
				}
				if v == Pass && !send(pkt) {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// write writes each chunk of q to dst once its time came and the proxy
// is not frozen, counting the bytes; it closes both ends when q ends or a
// write fails.
func (p *Proxy) write(dst, src net.Conn, d Dir, q <-chan chunk) {
	defer p.wg.Done()
	defer src.Close()
	defer dst.Close()
	for c := range q {
		if w := time.Until(c.at); w > 0 {
			t := time.NewTimer(w)
			select {
			case <-t.C:
			case <-p.ctx.Done():
				t.Stop()
				return
			}
		}
		if !p.waitThawed() {
			return
		}
		n, err := dst.Write(c.b)
		p.bytes[d].Add(int64(n))
		if err != nil {
			return
		}
	}
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
