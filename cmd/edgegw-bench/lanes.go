package main

// The lanes scenario (issue 17): priority lanes and live-first drain
// after an outage. A gateway (--addr) bridges bench/# out to an upstream
// broker (--upstream) through the slow link this process plays (--proxy,
// linkproxy.go); its rules must put .../lanes/bulk/# in the `bulk` lane,
// .../lanes/alarm in `high`, and the live sensor's .../lanes/live in
// `normal` (--live-lane normal) or, with --live-lane bulk, .../lanes/bulk/live
// in `bulk` with the backlog (the case live-first is for: the live
// readings of the same lane as the backlog). With the link down, --count
// bulk messages (.../lanes/bulk/backlog) are published and acknowledged
// (the backlog); then a live sensor publishes --rate msg/s at --live-qos,
// the link comes up, and once half the backlog is upstream, or
// --alarm-after after the reconnect if that comes first, one alarm is
// published. The upstream subscriber records the latency of
// every live message and of the alarm, the backlog's arrival, and a time
// series of both (Result.Series) for the chart.
//
// Payload publisher index: 0 backlog, 1 live, 2 alarm. The upstream
// subscription is QoS 0, as in the drain scenario (drain.go): a missing
// message is the gateway's loss, a repeated one the gateway's duplicate.

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

// seriesStep is the resolution of Result.Series.
const seriesStep = 250 * time.Millisecond

// slowLive: a live message later than this is counted in Result.LiveSlow
// (the target for live latency during a drain is under one second).
const slowLive = time.Second

// SeriesPoint is one seriesStep of a lanes run, from the bridge's first
// connection through the link.
type SeriesPoint struct {
	T           float64 `json:"t_s"`          // end of the step, seconds after the connection
	BacklogLeft int64   `json:"backlog_left"` // backlog messages not yet upstream at T
	LiveN       int     `json:"live_n"`       // live messages that arrived in the step
	LiveMaxMs   float64 `json:"live_max_ms"`  // their highest latency
	LiveMeanMs  float64 `json:"live_mean_ms"`
}

// lanesStep accumulates one step, indexed by arrival time since base.
type lanesStep struct {
	backlog int64
	liveN   int
	liveSum time.Duration
	liveMax time.Duration
}

// lanesReceiver is the upstream subscriber's view; publish runs on its
// reader goroutine only.
type lanesReceiver struct {
	base   time.Time
	upAt   *atomic.Int64 // unix ns of the bridge's first connection through the link
	isQoS2 func(seq uint32) bool
	live2  bool // live messages are QoS 2

	mu     sync.Mutex // guards everything below
	seen   []bool     // backlog sequence numbers received
	liveRx map[uint32]bool
	live   Hist
	dups   int64 // backlog and live duplicates
	dups2  int64 // of them QoS 2
	lastNs int64 // latest backlog arrival, ns since base
	steps  []lanesStep
	// live messages later than slowLive: how many, and the span of their
	// send times (since base), to see which ones waited.
	slowN                   int64
	slowFirstTx, slowLastTx time.Duration
	alarmAt                 time.Duration // arrival of the alarm, since base; 0 = not yet
	alarmTx                 time.Duration // its send time
	malform                 int64

	backlog atomic.Int64 // distinct backlog messages received
	liveN   atomic.Int64 // distinct live messages received
	alarm   atomic.Bool
}

func (r *lanesReceiver) step(now time.Duration) *lanesStep {
	i := int(now / seriesStep)
	for len(r.steps) <= i {
		r.steps = append(r.steps, lanesStep{})
	}
	return &r.steps[i]
}

func (r *lanesReceiver) publish(payload []byte) {
	now := time.Since(r.base)
	if len(payload) < minPayload {
		r.mu.Lock()
		r.malform++
		r.mu.Unlock()
		return
	}
	sent := time.Duration(binary.BigEndian.Uint64(payload))
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
		r.lastNs = int64(now)
		r.step(now).backlog++
		r.backlog.Add(1)
	case idx == 1:
		if r.liveRx[seq] {
			r.dups++
			if r.live2 {
				r.dups2++
			}
			return
		}
		r.liveRx[seq] = true
		r.liveN.Add(1)
		// From the reconnect on: live messages sent before the bridge's
		// connection waited for the outage, not for the drain.
		if up := r.upAt.Load(); up != 0 && r.base.Add(sent).UnixNano() >= up {
			lat := now - sent
			r.live.Record(lat)
			if lat > slowLive {
				if r.slowN == 0 || sent < r.slowFirstTx {
					r.slowFirstTx = sent
				}
				r.slowLastTx = max(r.slowLastTx, sent)
				r.slowN++
			}
			s := r.step(now)
			s.liveN++
			s.liveSum += lat
			s.liveMax = max(s.liveMax, lat)
		}
	case idx == 2:
		if r.alarmAt != 0 {
			r.dups++
			return
		}
		r.alarmAt, r.alarmTx = now, sent
		r.alarm.Store(true)
	default:
		r.malform++
	}
}

// series turns the steps into points from the connection at upNs (ns
// since base) on.
func (r *lanesReceiver) series(upNs int64, total int64) []SeriesPoint {
	var out []SeriesPoint
	var got int64
	first := int(time.Duration(upNs) / seriesStep)
	for i, s := range r.steps {
		got += s.backlog
		if i < first {
			continue
		}
		p := SeriesPoint{
			T:           (time.Duration(i+1)*seriesStep - time.Duration(upNs)).Seconds(),
			BacklogLeft: total - got,
			LiveN:       s.liveN,
			LiveMaxMs:   float64(s.liveMax) / 1e6,
		}
		if s.liveN > 0 {
			p.LiveMeanMs = float64(s.liveSum) / float64(s.liveN) / 1e6
		}
		out = append(out, p)
	}
	return out
}

func runLanes(ctx context.Context, cfg *config, res *Result) error {
	if cfg.upstream == "" || cfg.proxy == "" {
		return errors.New("lanes needs --upstream (the upstream broker) and --proxy (the link's listen address, the bridge's upstream)")
	}
	n := cfg.count
	if n <= 0 {
		n = 100000
	}
	rate := cfg.rate
	if rate <= 0 {
		rate = 20
	}
	qos := byte(max(1, cfg.qos))
	isQoS2 := func(seq uint32) bool { return qos == 2 }
	if cfg.qos2Every > 0 { // mixed: every qos2Every-th message QoS 2, the rest QoS 1
		qos = 1
		isQoS2 = func(seq uint32) bool { return seq%uint32(cfg.qos2Every) == 0 }
	}
	liveQoS := byte(max(1, cfg.liveQoS))
	res.Pubs, res.Subs, res.Rate, res.LiveQoS = 3, 1, rate, int(liveQoS)
	res.Backlog, res.RTTms, res.LinkRate, res.QoS2Every = n, float64(cfg.rtt)/1e6, cfg.linkRate, cfg.qos2Every

	px, err := startLinkProxy(cfg.proxy, cfg.upstream, cfg.rtt/2, cfg.linkRate)
	if err != nil {
		return fmt.Errorf("link proxy: %w", err)
	}
	defer px.close()

	base := time.Now()
	var g group
	defer g.closeAll()
	// A run is longer than 1.5 keepalives: without PINGREQs mosquitto
	// drops the subscriber after 90 s (and edgegw the idle publishers),
	// which looked like a stalled drain.
	pingCtx, stopPing := context.WithCancel(ctx)
	var pwg sync.WaitGroup
	pwg.Add(1)
	go func() { defer pwg.Done(); pingAll(pingCtx, &g, 20*time.Second) }()
	defer pwg.Wait()
	defer stopPing()
	// Every wait ends with ctx too (SIGINT/SIGTERM, the overall bound).
	orDone := func(cond func() bool) func() bool { return func() bool { return ctx.Err() != nil || cond() } }
	topic := "bench/" + runID + "/lanes"
	sub, err := g.dial(ctx, dialOpts{addr: cfg.upstream, clientID: "lanes-sub-" + runID, v: packet.V311, clean: true, keepAlive: 60, rbufSize: 256 << 10})
	if err != nil {
		return fmt.Errorf("upstream subscriber: %w", err)
	}
	if err := sub.subscribe(ctx, topic+"/#", 0); err != nil {
		return err
	}
	rx := &lanesReceiver{base: base, upAt: &px.upAt, isQoS2: isQoS2, live2: liveQoS == 2, seen: make([]bool, n+1), liveRx: map[uint32]bool{}}
	g.read(sub, events{publish: rx.publish})

	// The backlog, with the link down: every message acknowledged by the
	// gateway (in its spool).
	pc, err := g.dial(ctx, dialOpts{addr: cfg.addr, clientID: "lanes-bulk-" + runID, v: packet.V311, clean: true, keepAlive: 60})
	if err != nil {
		return fmt.Errorf("gateway publisher: %w", err)
	}
	p := newPublisher(pc, base, 0, topic+"/bulk/backlog", qos, cfg.size, cfg.window)
	g.read(pc, events{acked: p.onAck})
	stop := make(chan struct{})
	defer close(stop)
	buildStart := time.Now()
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
	waitFor(120*time.Second, 20*time.Second, orDone(func() bool { return p.acked.Load() >= int64(n) }), p.acked.Load)
	if a := p.acked.Load(); a < int64(n) {
		return fmt.Errorf("gateway acknowledged %d of %d backlog messages", a, n)
	}
	res.BuildS = time.Since(buildStart).Seconds()

	// The alarm's connection, then the live sensor, then the link comes up.
	ac, err := g.dial(ctx, dialOpts{addr: cfg.addr, clientID: "lanes-alarm-" + runID, v: packet.V311, clean: true, keepAlive: 60})
	if err != nil {
		return fmt.Errorf("alarm publisher: %w", err)
	}
	ap := newPublisher(ac, base, 2, topic+"/alarm", 1, cfg.size, 1)
	g.read(ac, events{acked: ap.onAck})
	lc, err := g.dial(ctx, dialOpts{addr: cfg.addr, clientID: "lanes-live-" + runID, v: packet.V311, clean: true, keepAlive: 60})
	if err != nil {
		return fmt.Errorf("live publisher: %w", err)
	}
	liveTopic := topic + "/live"
	if cfg.liveLane == "bulk" {
		liveTopic = topic + "/bulk/live"
	}
	lp := newPublisher(lc, base, 1, liveTopic, liveQoS, cfg.size, 1000)
	g.read(lc, events{acked: lp.onAck})
	liveStop := make(chan struct{})
	var lwg sync.WaitGroup
	lwg.Add(1)
	liveStart := time.Since(base) // pace sends message k about k/rate after this
	go func() { defer lwg.Done(); pace(lp, liveStop, rate, 0) }()

	up := time.Now()
	px.up.Store(true)
	// Mid-drain, the alarm: at half the backlog, or after alarmAfter if
	// the drain is slower than that.
	deadline := up.Add(cfg.duration)
	alarmBy := up.Add(cfg.alarmAfter)
	waitFor(time.Until(alarmBy), time.Until(alarmBy)+time.Second, orDone(func() bool { return rx.backlog.Load() >= int64(n/2) }), rx.backlog.Load)
	if got := rx.backlog.Load(); got > 0 && got < int64(n) {
		res.AlarmAtBacklog = got
		res.AlarmAfterS = time.Since(up).Seconds()
		if !ap.publish(stop) || ap.c.flush() != nil {
			return errors.New("alarm publish: connection failed")
		}
		waitFor(30*time.Second, 30*time.Second, orDone(rx.alarm.Load), rx.backlog.Load)
		res.AlarmBacklogAfter = rx.backlog.Load() - res.AlarmAtBacklog
	}
	waitFor(time.Until(deadline), 30*time.Second, orDone(func() bool { return rx.backlog.Load() >= int64(n) }), rx.backlog.Load)
	close(liveStop)
	lwg.Wait()
	liveSent := lp.sent
	waitFor(30*time.Second, 10*time.Second, orDone(func() bool { return rx.liveN.Load() >= liveSent }), rx.liveN.Load)
	res.ElapsedS = time.Since(up).Seconds()

	rx.mu.Lock()
	defer rx.mu.Unlock()
	got := rx.backlog.Load()
	res.Sent = int64(n) + liveSent + ap.sent
	res.Acked = p.acked.Load() + lp.acked.Load() + ap.acked.Load()
	res.Received = got + rx.liveN.Load()
	// Out of time with the backlog still moving is a drain too slow for
	// --duration, not a loss.
	incomplete := got < int64(n) && (!time.Now().Before(deadline) || ctx.Err() != nil)
	if incomplete {
		res.BacklogLeft = int64(n) - got
	} else {
		res.Lost = int64(n) - got
	}
	res.LiveSent, res.LiveAcked = liveSent, lp.acked.Load()
	// Live messages not upstream: lost, or (drain cut short) still
	// queued; when they were sent, from the pacer's schedule.
	var missing int64
	var firstMiss, lastMiss uint32
	for seq := uint32(1); int64(seq) <= liveSent; seq++ {
		if !rx.liveRx[seq] {
			if missing == 0 {
				firstMiss = seq
			}
			lastMiss = seq
			missing++
		}
	}
	if incomplete {
		res.LiveLeft = missing
	} else {
		res.LiveLost = missing
	}
	sentAt := func(seq uint32) time.Duration { return liveStart + time.Duration(seq)*time.Second/time.Duration(rate) }
	res.Dups, res.Dups2 = rx.dups, rx.dups2
	setLatency(res, &rx.live)
	if rx.alarmAt != 0 {
		res.AlarmLatMs = float64(rx.alarmAt-rx.alarmTx) / 1e6
	}
	if at := px.upAt.Load(); at != 0 {
		upNs := at - base.UnixNano()
		res.ReconnectS = time.Unix(0, at).Sub(up).Seconds()
		res.DrainS = (time.Duration(rx.lastNs) - time.Duration(upNs)).Seconds()
		if got == int64(n) && res.DrainS > 0 {
			res.MsgPerS = float64(n) / res.DrainS
		}
		if cfg.linkRate > 0 && res.DrainS > 0 {
			res.LinkUse = float64(px.fwdUp.Load()) / (float64(cfg.linkRate) * res.DrainS)
		}
		res.Series = rx.series(upNs, int64(n))
		if missing > 0 {
			res.LiveMissingSentS = [2]float64{(sentAt(firstMiss) - time.Duration(upNs)).Seconds(), (sentAt(lastMiss) - time.Duration(upNs)).Seconds()}
		}
		if rx.slowN > 0 {
			res.LiveSlow = rx.slowN
			res.LiveSlowSentS = [2]float64{(rx.slowFirstTx - time.Duration(upNs)).Seconds(), (rx.slowLastTx - time.Duration(upNs)).Seconds()}
		}
	}
	switch {
	case incomplete:
		return fmt.Errorf("%d of %d backlog messages still queued after %s", res.BacklogLeft, n, cfg.duration)
	case res.Lost > 0:
		return fmt.Errorf("%d of %d backlog messages never arrived upstream", res.Lost, n)
	case res.LiveLost > 0:
		return fmt.Errorf("%d of %d live messages never arrived upstream", res.LiveLost, liveSent)
	case ap.sent > 0 && rx.alarmAt == 0:
		return errors.New("the alarm never arrived upstream")
	case ap.sent == 0:
		return errors.New("the alarm was not sent: no backlog was draining at its time")
	}
	return nil
}

// pingAll sends a PINGREQ on every connection of g every interval until
// ctx ends (the connections' keepalive is 60 s).
func pingAll(ctx context.Context, g *group, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		g.mu.Lock()
		cs := append([]*conn(nil), g.conns...)
		g.mu.Unlock()
		for _, c := range cs {
			c.writeNow(&packet.Pingreq{})
		}
	}
}
