package main

// The drain scenario (issue 20): how fast a gateway's bridge empties its
// backlog over the slow link after an outage (outage.go), and the live
// messages' latency meanwhile. The gateway's bridge must point at
// --proxy. Topics: .../drain/backlog, .../drain/live.

import (
	"context"
	"fmt"
	"time"
)

func runDrain(ctx context.Context, cfg *config, res *Result) error {
	o, err := newOutage(ctx, "drain", cfg, res, outageDefaults{count: 20000, rate: 10})
	if err != nil {
		return err
	}
	defer o.close()
	n, liveQoS := int64(o.n), max(1, byte(cfg.qos))
	res.Pubs, res.Subs, res.Rate = 2, 1, o.rate

	topic := "bench/" + runID + "/drain"
	rx := o.newRx(liveQoS)
	if err := o.subscribe("drain-sub", topic+"/#", rx.publish); err != nil {
		return err
	}
	p, err := o.buildBacklog("drain-pub", topic+"/backlog", 60*time.Second)
	if err != nil {
		return err
	}

	// The live sensor, then the link comes up.
	live, err := o.startLive("drain-live", topic+"/live", liveQoS)
	if err != nil {
		return err
	}
	up := o.linkUp()
	liveSent := o.finishDrain(res, rx, up, up.Add(cfg.duration))

	rx.mu.Lock()
	defer rx.mu.Unlock()
	got := rx.backlog.Load()
	res.Sent = n + liveSent
	res.Acked = p.acked.Load() + live.p.acked.Load()
	res.Received = got + rx.liveN.Load()
	res.Lost = n - got
	res.LiveSent, res.LiveLost = liveSent, liveSent-rx.liveN.Load()
	res.Dups, res.Dups2 = rx.dups, rx.dups2
	setLatency(res, &rx.live)
	o.setDrain(res, up, rx.lastNs, got)
	if res.Lost > 0 {
		return fmt.Errorf("%d of %d backlog messages never arrived upstream", res.Lost, n)
	}
	return nil
}
