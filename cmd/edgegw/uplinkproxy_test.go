package main

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxies a bridge test puts between the binary and its cloud broker: an
// uplink with a round trip, resets and a byte count (delayProxy), and one
// that loses the first PUBREL with the link (pubrelHoldProxy).

// delayProxy forwards TCP connections to target and delays what comes back
// from target by a settable time: an uplink with that round trip. It
// counts the bytes it writes towards target: the uplink's bytes as the
// network sees them, not the bridge's own count.
type delayProxy struct {
	ln     net.Listener
	target string
	delay  atomic.Int64 // nanoseconds
	up     atomic.Int64 // bytes written to target
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	conns []net.Conn
}

func startDelayProxy(t *testing.T, target string, d time.Duration) *delayProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &delayProxy{ln: ln, target: target, ctx: ctx, cancel: cancel}
	p.delay.Store(int64(d))
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		cancel()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *delayProxy) addr() string { return p.ln.Addr().String() }

func (p *delayProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", p.target)
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
		p.mu.Unlock()
		p.wg.Add(2)
		go func() { defer p.wg.Done(); p.pipe(c, u, false) }()
		go func() { defer p.wg.Done(); p.pipe(u, c, true) }()
	}
}

// pipe copies src to dst, each chunk held until its read time + delay if
// delayed; order is kept. It closes both ends when either fails.
func (p *delayProxy) pipe(src, dst net.Conn, delayed bool) {
	defer src.Close()
	defer dst.Close()
	type chunk struct {
		at time.Time
		b  []byte
	}
	ch := make(chan chunk, 4096)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the writer; ends when the reader closes ch or the proxy stops
		defer wg.Done()
		defer dst.Close()
		for c := range ch {
			if w := time.Until(c.at); w > 0 {
				t := time.NewTimer(w)
				select {
				case <-t.C:
				case <-p.ctx.Done():
					t.Stop()
					return
				}
			}
			n, err := dst.Write(c.b)
			if !delayed {
				p.up.Add(int64(n))
			}
			if err != nil {
				return
			}
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			at := time.Now()
			if delayed {
				at = at.Add(time.Duration(p.delay.Load()))
			}
			select {
			case ch <- chunk{at, append([]byte(nil), buf[:n]...)}:
			case <-p.ctx.Done():
			}
		}
		if err != nil || p.ctx.Err() != nil {
			break
		}
	}
	close(ch)
	wg.Wait()
}

// reset closes every connection through the proxy (an uplink reset).
func (p *delayProxy) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// pubrelHoldProxy forwards TCP connections to target. Towards target it
// reads whole MQTT packets; at the first PUBREL it sees (once per proxy)
// it forwards nothing more of that connection (the PUBREL is lost on the
// way, as on a link that dies right then). Answers from target pass unchanged. While closed, it
// drops new connections at once (the cloud is unreachable).
type pubrelHoldProxy struct {
	ln     net.Listener
	target string
	open   atomic.Bool
	held   atomic.Int32 // 1 once a PUBREL was swallowed
	wg     sync.WaitGroup

	mu    sync.Mutex
	conns []net.Conn
}

func startPubrelHoldProxy(t *testing.T, target string) *pubrelHoldProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &pubrelHoldProxy{ln: ln, target: target}
	p.open.Store(true)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *pubrelHoldProxy) addr() string { return p.ln.Addr().String() }

func (p *pubrelHoldProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.open.Load() {
			c.Close()
			continue
		}
		u, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, u)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() { // upstream -> bridge: unchanged
			defer p.wg.Done()
			defer c.Close()
			defer u.Close()
			buf := make([]byte, 32<<10)
			for {
				n, err := u.Read(buf)
				if n > 0 {
					if _, werr := c.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
		go func() { // bridge -> upstream: packet by packet, until a PUBREL
			defer p.wg.Done()
			defer c.Close()
			defer u.Close()
			p.towardsTarget(c, u)
		}()
	}
}

// towardsTarget copies whole MQTT packets from src to dst; from the
// proxy's first PUBREL (fixed header 0x62) on, it reads and discards.
func (p *pubrelHoldProxy) towardsTarget(src, dst net.Conn) {
	var pending []byte
	holding := false
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		pending = append(pending, buf[:n]...)
		for !holding {
			size, ok := mqttPacketLen(pending)
			if !ok {
				break
			}
			if pending[0] == 0x62 && p.held.CompareAndSwap(0, 1) {
				holding = true
				break
			}
			if _, werr := dst.Write(pending[:size]); werr != nil {
				return
			}
			pending = pending[size:]
		}
		if holding {
			pending = pending[:0]
		}
		if err != nil {
			return
		}
	}
}

// mqttPacketLen returns the length of the whole packet at the start of b
// (fixed header + remaining length), if b holds all of it.
func mqttPacketLen(b []byte) (int, bool) {
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
