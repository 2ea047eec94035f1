package main

// linkProxy stands for a slow uplink between a gateway's bridge and its
// upstream broker (drain scenario): every byte is delayed by a one-way
// delay in each direction, and with a rate each direction carries at most
// that many bytes per second, queueing what waits (a modem's buffer, which
// is large). While down, it accepts and closes every connection (an
// outage the bridge sees as a refused CONNECT, not a hang).

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

type linkProxy struct {
	ln     net.Listener
	target string
	oneWay time.Duration
	rate   int // bytes/s each way; 0 = unlimited

	up     atomic.Bool
	upAt   atomic.Int64 // unix ns of the first connection accepted while up
	fwdUp  atomic.Int64 // bytes forwarded gateway -> upstream
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	conns []net.Conn
}

func startLinkProxy(listen, target string, oneWay time.Duration, rate int) (*linkProxy, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &linkProxy{ln: ln, target: target, oneWay: oneWay, rate: rate, ctx: ctx, cancel: cancel}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

func (p *linkProxy) close() {
	p.cancel()
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *linkProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.up.Load() {
			c.Close()
			continue
		}
		p.upAt.CompareAndSwap(0, time.Now().UnixNano())
		u, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, u)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, u, &p.fwdUp)
		go p.pipe(u, c, nil)
	}
}

type chunk struct {
	b   []byte
	due time.Time
}

// pipe carries src to dst through the link's delay and rate.
func (p *linkProxy) pipe(src, dst net.Conn, count *atomic.Int64) {
	defer p.wg.Done()
	q := make(chan chunk, 1<<16)
	p.wg.Add(1)
	go func() { // writer
		defer p.wg.Done()
		defer dst.Close()
		defer src.Close()
		var free time.Time
		for c := range q {
			for len(c.b) > 0 {
				n := len(c.b)
				due := c.due
				if p.rate > 0 { // one segment at a time, at the link's rate
					n = min(n, 1460)
					if free.After(due) {
						due = free
					}
					free = due.Add(time.Duration(n) * time.Second / time.Duration(p.rate))
				}
				if d := time.Until(due); d > 0 {
					select {
					case <-time.After(d):
					case <-p.ctx.Done():
						return
					}
				}
				if _, err := dst.Write(c.b[:n]); err != nil {
					return
				}
				if count != nil {
					count.Add(int64(n))
				}
				c.b = c.b[n:]
			}
		}
	}()
	defer close(q)
	for {
		buf := make([]byte, 16<<10)
		n, err := src.Read(buf)
		if n > 0 {
			select {
			case q <- chunk{buf[:n], time.Now().Add(p.oneWay)}:
			case <-p.ctx.Done():
				return
			}
		}
		if err != nil {
			return
		}
	}
}
