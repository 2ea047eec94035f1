package main

// The outage the drain and lanes scenarios share (drain.go, lanes.go): a
// gateway (--addr) bridges bench/# out to an upstream broker (--upstream)
// through the slow link this process plays (--proxy, linkproxy.go). With
// the link down, --count messages are published to the gateway and
// acknowledged (the backlog); then a live sensor starts publishing --rate
// msg/s, the link comes up, and the upstream subscriber (outageRx) sees
// the backlog and the live messages arrive.
//
// Payload publisher index: 0 backlog, 1 live; a scenario may add its own
// (lanes: 2, the alarm). The upstream subscription is QoS 0: a default
// mosquitto queues at most 1000 QoS 1/2 messages for a subscriber and
// would drop the rest itself; QoS 0 to a connected subscriber is never
// dropped, so a missing message is the gateway's loss, and a repeated one
// the gateway's duplicate.

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

// outageRx is the upstream subscriber's view; publish runs on its reader
// goroutine only.
type outageRx struct {
	base   time.Time
	upAt   *atomic.Int64         // unix ns of the bridge's first connection through the link
	isQoS2 func(seq uint32) bool // backlog message seq was published at QoS 2
	live2  bool                  // live messages are QoS 2

	// The scenario's hooks, called with mu held; nil: none. onBacklog: a
	// new backlog message arrived (now since base). onLive: a new live
	// message sent after the bridge's connection arrived with latency
	// lat. onOther: a payload that is neither (another publisher index,
	// or a backlog sequence number out of range); false: malformed.
	onBacklog func(now time.Duration)
	onLive    func(now, sent, lat time.Duration)
	onOther   func(idx uint32, now, sent time.Duration) bool

	mu        sync.Mutex // guards everything below, and the hooks' state
	seen      []bool     // backlog sequence numbers received
	liveRx    map[uint32]bool
	live      Hist          // live latency from the reconnect on
	dups      int64         // backlog and live duplicates (and the scenario's)
	dups2     int64         // of them QoS 2
	lastNs    time.Duration // latest backlog arrival, since base
	malformed int64

	backlog atomic.Int64 // distinct backlog messages received
	liveN   atomic.Int64 // distinct live messages received
}

func (r *outageRx) publish(payload []byte) {
	now := time.Since(r.base)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(payload) < minPayload {
		r.malformed++
		return
	}
	sent := time.Duration(binary.BigEndian.Uint64(payload))
	idx := binary.BigEndian.Uint32(payload[8:])
	seq := binary.BigEndian.Uint32(payload[12:])
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
		r.lastNs = now
		r.backlog.Add(1)
		if r.onBacklog != nil {
			r.onBacklog(now)
		}
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
		// Latency from the reconnect on: live messages sent before the
		// bridge's connection waited for the outage, not for the drain.
		if up := r.upAt.Load(); up != 0 && r.base.Add(sent).UnixNano() >= up {
			lat := now - sent
			r.live.Record(lat)
			if r.onLive != nil {
				r.onLive(now, sent, lat)
			}
		}
	case r.onOther != nil && r.onOther(idx, now, sent):
	default:
		r.malformed++
	}
}

// outage is one run's link, connections and backlog.
type outage struct {
	ctx    context.Context
	cfg    *config
	n      int  // backlog messages
	rate   int  // the live sensor's msg/s
	qos    byte // the backlog's QoS but for the QoS 2 ones
	isQoS2 func(seq uint32) bool
	base   time.Time
	px     *linkProxy
	g      group
	stop   chan struct{} // closed by close: a publisher waiting for its window gives up
	live   *liveSensor

	stopPing context.CancelFunc
	pings    sync.WaitGroup
}

// outageDefaults are a scenario's defaults: --count, --rate, and the
// backlog's lowest QoS.
type outageDefaults struct {
	count, rate int
	minQoS      byte
}

// newOutage checks the flags of scenario name, fills the result's
// backlog and link figures and starts the link, down. The backlog is
// --count messages at --qos, at least def.minQoS; with --qos2-every, QoS
// 1 and every so many QoS 2. close ends it all.
func newOutage(ctx context.Context, name string, cfg *config, res *Result, def outageDefaults) (*outage, error) {
	if cfg.upstream == "" || cfg.proxy == "" {
		return nil, fmt.Errorf("%s needs --upstream (the upstream broker) and --proxy (the link's listen address, the bridge's upstream)", name)
	}
	o := &outage{ctx: ctx, cfg: cfg, n: cfg.count, rate: cfg.rate, qos: max(def.minQoS, byte(cfg.qos)), stop: make(chan struct{})}
	if o.n <= 0 {
		o.n = def.count
	}
	if o.rate <= 0 {
		o.rate = def.rate
	}
	o.isQoS2 = func(seq uint32) bool { return o.qos == 2 }
	if cfg.qos2Every > 0 { // mixed: every qos2Every-th message QoS 2, the rest QoS 1
		o.qos = 1
		o.isQoS2 = func(seq uint32) bool { return seq%uint32(cfg.qos2Every) == 0 }
	}
	res.Backlog, res.RTTms, res.LinkRate, res.QoS2Every = o.n, float64(cfg.rtt)/1e6, cfg.linkRate, cfg.qos2Every
	px, err := startLinkProxy(cfg.proxy, cfg.upstream, cfg.rtt/2, cfg.linkRate)
	if err != nil {
		return nil, fmt.Errorf("link proxy: %w", err)
	}
	o.px, o.base = px, time.Now()
	// A run may be longer than 1.5 keepalives: without PINGREQs mosquitto
	// drops the subscriber after 90 s (and edgegw the idle publishers),
	// which looked like a stalled drain.
	var pingCtx context.Context
	pingCtx, o.stopPing = context.WithCancel(ctx)
	o.pings.Add(1)
	go func() { defer o.pings.Done(); pingAll(pingCtx, &o.g, 20*time.Second) }()
	return o, nil
}

// close stops the live sensor and the pings, closes the connections and
// the link.
func (o *outage) close() {
	if o.live != nil {
		o.live.finish()
	}
	close(o.stop)
	o.stopPing()
	o.pings.Wait()
	o.g.closeAll()
	o.px.close()
}

// newRx returns the upstream subscriber's view of this run.
func (o *outage) newRx(liveQoS byte) *outageRx {
	return &outageRx{base: o.base, upAt: &o.px.upAt, isQoS2: o.isQoS2, live2: liveQoS == 2, seen: make([]bool, o.n+1), liveRx: map[uint32]bool{}}
}

// until is cond, or the run's end (SIGINT/SIGTERM, the overall bound):
// every wait ends with ctx too.
func (o *outage) until(cond func() bool) func() bool {
	return func() bool { return o.ctx.Err() != nil || cond() }
}

// dialGateway connects a publisher to the gateway.
func (o *outage) dialGateway(clientID string) (*conn, error) {
	return o.g.dial(o.ctx, dialOpts{addr: o.cfg.addr, clientID: clientID + "-" + runID, v: packet.V311, clean: true, keepAlive: 60})
}

// subscribe connects the upstream subscriber to filter at QoS 0 and hands
// its messages to publish.
func (o *outage) subscribe(clientID, filter string, publish func([]byte)) error {
	sub, err := o.g.dial(o.ctx, dialOpts{addr: o.cfg.upstream, clientID: clientID + "-" + runID, v: packet.V311, clean: true, keepAlive: 60, rbufSize: 256 << 10})
	if err != nil {
		return fmt.Errorf("upstream subscriber: %w", err)
	}
	if err := sub.subscribe(o.ctx, filter, 0); err != nil {
		return err
	}
	o.g.read(sub, events{publish: publish})
	return nil
}

// buildBacklog publishes the backlog to topic with the link down and
// waits, at most maxWait, until the gateway acknowledged every message
// (for edgegw: it is in its spool).
func (o *outage) buildBacklog(clientID, topic string, maxWait time.Duration) (*publisher, error) {
	pc, err := o.dialGateway(clientID)
	if err != nil {
		return nil, fmt.Errorf("gateway publisher: %w", err)
	}
	p := newPublisher(pc, o.base, 0, topic, o.qos, o.cfg.size, o.cfg.window)
	o.g.read(pc, events{acked: p.onAck})
	for i := 1; i <= o.n; i++ {
		p.pub.QoS = o.qos
		if o.isQoS2(uint32(i)) {
			p.pub.QoS = 2
		}
		if !p.publish(o.stop) {
			return nil, errors.New("backlog publish: connection failed")
		}
	}
	if err := pc.flush(); err != nil {
		return nil, err
	}
	n := int64(o.n)
	waitFor(maxWait, 20*time.Second, o.until(func() bool { return p.acked.Load() >= n }), p.acked.Load)
	if a := p.acked.Load(); a < n {
		return nil, fmt.Errorf("gateway acknowledged %d of %d backlog messages", a, n)
	}
	return p, nil
}

// liveSensor publishes rate msg/s (publisher index 1) until finish.
type liveSensor struct {
	p     *publisher
	start time.Duration // since base: the pacer sends message k about k/rate after it
	stop  chan struct{}
	wg    sync.WaitGroup
	once  sync.Once
}

// startLive connects the live sensor to the gateway and starts it.
func (o *outage) startLive(clientID, topic string, qos byte) (*liveSensor, error) {
	lc, err := o.dialGateway(clientID)
	if err != nil {
		return nil, fmt.Errorf("live publisher: %w", err)
	}
	l := &liveSensor{p: newPublisher(lc, o.base, 1, topic, qos, o.cfg.size, 1000), stop: make(chan struct{})}
	o.g.read(lc, events{acked: l.p.onAck})
	o.live = l
	l.wg.Add(1)
	l.start = time.Since(o.base)
	go func() { defer l.wg.Done(); pace(l.p, l.stop, o.rate, 0) }()
	return l, nil
}

// finish stops the sensor and returns how many messages it sent.
func (l *liveSensor) finish() int64 {
	l.once.Do(func() { close(l.stop); l.wg.Wait() })
	return l.p.sent
}

// linkUp brings the link up and returns when.
func (o *outage) linkUp() time.Time {
	up := time.Now()
	o.px.up.Store(true)
	return up
}

// finishDrain waits until the whole backlog is upstream or deadline,
// stops the live sensor and waits for its messages to arrive; it fills
// the time since the link came up (at up) and returns how many live
// messages were sent.
func (o *outage) finishDrain(res *Result, rx *outageRx, up, deadline time.Time) int64 {
	n := int64(o.n)
	waitFor(time.Until(deadline), 30*time.Second, o.until(func() bool { return rx.backlog.Load() >= n }), rx.backlog.Load)
	liveSent := o.live.finish()
	waitFor(30*time.Second, 10*time.Second, o.until(func() bool { return rx.liveN.Load() >= liveSent }), rx.liveN.Load)
	res.ElapsedS = time.Since(up).Seconds()
	return liveSent
}

// setDrain fills the result's reconnect and drain figures: got of the
// backlog arrived, the last lastNs after base; the link came up at up.
// It returns the bridge's first connection through the link, since
// base; false if there was none.
func (o *outage) setDrain(res *Result, up time.Time, lastNs time.Duration, got int64) (time.Duration, bool) {
	at := o.px.upAt.Load()
	if at == 0 {
		return 0, false
	}
	upNs := time.Duration(at - o.base.UnixNano())
	res.ReconnectS = time.Unix(0, at).Sub(up).Seconds()
	res.DrainS = (lastNs - upNs).Seconds()
	if got == int64(o.n) && res.DrainS > 0 {
		res.MsgPerS = float64(o.n) / res.DrainS
	}
	if o.cfg.linkRate > 0 && res.DrainS > 0 {
		res.LinkUse = float64(o.px.fwdUp.Load()) / (float64(o.cfg.linkRate) * res.DrainS)
	}
	return upNs, true
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
