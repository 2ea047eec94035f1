package main

// The well-behaved client: user bob publishes a small QoS 0 message to its
// own subscription every probeInterval and times each round trip. Samples
// are tagged with their send time, so one run of the probe gives the
// "before" and "during" windows of an attack.

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/edgegw/edgegw/gateway/packet"
)

const (
	probeInterval = 10 * time.Millisecond
	probeTopic    = "bob/probe"
	// lostRTT stands for a round trip that never completed: a lost probe
	// message counts as this slow in the p99.
	lostRTT = 5 * time.Second
)

type sample struct {
	sent time.Time
	rtt  time.Duration
	got  bool
}

type probe struct {
	c      *client
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	stopped bool // set before stop closes the connection: later errors are ours
	samples []sample
	err     error // first error of the connection, if it broke
}

func startProbe(ctx context.Context, addr string) (*probe, error) {
	c, _, err := dialMQTT(ctx, addr, login{user: "bob", pass: users["bob"], clientID: "probe", clean: true, from: goodIP})
	if err != nil {
		return nil, fmt.Errorf("probe connect: %w", err)
	}
	codes, err := c.subscribe(0, probeTopic)
	if err != nil || len(codes) != 1 || codes[0] != 0 {
		c.close()
		return nil, fmt.Errorf("probe subscribe: %v %v", codes, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	p := &probe{c: c, cancel: cancel}
	p.wg.Add(2)
	go func() { defer p.wg.Done(); p.readLoop() }()
	go func() { defer p.wg.Done(); p.sendLoop(ctx) }()
	return p, nil
}

func (p *probe) fail(err error) {
	p.mu.Lock()
	if p.err == nil && !p.stopped {
		p.err = err
	}
	p.mu.Unlock()
}

func (p *probe) readLoop() {
	for {
		pk, err := p.c.read()
		if err != nil {
			p.fail(fmt.Errorf("probe read: %w", err))
			return
		}
		pub, ok := pk.(*packet.Publish)
		if !ok || len(pub.Payload) != 8 {
			continue
		}
		seq := binary.BigEndian.Uint64(pub.Payload)
		now := time.Now()
		p.mu.Lock()
		if seq < uint64(len(p.samples)) && !p.samples[seq].got {
			s := &p.samples[seq]
			s.rtt, s.got = now.Sub(s.sent), true
		}
		p.mu.Unlock()
	}
}

func (p *probe) sendLoop(ctx context.Context) {
	t := time.NewTicker(probeInterval)
	defer t.Stop()
	pub := &packet.Publish{Topic: probeTopic, Payload: make([]byte, 8)}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p.mu.Lock()
		seq := len(p.samples)
		p.samples = append(p.samples, sample{sent: time.Now()})
		p.mu.Unlock()
		binary.BigEndian.PutUint64(pub.Payload, uint64(seq))
		p.c.nc.SetWriteDeadline(time.Now().Add(lostRTT))
		if err := p.c.send(pub); err != nil {
			p.fail(fmt.Errorf("probe write: %w", err))
			return
		}
	}
}

// stop ends sending, gives the last messages up to a second to arrive and
// returns the samples and the connection's error, if any.
func (p *probe) stop() ([]sample, error) {
	p.cancel()
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		p.mu.Lock()
		pending := p.err == nil && len(p.samples) > 0 && !p.samples[len(p.samples)-1].got
		p.mu.Unlock()
		if !pending {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	p.c.close()
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]sample(nil), p.samples...), p.err
}

// window summarises the samples sent in [from, to): the p99 round trip
// (lost messages count as lostRTT), how many were sent and how many lost.
type window struct {
	P99  time.Duration
	N    int
	Lost int
}

func summarize(samples []sample, from, to time.Time) window {
	var w window
	var rtts []time.Duration
	for _, s := range samples {
		if s.sent.Before(from) || !s.sent.Before(to) {
			continue
		}
		w.N++
		if !s.got {
			w.Lost++
			rtts = append(rtts, lostRTT)
			continue
		}
		rtts = append(rtts, s.rtt)
	}
	w.P99 = quantile(rtts, 0.99)
	return w
}

// quantile is the nearest-rank q-quantile (0 < q <= 1); 0 when empty.
func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	rank := int(math.Ceil(q * float64(len(s))))
	if rank < 1 {
		rank = 1
	}
	return s[rank-1]
}
