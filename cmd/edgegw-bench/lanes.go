package main

// The lanes scenario (issue 17): priority lanes and live-first drain
// after an outage (outage.go). The gateway's rules must put .../lanes/bulk/# in the `bulk` lane,
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
// Payload publisher index: 0 backlog, 1 live, 2 alarm.

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
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

// lanesReceiver is the upstream subscriber's view: outageRx's, and the
// time series, the slow live messages and the alarm (its hooks, run with
// mu held).
type lanesReceiver struct {
	*outageRx
	steps []lanesStep
	// live messages later than slowLive: how many, and the span of their
	// send times (since base), to see which ones waited.
	slowN                   int64
	slowFirstTx, slowLastTx time.Duration
	alarmAt                 time.Duration // arrival of the alarm, since base; 0 = not yet
	alarmTx                 time.Duration // its send time
	alarm                   atomic.Bool
}

func newLanesReceiver(rx *outageRx) *lanesReceiver {
	r := &lanesReceiver{outageRx: rx}
	rx.onBacklog = func(now time.Duration) { r.step(now).backlog++ }
	rx.onLive = r.onLive
	rx.onOther = r.onAlarm
	return r
}

func (r *lanesReceiver) step(now time.Duration) *lanesStep {
	i := int(now / seriesStep)
	for len(r.steps) <= i {
		r.steps = append(r.steps, lanesStep{})
	}
	return &r.steps[i]
}

func (r *lanesReceiver) onLive(now, sent, lat time.Duration) {
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

func (r *lanesReceiver) onAlarm(idx uint32, now, sent time.Duration) bool {
	if idx != 2 {
		return false
	}
	if r.alarmAt != 0 {
		r.dups++
		return true
	}
	r.alarmAt, r.alarmTx = now, sent
	r.alarm.Store(true)
	return true
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
	o, err := newOutage(ctx, "lanes", cfg, res, outageDefaults{count: 100000, rate: 20, minQoS: 1})
	if err != nil {
		return err
	}
	defer o.close()
	n, liveQoS := int64(o.n), byte(max(1, cfg.liveQoS))
	res.Pubs, res.Subs, res.Rate, res.LiveQoS = 3, 1, o.rate, int(liveQoS)
	topic := "bench/" + runID + "/lanes"
	rx := newLanesReceiver(o.newRx(liveQoS))
	if err := o.subscribe("lanes-sub", topic+"/#", rx.publish); err != nil {
		return err
	}
	buildStart := time.Now()
	p, err := o.buildBacklog("lanes-bulk", topic+"/bulk/backlog", 120*time.Second)
	if err != nil {
		return err
	}
	res.BuildS = time.Since(buildStart).Seconds()

	// The alarm's connection, then the live sensor, then the link comes up.
	ac, err := o.dialGateway("lanes-alarm")
	if err != nil {
		return fmt.Errorf("alarm publisher: %w", err)
	}
	ap := newPublisher(ac, o.base, 2, topic+"/alarm", 1, cfg.size, 1)
	o.g.read(ac, events{acked: ap.onAck})
	liveTopic := topic + "/live"
	if cfg.liveLane == "bulk" {
		liveTopic = topic + "/bulk/live"
	}
	live, err := o.startLive("lanes-live", liveTopic, liveQoS)
	if err != nil {
		return err
	}

	up := o.linkUp()
	// Mid-drain, the alarm: at half the backlog, or after alarmAfter if
	// the drain is slower than that.
	deadline := up.Add(cfg.duration)
	alarmBy := up.Add(cfg.alarmAfter)
	waitFor(time.Until(alarmBy), time.Until(alarmBy)+time.Second, o.until(func() bool { return rx.backlog.Load() >= n/2 }), rx.backlog.Load)
	if got := rx.backlog.Load(); got > 0 && got < n {
		res.AlarmAtBacklog = got
		res.AlarmAfterS = time.Since(up).Seconds()
		if !ap.publish(o.stop) || ap.c.flush() != nil {
			return errors.New("alarm publish: connection failed")
		}
		waitFor(30*time.Second, 30*time.Second, o.until(rx.alarm.Load), rx.backlog.Load)
		res.AlarmBacklogAfter = rx.backlog.Load() - res.AlarmAtBacklog
	}
	liveSent := o.finishDrain(res, rx.outageRx, up, deadline)

	rx.mu.Lock()
	defer rx.mu.Unlock()
	got := rx.backlog.Load()
	res.Sent = n + liveSent + ap.sent
	res.Acked = p.acked.Load() + live.p.acked.Load() + ap.acked.Load()
	res.Received = got + rx.liveN.Load()
	// Out of time with the backlog still moving is a drain too slow for
	// --duration, not a loss.
	incomplete := got < n && (!time.Now().Before(deadline) || ctx.Err() != nil)
	if incomplete {
		res.BacklogLeft = n - got
	} else {
		res.Lost = n - got
	}
	res.LiveSent, res.LiveAcked = liveSent, live.p.acked.Load()
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
	sentAt := func(seq uint32) time.Duration {
		return live.start + time.Duration(seq)*time.Second/time.Duration(o.rate)
	}
	res.Dups, res.Dups2 = rx.dups, rx.dups2
	setLatency(res, &rx.live)
	if rx.alarmAt != 0 {
		res.AlarmLatMs = float64(rx.alarmAt-rx.alarmTx) / 1e6
	}
	if upNs, ok := o.setDrain(res, up, rx.lastNs, got); ok {
		res.Series = rx.series(int64(upNs), n)
		if missing > 0 {
			res.LiveMissingSentS = [2]float64{(sentAt(firstMiss) - upNs).Seconds(), (sentAt(lastMiss) - upNs).Seconds()}
		}
		if rx.slowN > 0 {
			res.LiveSlow = rx.slowN
			res.LiveSlowSentS = [2]float64{(rx.slowFirstTx - upNs).Seconds(), (rx.slowLastTx - upNs).Seconds()}
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
