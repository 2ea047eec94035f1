package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/edgegw/edgegw/gateway/packet"
)

// config is the parsed command line; zero values mean "scenario default".
type config struct {
	addr      string
	qos       int
	size      int
	duration  time.Duration
	count     int
	pubs      int
	subs      int
	rate      int
	conns     int
	version   int
	window    int
	readyFile string // idle: written once every connection is up

	upstream   string        // drain, sensors: the upstream broker
	proxy      string        // drain: the link's listen address
	rtt        time.Duration // drain: the link's round trip
	linkRate   int           // drain: bytes/s each way, 0 = unlimited
	qos2Every  int           // drain, lanes: mixed backlog
	liveQoS    int           // lanes: the live sensor's QoS
	liveLane   string        // lanes: normal | bulk
	alarmAfter time.Duration // lanes: the alarm at the latest this long after the link came up
	interval   time.Duration // sensors
	handshake  string        // sensors
}

func (c *config) ver() packet.Version {
	if c.version == 5 {
		return packet.V5
	}
	return packet.V311
}

// runID keeps client ids unique across concurrent runs.
var runID = fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano()%1e6)

// group tracks connections and their reader goroutines so a scenario can
// close everything and wait for it.
type group struct {
	mu    sync.Mutex
	conns []*conn
	wg    sync.WaitGroup
	errs  atomic.Int64 // readers that ended with an error before shutdown
	done  atomic.Bool
}

func (g *group) add(c *conn) {
	g.mu.Lock()
	g.conns = append(g.conns, c)
	g.mu.Unlock()
}

// read starts c's reader goroutine.
func (g *group) read(c *conn, ev events) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		if err := c.readLoop(ev); err != nil && !g.done.Load() {
			g.errs.Add(1)
		}
	}()
}

func (g *group) closeAll() {
	g.done.Store(true)
	g.mu.Lock()
	cs := g.conns
	g.conns = nil
	g.mu.Unlock()
	var wg sync.WaitGroup
	for i := 0; i < len(cs); i += 256 { // DISCONNECT in parallel chunks
		part := cs[i:min(i+256, len(cs))]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, c := range part {
				c.close()
			}
		}()
	}
	wg.Wait()
	g.wg.Wait()
}

func (g *group) dial(ctx context.Context, o dialOpts) (*conn, error) {
	c, err := dial(ctx, o)
	if err != nil {
		return nil, err
	}
	g.add(c)
	return c, nil
}

// waitFor polls cond every 5 ms until it holds, quiet (no change of
// progress() for quiet) or max has passed.
func waitFor(max, quiet time.Duration, cond func() bool, progress func() int64) {
	deadline := time.Now().Add(max)
	last, lastChange := progress(), time.Now()
	for !cond() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
		if p := progress(); p != last {
			last, lastChange = p, time.Now()
		} else if time.Since(lastChange) > quiet {
			return
		}
	}
}

func setLatency(res *Result, h *Hist) {
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	res.LatP50us = us(h.Quantile(0.50))
	res.LatP99us = us(h.Quantile(0.99))
	res.LatP999us = us(h.Quantile(0.999))
	res.LatMaxUs = us(h.Max())
}

// runStream is fan-in, fan-out and latency: pubs publishers, subs
// subscribers on filter, publishing for the duration (or count each),
// paced at rate msg/s in total when rate > 0.
//
// Topics carry the run id, so leftovers of an earlier run still queued in
// the broker never reach this run's subscribers.
func runStream(ctx context.Context, cfg *config, res *Result, pubs, subs int, filter string, topic func(i int) string, rate int) error {
	g := &group{}
	defer g.closeAll()
	v, qos := cfg.ver(), byte(cfg.qos)
	base := time.Now()
	rcvs := make([]*receiver, subs)
	for i := range rcvs {
		c, err := g.dial(ctx, dialOpts{addr: cfg.addr, v: v, clean: true, clientID: fmt.Sprintf("bench-%s-sub%d-%s", res.Scenario, i, runID)})
		if err != nil {
			return fmt.Errorf("subscriber %d: %w", i, err)
		}
		if err := c.subscribe(ctx, filter, qos); err != nil {
			return fmt.Errorf("subscriber %d: %w", i, err)
		}
		rcvs[i] = newReceiver(base, pubs)
		g.read(c, events{publish: rcvs[i].publish})
	}
	ps := make([]*publisher, pubs)
	for i := range ps {
		c, err := g.dial(ctx, dialOpts{addr: cfg.addr, v: v, clean: true, clientID: fmt.Sprintf("bench-%s-pub%d-%s", res.Scenario, i, runID)})
		if err != nil {
			return fmt.Errorf("publisher %d: %w", i, err)
		}
		ps[i] = newPublisher(c, base, i, topic(i), qos, cfg.size, cfg.window)
		g.read(c, events{acked: ps[i].onAck})
	}
	received := func() int64 {
		var n int64
		for _, r := range rcvs {
			n += r.n.Load()
		}
		return n
	}

	stop := make(chan struct{})
	timer := time.AfterFunc(cfg.duration, func() { close(stop) })
	defer timer.Stop()
	t0 := time.Now()
	var pwg sync.WaitGroup
	for _, p := range ps {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			defer p.c.flush()
			if rate > 0 {
				pace(p, stop, rate/pubs, cfg.count)
				return
			}
			for cfg.count == 0 || p.sent < int64(cfg.count) {
				select {
				case <-stop:
					return
				default:
				}
				if !p.publish(stop) {
					return
				}
			}
		}()
	}
	pwg.Wait()
	sendEnd := time.Since(t0)
	inWindow := received()
	var sent int64
	for _, p := range ps {
		sent += p.sent
	}
	expected := sent * int64(subs)
	// Drain: everything arrives, or nothing more for 1 s, at most 5 s
	// (QoS 0) or 10 s.
	drain := 10 * time.Second
	if qos == 0 {
		drain = 5 * time.Second
	}
	waitFor(drain, time.Second, func() bool {
		if received() < expected {
			return false
		}
		for _, p := range ps {
			if qos > 0 && p.acked.Load() < p.sent {
				return false
			}
		}
		return true
	}, func() int64 {
		n := received()
		for _, p := range ps {
			n += p.acked.Load()
		}
		return n
	})
	got := received()
	var h Hist
	var last time.Duration
	for _, r := range rcvs {
		h.Merge(&r.hist)
		res.Dups += r.dups
		if l := time.Duration(r.lastNs.Load()); l > last {
			last = l
		}
	}
	for _, p := range ps {
		res.Acked += p.acked.Load()
	}
	res.Sent, res.Received = sent, got
	res.Lost = max(expected-got, 0)
	res.InWindow = inWindow
	res.ElapsedS = sendEnd.Seconds()
	res.SendPerS = float64(sent) / sendEnd.Seconds()
	// delivered msg/s: everything received over the time from the first
	// send to the last receipt (drain included, so buffering brokers are
	// not flattered).
	if span := last - t0.Sub(base); got > 0 && span > 0 {
		res.MsgPerS = float64(got) / span.Seconds()
	}
	setLatency(res, &h)
	res.ReaderErrors = g.errs.Load()
	return nil
}

// pace sends rate msg/s from a coarse 5 ms ticker: each tick sends the
// burst that brings the total up to rate*elapsed (no per-message timers).
func pace(p *publisher, stop <-chan struct{}, rate, count int) {
	const tick = 5 * time.Millisecond
	tk := time.NewTicker(tick)
	defer tk.Stop()
	start := time.Now()
	for {
		select {
		case <-stop:
			return
		case <-tk.C:
		}
		due := int64(float64(rate) * time.Since(start).Seconds())
		if count > 0 {
			due = min(due, int64(count))
		}
		for p.sent < due {
			if !p.publish(stop) {
				return
			}
		}
		if p.c.flush() != nil || (count > 0 && p.sent >= int64(count)) {
			return
		}
	}
}

func runFanin(ctx context.Context, cfg *config, res *Result) error {
	pubs := cfg.pubs
	if pubs <= 0 {
		pubs = 20
	}
	res.Pubs, res.Subs = pubs, 1
	prefix := "bench/" + runID + "/fanin/"
	return runStream(ctx, cfg, res, pubs, 1, prefix+"#", func(i int) string { return prefix + strconv.Itoa(i) }, cfg.rate)
}

func runFanout(ctx context.Context, cfg *config, res *Result) error {
	subs := cfg.subs
	if subs <= 0 {
		subs = 50
	}
	res.Pubs, res.Subs = 1, subs
	t := "bench/" + runID + "/fanout"
	return runStream(ctx, cfg, res, 1, subs, t, func(int) string { return t }, cfg.rate)
}

func runLatency(ctx context.Context, cfg *config, res *Result) error {
	rate := cfg.rate
	if rate <= 0 {
		rate = 2000
	}
	res.Pubs, res.Subs, res.Rate = 1, 1, rate
	t := "bench/" + runID + "/latency"
	return runStream(ctx, cfg, res, 1, 1, t, func(int) string { return t }, rate)
}

// raiseNofile lifts RLIMIT_NOFILE to its hard limit.
func raiseNofile() uint64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	if rl.Cur < rl.Max {
		rl.Cur = rl.Max
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl)
		syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl)
	}
	return rl.Cur
}

// runIdle opens N connections, each with one subscription, then holds them
// (pinging at half the keepalive when the hold is long).
func runIdle(ctx context.Context, cfg *config, res *Result) error {
	n := cfg.conns
	if n <= 0 {
		n = 5000
	}
	res.Conns = n
	if lim := raiseNofile(); lim > 0 && uint64(n)+64 > lim {
		return fmt.Errorf("RLIMIT_NOFILE is %d, too low for %d connections", lim, n)
	}
	const keepAlive = 60
	g := &group{}
	defer g.closeAll()
	var next, ok, failed atomic.Int64
	var firstErr atomic.Value
	t0 := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(n) || ctx.Err() != nil {
					return
				}
				c, err := g.dial(ctx, dialOpts{addr: cfg.addr, v: cfg.ver(), clean: true, keepAlive: keepAlive,
					clientID: fmt.Sprintf("bench-idle-%d-%s", i, runID), rbufSize: 256, wbufSize: 256})
				if err == nil {
					err = c.subscribe(ctx, fmt.Sprintf("bench/idle/%d", i), byte(cfg.qos))
				}
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				g.read(c, events{})
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	res.SetupS = time.Since(t0).Seconds()
	res.Established, res.Failed = ok.Load(), failed.Load()
	if e, _ := firstErr.Load().(error); e != nil {
		res.Error = "first failure: " + e.Error()
	}
	if cfg.readyFile != "" {
		if err := os.WriteFile(cfg.readyFile, []byte(fmt.Sprintf("%d\n", ok.Load())), 0o644); err != nil {
			return err
		}
	}
	hold := time.NewTimer(cfg.duration)
	defer hold.Stop()
	ping := time.NewTicker(keepAlive / 2 * time.Second)
	defer ping.Stop()
	for done := false; !done; {
		select {
		case <-hold.C:
			done = true
		case <-ctx.Done():
			done = true
		case <-ping.C:
			g.mu.Lock()
			cs := append([]*conn(nil), g.conns...)
			g.mu.Unlock()
			for _, c := range cs {
				c.writeNow(&packet.Pingreq{})
			}
		}
	}
	res.Dropped = g.errs.Load()
	res.ElapsedS = time.Since(t0).Seconds()
	return nil
}

// runSlowsub is field report 002: a QoS 1 publisher as fast as its window
// allows, and a subscriber with a fixed client id that never acknowledges,
// reconnecting every 300 ms with alternately clean and persistent sessions.
func runSlowsub(ctx context.Context, cfg *config, res *Result) error {
	size := cfg.size
	if cfg.size <= 0 {
		size = 4096
	}
	res.Size, res.QoS, res.Pubs, res.Subs = size, 1, 1, 1
	const topic = "my/topic"
	v := cfg.ver()
	g := &group{}
	defer g.closeAll()
	base := time.Now()
	pc, err := g.dial(ctx, dialOpts{addr: cfg.addr, v: v, clean: true, clientID: "bench-slowsub-pub-" + runID})
	if err != nil {
		return fmt.Errorf("publisher: %w", err)
	}
	p := newPublisher(pc, base, 0, topic, 1, size, cfg.window)
	g.read(pc, events{acked: p.onAck})

	stop := make(chan struct{})
	timer := time.AfterFunc(cfg.duration, func() { close(stop) })
	defer timer.Stop()
	t0 := time.Now()
	var pwg sync.WaitGroup
	pwg.Add(1)
	go func() {
		defer pwg.Done()
		defer pc.flush()
		for p.publish(stop) {
		}
	}()

	var received atomic.Int64
	subID := "bench-slowsub-sub-" + runID
	var subErrs []string
	for cycle := 0; ; cycle++ {
		select {
		case <-stop:
		default:
			clean := cycle%2 == 0
			o := dialOpts{addr: cfg.addr, v: v, clean: clean, clientID: subID}
			if !clean && v == packet.V5 {
				o.sessExpiry = 3600
			}
			c, err := dial(ctx, o)
			if err == nil {
				if err = c.subscribe(ctx, topic, 1); err != nil {
					c.nc.Close()
				}
			}
			if err != nil {
				if len(subErrs) < 5 {
					subErrs = append(subErrs, err.Error())
				}
				select {
				case <-stop:
				case <-time.After(300 * time.Millisecond):
				}
				continue
			}
			res.Cycles++
			done := make(chan struct{})
			go func() {
				defer close(done)
				c.readLoop(events{noAck: true, publish: func([]byte) { received.Add(1) }})
			}()
			select {
			case <-stop:
			case <-time.After(300 * time.Millisecond):
			}
			c.close()
			<-done
			continue
		}
		break
	}
	pwg.Wait()
	res.ElapsedS = time.Since(t0).Seconds()
	res.Sent, res.Acked, res.Received = p.sent, p.acked.Load(), received.Load()
	res.SendPerS = float64(p.sent) / res.ElapsedS
	res.MsgPerS = float64(res.Received) / res.ElapsedS
	if len(subErrs) > 0 {
		res.Error = fmt.Sprintf("subscriber connect failures: %v", subErrs)
	}
	return nil
}

// runBidirQoS2 is field report 000: one client with receive maximum 1,
// subscribed at QoS 2 to the topic it publishes to, publishing count QoS 2
// messages with its own in-flight window of 1 while handling the incoming
// copies. Passes when all arrive once, in order, before the timeout.
func runBidirQoS2(ctx context.Context, cfg *config, res *Result) error {
	n := cfg.count
	if n <= 0 {
		n = 1000
	}
	v := packet.V5
	if cfg.version == 4 {
		v = packet.V311
	}
	res.QoS, res.Version, res.Pubs, res.Subs = 2, int(v), 1, 1
	g := &group{}
	defer g.closeAll()
	topic := "bench/bidir/" + runID
	base := time.Now()
	c, err := g.dial(ctx, dialOpts{addr: cfg.addr, v: v, clean: true, recvMax: 1, clientID: "bench-bidir-" + runID})
	if err != nil {
		return err
	}
	if err := c.subscribe(ctx, topic, 2); err != nil {
		return err
	}
	p := newPublisher(c, base, 0, topic, 2, cfg.size, 1)
	var got, bad atomic.Int64
	var next uint32 = 1 // only touched by the reader goroutine
	var h Hist
	complete := make(chan struct{}, 1)
	g.read(c, events{
		acked: p.onAck,
		publish: func(pl []byte) {
			if len(pl) < minPayload || binary.BigEndian.Uint32(pl[12:]) != next {
				bad.Add(1)
				return
			}
			h.Record(time.Since(base) - time.Duration(binary.BigEndian.Uint64(pl)))
			next++
			if got.Add(1) == int64(n) {
				complete <- struct{}{}
			}
		},
	})
	stop := make(chan struct{})
	timeout := time.AfterFunc(cfg.duration, func() { close(stop) })
	defer timeout.Stop()
	t0 := time.Now()
	for i := 0; i < n; i++ {
		if !p.publish(stop) { // waits for the previous PUBCOMP (window 1)
			break
		}
		if c.flush() != nil {
			break
		}
	}
	pass := false
	select {
	case <-complete:
		pass = bad.Load() == 0
	case <-stop:
	case <-ctx.Done():
	}
	res.ElapsedS = time.Since(t0).Seconds()
	res.Sent, res.Acked, res.Received, res.Dups = p.sent, p.acked.Load(), got.Load(), bad.Load()
	res.Lost = int64(n) - got.Load()
	res.Pass = &pass
	if res.ElapsedS > 0 {
		res.SendPerS = float64(p.sent) / res.ElapsedS
	}
	if !pass {
		res.Error = fmt.Sprintf("incomplete after %.1fs: sent %d, completed %d, received in order %d, out of order/duplicate %d (deadlock?)",
			res.ElapsedS, res.Sent, res.Acked, res.Received, res.Dups)
	}
	if res.ElapsedS > 0 {
		res.MsgPerS = float64(got.Load()) / res.ElapsedS
	}
	g.closeAll() // the reader owns h until it has stopped
	setLatency(res, &h)
	return nil
}

var errUnknown = errors.New("unknown scenario")
