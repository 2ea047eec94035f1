package main

// The drain scenario (issue 20): a gateway (--addr) bridges bench/# out to
// an upstream broker (--upstream) through a slow link that this process
// plays (--proxy, linkproxy.go). With the link down, --count messages are
// published to the gateway and acknowledged (the backlog); then a live
// sensor starts publishing --rate msg/s, the link comes up, and the
// upstream subscriber times the backlog's arrival and the live messages'
// latency. The gateway's bridge must point at --proxy.
//
// Backlog payloads carry publisher index 0, live ones 1. The upstream
// subscription is QoS 0: a default mosquitto queues at most 1000 QoS 1/2
// messages for a subscriber and would drop the rest itself; QoS 0 to a
// connected subscriber is never dropped, so a missing message is the
// gateway's loss, and a repeated one the gateway's duplicate.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgegw/edgegw/gateway/packet"
)

// drainReceiver is the upstream subscriber's view; publish runs on its
// reader goroutine only.
type drainReceiver struct {
	base    time.Time
	upAt    *atomic.Int64 // unix ns of the bridge's first connection through the link
	isQoS2  func(seq uint32) bool
	seen    []bool // backlog sequence numbers received
	liveRx  map[uint32]bool
	live    Hist
	dups    int64 // backlog duplicates
	dups2   int64 // of them QoS 2
	liveDup int64

	backlog   atomic.Int64 // distinct backlog messages received
	liveN     atomic.Int64 // distinct live messages received
	firstNs   atomic.Int64 // first backlog arrival, ns since base
	lastNs    atomic.Int64 // latest backlog arrival
	mu        sync.Mutex   // guards live and the counters above for reading
	malformed int64
}

func (r *drainReceiver) publish(payload []byte) {
	now := time.Since(r.base)
	if len(payload) < minPayload {
		r.malformed++
		return
	}
	idx := binary.BigEndian.Uint32(payload[8:])
	seq := binary.BigEndian.Uint32(payload[12:])
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case idx == 0 && int(seq) < len(r.seen):
		if r.seen[seq] {
			r.dups++
			if r.isQoS2(seq) {
				r.dups2++
			}
			return
		}
		r.seen[seq] = true
		r.firstNs.CompareAndSwap(0, int64(now))
		r.lastNs.Store(int64(now))
		r.backlog.Add(1)
	case idx == 1:
		if r.liveRx[seq] {
			r.liveDup++
			return
		}
		r.liveRx[seq] = true
		r.liveN.Add(1)
		// Latency after the uplink is back: live messages sent before the
		// bridge's connection waited for the reconnect, not the drain.
		sent := time.Duration(binary.BigEndian.Uint64(payload))
		if up := r.upAt.Load(); up != 0 && r.base.Add(sent).UnixNano() >= up {
			r.live.Record(now - sent)
		}
	default:
		r.malformed++
	}
}

func runDrain(ctx context.Context, cfg *config, res *Result) error {
	if cfg.upstream == "" || cfg.proxy == "" {
		return errors.New("drain needs --upstream (the upstream broker) and --proxy (the link's listen address, the bridge's upstream)")
	}
	n := cfg.count
	if n <= 0 {
		n = 20000
	}
	rate := cfg.rate
	if rate <= 0 {
		rate = 10
	}
	qos := byte(cfg.qos)
	isQoS2 := func(seq uint32) bool { return qos == 2 }
	if cfg.qos2Every > 0 { // mixed: every qos2Every-th message QoS 2, the rest QoS 1
		qos = 1
		isQoS2 = func(seq uint32) bool { return seq%uint32(cfg.qos2Every) == 0 }
	}
	res.Pubs, res.Subs, res.Rate = 2, 1, rate
	res.Backlog, res.RTTms, res.LinkRate, res.QoS2Every = n, float64(cfg.rtt)/1e6, cfg.linkRate, cfg.qos2Every

	px, err := startLinkProxy(cfg.proxy, cfg.upstream, cfg.rtt/2, cfg.linkRate)
	if err != nil {
		return fmt.Errorf("link proxy: %w", err)
	}
	defer px.close()

	base := time.Now()
	var g group
	defer g.closeAll()
	topic := "bench/" + runID + "/drain"
	sub, err := g.dial(ctx, dialOpts{addr: cfg.upstream, clientID: "drain-sub-" + runID, v: packet.V311, clean: true, keepAlive: 60, rbufSize: 256 << 10})
	if err != nil {
		return fmt.Errorf("upstream subscriber: %w", err)
	}
	if err := sub.subscribe(ctx, topic+"/#", 0); err != nil {
		return err
	}
	rx := &drainReceiver{base: base, upAt: &px.upAt, isQoS2: isQoS2, seen: make([]bool, n+1), liveRx: map[uint32]bool{}}
	g.read(sub, events{publish: rx.publish})

	// The backlog, with the link down: every message acknowledged by the
	// gateway (for edgegw: in its spool).
	pc, err := g.dial(ctx, dialOpts{addr: cfg.addr, clientID: "drain-pub-" + runID, v: packet.V311, clean: true, keepAlive: 60})
	if err != nil {
		return fmt.Errorf("gateway publisher: %w", err)
	}
	p := newPublisher(pc, base, 0, topic+"/backlog", qos, cfg.size, cfg.window)
	g.read(pc, events{acked: p.onAck})
	stop := make(chan struct{})
	defer close(stop)
	for i := 1; i <= n; i++ {
		p.pub.QoS = qos
		if isQoS2(uint32(i)) {
			p.pub.QoS = 2
		}
		if !p.publish(stop) {
			return errors.New("backlog publish: connection failed")
		}
	}
	if err := pc.flush(); err != nil {
		return err
	}
	waitFor(60*time.Second, 20*time.Second, func() bool { return p.acked.Load() >= int64(n) }, p.acked.Load)
	if a := p.acked.Load(); a < int64(n) {
		return fmt.Errorf("gateway acknowledged %d of %d backlog messages", a, n)
	}

	// The live sensor, then the link comes up.
	lc, err := g.dial(ctx, dialOpts{addr: cfg.addr, clientID: "drain-live-" + runID, v: packet.V311, clean: true, keepAlive: 60})
	if err != nil {
		return fmt.Errorf("live publisher: %w", err)
	}
	lp := newPublisher(lc, base, 1, topic+"/live", max(1, byte(cfg.qos)), cfg.size, 1000)
	g.read(lc, events{acked: lp.onAck})
	liveStop := make(chan struct{})
	var lwg sync.WaitGroup
	lwg.Add(1)
	go func() { defer lwg.Done(); pace(lp, liveStop, rate, 0) }()

	up := time.Now()
	px.up.Store(true)
	waitFor(cfg.duration, 30*time.Second, func() bool { return rx.backlog.Load() >= int64(n) }, rx.backlog.Load)
	close(liveStop)
	lwg.Wait()
	liveSent := lp.sent
	waitFor(30*time.Second, 10*time.Second, func() bool { return rx.liveN.Load() >= liveSent }, rx.liveN.Load)
	res.ElapsedS = time.Since(up).Seconds()

	rx.mu.Lock()
	defer rx.mu.Unlock()
	got := rx.backlog.Load()
	res.Sent = int64(n) + liveSent
	res.Acked = p.acked.Load() + lp.acked.Load()
	res.Received = got + rx.liveN.Load()
	res.Lost = int64(n) - got
	res.LiveSent, res.LiveLost = liveSent, liveSent-rx.liveN.Load()
	res.Dups, res.Dups2 = rx.dups+rx.liveDup, rx.dups2
	setLatency(res, &rx.live)
	if at := px.upAt.Load(); at != 0 {
		res.ReconnectS = time.Unix(0, at).Sub(up).Seconds()
		last := base.Add(time.Duration(rx.lastNs.Load()))
		res.DrainS = last.Sub(time.Unix(0, at)).Seconds()
		if got == int64(n) && res.DrainS > 0 {
			res.MsgPerS = float64(n) / res.DrainS
		}
		if cfg.linkRate > 0 && res.DrainS > 0 {
			res.LinkUse = float64(px.fwdUp.Load()) / (float64(cfg.linkRate) * res.DrainS)
		}
	}
	if res.Lost > 0 {
		return fmt.Errorf("%d of %d backlog messages never arrived upstream", res.Lost, n)
	}
	return nil
}
