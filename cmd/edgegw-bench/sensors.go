package main

// The sensor-fleet scenario (issue 16): what a gateway does all day. Many
// connections, each sending a small reading now and then; one local
// subscriber on "#"; the broker bridges the readings to an upstream broker
// (--upstream, where a second subscriber measures the bridged latency).
//
// One goroutine paces every publisher from a 5 ms ticker: publisher k%N
// sends its reading at k*interval/N, so the load is a steady conns/interval
// msg/s spread evenly, not bursts (no goroutine or timer per sensor).
//
// With --handshake P the run can be sampled without the setup and the
// teardown: the generator writes P.ready once every connection is up and
// waits until that file is removed before publishing; after the drain it
// writes P.done and waits for its removal before disconnecting.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

func runSensors(ctx context.Context, cfg *config, res *Result) error {
	n := cfg.conns
	if n <= 0 {
		n = 1000
	}
	interval := cfg.interval
	if interval <= 0 {
		interval = 2 * time.Second
	}
	res.Conns, res.Pubs, res.Subs = n, n, 1
	res.IntervalS = interval.Seconds()
	res.Rate = int(float64(n) / interval.Seconds())
	if lim := raiseNofile(); lim > 0 && uint64(n)+64 > lim {
		return fmt.Errorf("RLIMIT_NOFILE is %d, too low for %d connections", lim, n)
	}
	qos := byte(cfg.qos)
	v := cfg.ver()
	prefix := "sensors/" + runID + "/"
	g := &group{}
	defer g.closeAll()
	base := time.Now()

	local := newReceiver(base, n)
	sc, err := g.dial(ctx, dialOpts{addr: cfg.addr, v: v, clean: true, keepAlive: 60, clientID: "bench-sensors-sub-" + runID})
	if err != nil {
		return fmt.Errorf("local subscriber: %w", err)
	}
	if err := sc.subscribe(ctx, "#", qos); err != nil {
		return fmt.Errorf("local subscriber: %w", err)
	}
	g.read(sc, events{publish: local.publish})

	var up *receiver
	if cfg.upstream != "" {
		up = newReceiver(base, n)
		uc, err := g.dial(ctx, dialOpts{addr: cfg.upstream, v: v, clean: true, keepAlive: 60, clientID: "bench-sensors-up-" + runID})
		if err != nil {
			return fmt.Errorf("upstream subscriber: %w", err)
		}
		if err := uc.subscribe(ctx, prefix+"#", qos); err != nil {
			return fmt.Errorf("upstream subscriber: %w", err)
		}
		g.read(uc, events{publish: up.publish})
	}

	// Connect the fleet, 32 at a time.
	ps := make([]*publisher, n)
	var next atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				c, err := g.dial(ctx, dialOpts{addr: cfg.addr, v: v, clean: true, keepAlive: 60,
					clientID: fmt.Sprintf("bench-sensor-%d-%s", i, runID), rbufSize: 512, wbufSize: 512})
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				ps[i] = newPublisher(c, base, i, fmt.Sprintf("%s%d/temperature", prefix, i), qos, cfg.size, cfg.window)
				g.read(c, events{acked: ps[i].onAck})
			}
		}()
	}
	wg.Wait()
	if e, _ := firstErr.Load().(error); e != nil {
		return fmt.Errorf("sensor connection: %w", e)
	}
	if err := handshake(ctx, cfg.handshake, ".ready"); err != nil {
		return err
	}

	// Publish: one pacer for the whole fleet.
	t0 := time.Now()
	tk := time.NewTicker(5 * time.Millisecond)
	var sent, skipped int64
	per := interval / time.Duration(n) // between two readings of the fleet
	for running := true; running; {
		select {
		case <-ctx.Done():
			running = false
			continue
		case <-tk.C:
		}
		el := time.Since(t0)
		if el >= cfg.duration {
			el = cfg.duration
			running = false
		}
		due := int64(el / per)
		for k := sent + skipped; k < due; k++ {
			p := ps[k%int64(n)]
			if p.win != nil && len(p.win) == cap(p.win) {
				skipped++ // a window's worth unacknowledged: skip the reading, never wait
				continue
			}
			if !p.publish(nil) || p.c.flush() != nil {
				tk.Stop()
				return errors.New("a sensor connection failed")
			}
			sent++
		}
	}
	tk.Stop()
	sendEnd := time.Since(t0)
	res.InWindow = local.n.Load()

	// Drain: everything arrives (locally, upstream) and is acknowledged, or
	// nothing moves for 2 s, at most 15 s.
	acked := func() int64 {
		var a int64
		for _, p := range ps {
			a += p.acked.Load()
		}
		return a
	}
	upN := func() int64 {
		if up == nil {
			return 0
		}
		return up.n.Load()
	}
	waitFor(15*time.Second, 2*time.Second, func() bool {
		return local.n.Load() >= sent && (up == nil || up.n.Load() >= sent) && (qos == 0 || acked() >= sent)
	}, func() int64 { return local.n.Load() + upN() + acked() })
	if err := handshake(ctx, cfg.handshake, ".done"); err != nil {
		return err
	}

	res.Sent, res.Received, res.Acked = sent, local.n.Load(), acked()
	res.Skipped = skipped
	res.Lost = max(sent-res.Received, 0)
	res.Dups = local.dups
	res.ElapsedS = sendEnd.Seconds()
	res.SendPerS = float64(sent) / sendEnd.Seconds()
	if last := time.Duration(local.lastNs.Load()) - t0.Sub(base); res.Received > 0 && last > 0 {
		res.MsgPerS = float64(res.Received) / last.Seconds()
	}
	setLatency(res, &local.hist)
	if up != nil {
		res.UpReceived = up.n.Load()
		res.UpLost = max(sent-res.UpReceived, 0)
		res.UpLatP50us = float64(up.hist.Quantile(0.50)) / 1e3
		res.UpLatP99us = float64(up.hist.Quantile(0.99)) / 1e3
	}
	res.ReaderErrors = g.errs.Load()
	return nil
}

// handshake writes prefix+suffix and waits (at most 30 s) until the
// sampler removes it; nothing to do without a prefix.
func handshake(ctx context.Context, prefix, suffix string) error {
	if prefix == "" {
		return nil
	}
	f := prefix + suffix
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(f); errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			os.Remove(f)
			return fmt.Errorf("handshake %s: not removed by the sampler within 30 s", f)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
