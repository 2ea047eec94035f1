package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Where the disruptions fall, from the publishers' start.
const (
	atGatewayKillA = 8 * time.Second  // a gateway on a node that stays up
	atNodeKill     = 15 * time.Second // the node holding the most gateways
	atGatewayKillB = 25 * time.Second // a gateway that failed over
	atNodeRestart  = 32 * time.Second
	gatewayDown    = time.Second // a killed gateway is started again after this
)

// fleet is the main case: spread, failover, kills, drain, the count.
func (r *runner) fleet(ctx context.Context) int {
	p := r.p
	tStart := time.Now()
	for _, g := range r.gws {
		if err := g.start(); err != nil {
			r.logf("%v", err)
			return 2
		}
	}
	if !waitFor(ctx, 60*time.Second, func() bool {
		for _, g := range r.gws {
			if _, _, ok := g.connectedSince(tStart); !ok {
				return false
			}
		}
		return true
	}) {
		var down []string
		for _, g := range r.gws {
			if _, _, ok := g.connectedSince(tStart); !ok {
				down = append(down, g.clientID())
			}
		}
		r.logf("gateways not connected within 60s: %s", strings.Join(down, " "))
		return 2
	}
	r.logf("%d gateways connected in %v", len(r.gws), time.Since(tStart).Round(time.Millisecond))

	// The spread as the cluster sees it (connz of each node) and as the
	// gateways say it (their "uplink connected" lines); they must agree.
	byID := map[string]*gateway{}
	for _, g := range r.gws {
		byID[g.clientID()] = g
	}
	onNode := map[*node][]*gateway{}
	agree := waitFor(ctx, 10*time.Second, func() bool {
		clear(onNode)
		seen := 0
		for _, n := range r.cl.nodes {
			for _, id := range n.mqttClients("gw-") {
				g := byID[id]
				if g == nil || g.lastAddress() != n.mqttURL() {
					return false
				}
				onNode[n] = append(onNode[n], g)
				seen++
			}
		}
		return seen == len(r.gws)
	})
	r.say("## Spread before the node kill")
	r.say("")
	var target *node
	most := 0
	for _, n := range r.cl.nodes {
		ids := []string{}
		for _, g := range onNode[n] {
			ids = append(ids, g.id)
		}
		slices.Sort(ids)
		r.say("- %s (%s): %d gateways (%s)", n.name, n.mqttURL(), len(onNode[n]), strings.Join(ids, " "))
		if len(onNode[n]) > most {
			target, most = n, len(onNode[n])
		}
	}
	r.promise(agree, "each node's MQTT connections (connz) match the gateways' own \"uplink connected\" addresses, all %d present", len(r.gws))
	r.promise(most*2 <= len(r.gws), "no node holds more than half the gateways (most: %d of %d)", most, len(r.gws))
	r.say("- the node a gateway tries first is a fixed function of its client id and the address list (rendezvous hashing), the same at every start: a fleet of %d spread at random over 3 nodes has one node over half with probability %.1f%%, so this holds for these client ids and ports, not for every fleet",
		len(r.gws), 100*overHalf(len(r.gws), 3))
	r.say("")
	if target == nil {
		r.logf("no node holds a gateway")
		return 2
	}

	// Subscribers on the two nodes that stay up: each must see everything.
	runID := fmt.Sprintf("%d", time.Now().UnixNano())
	for _, n := range r.cl.nodes {
		if n == target {
			continue
		}
		s := newSubscriber(n)
		if err := s.start(runID); err != nil {
			r.logf("%v", err)
			return 2
		}
		r.subs = append(r.subs, s)
	}

	// Steady-state connect time of a kept-session client, for comparison.
	pctx, pcancel := context.WithTimeout(ctx, 20*time.Second)
	t := time.Now()
	at, err := probeConnect(pctx, r.subs[0].node.mqttURL(), "fleet-probe-steady")
	pcancel()
	if err != nil {
		r.logf("%v", err)
		return 2
	}
	steadyConnect := at.Sub(t)

	pubCtx, stopPubs := context.WithCancel(ctx)
	defer stopPubs()
	pubs := make([]*publisher, len(r.gws))
	var pubWG sync.WaitGroup
	for i, g := range r.gws {
		pubs[i] = newPublisher(g, p.rate)
		pubWG.Go(func() { pubs[i].run(pubCtx) })
	}
	pubStart := time.Now()
	r.logf("publishing: %d gateways x %d msg/s", len(r.gws), p.rate)
	until := func(d time.Duration) error { return sleepCtx(ctx, time.Until(pubStart.Add(d))) }

	// Gateway A: kill -9 one on a node that stays up.
	var gwA, gwB *gateway
	for _, g := range r.gws {
		if !slices.Contains(onNode[target], g) {
			gwA = g
			break
		}
	}
	if until(atGatewayKillA) != nil {
		return 2
	}
	if code := r.killGateway(ctx, gwA); code != 0 {
		return code
	}

	// The node kill.
	if until(atNodeKill) != nil {
		return 2
	}
	r.logf("killing node %s (%d gateways)", target.name, most)
	probeCtx, probeCancel := context.WithTimeout(ctx, 60*time.Second)
	type probeResult struct {
		n   *node
		at  time.Time
		err error
	}
	probes := make(chan probeResult, 2)
	// Connected is not yet delivering: each moved gateway's first
	// acknowledgement from the cluster after the kill says when it
	// delivers again. Its acked counter is read once its log says the
	// connection ended (nothing can be acknowledged until the next one,
	// at least reconnect_min later); the first time it passes that value
	// is the first PUBACK of the new connection.
	moved := onNode[target]
	killAt := time.Now()
	target.kill()
	var ackMu sync.Mutex
	ackedAt := map[*gateway]time.Time{}
	var ackWG sync.WaitGroup
	for _, g := range moved {
		ackWG.Go(func() {
			if !waitFor(probeCtx, 60*time.Second, func() bool {
				_, _, ok := g.firstSince(killAt, `msg="uplink disconnected"`)
				return ok
			}) {
				return
			}
			st, err := g.status(probeCtx)
			if _, _, again := g.connectedSince(killAt); err != nil || again {
				return // no baseline: reported as not measured
			}
			before := st.Acked
			waitFor(probeCtx, 60*time.Second, func() bool {
				st, err := g.status(probeCtx)
				if err != nil || st.Acked <= before {
					return false
				}
				ackMu.Lock()
				ackedAt[g] = time.Now()
				ackMu.Unlock()
				return true
			})
		})
	}
	for _, n := range r.cl.nodes {
		if n != target {
			go func() {
				at, err := probeConnect(probeCtx, n.mqttURL(), "fleet-probe-"+n.name)
				probes <- probeResult{n, at, err}
			}()
		}
	}
	clusterConnect := time.Duration(0)
	var probeLines []string
	for range 2 {
		pr := <-probes
		if pr.err != nil {
			r.logf("%v", pr.err)
			probeCancel()
			return 2
		}
		d := pr.at.Sub(killAt)
		probeLines = append(probeLines, fmt.Sprintf("%s %v", pr.n.name, d.Round(time.Millisecond)))
		clusterConnect = max(clusterConnect, d)
	}
	ackWG.Wait()
	probeCancel()
	waitFor(ctx, p.reconnectMax+clusterConnect+30*time.Second, func() bool {
		for _, g := range moved {
			if _, _, ok := g.connectedSince(killAt); !ok {
				return false
			}
		}
		return true
	})
	bound := p.reconnectMax + clusterConnect
	var times []time.Duration
	var late, notBack []string
	landed := map[string]int{}
	for _, g := range moved {
		at, addr, ok := g.connectedSince(killAt)
		if !ok {
			notBack = append(notBack, g.clientID())
			continue
		}
		d := at.Sub(killAt)
		times = append(times, d)
		landed[addr]++
		if d > bound {
			late = append(late, fmt.Sprintf("%s %v", g.clientID(), d.Round(time.Millisecond)))
		}
	}
	slices.Sort(times)
	r.say("## Failover (node %s killed, %d gateways on it)", target.name, len(moved))
	r.say("")
	r.say("- a fresh kept-session MQTT connect to the cluster: %v before the kill; after it, first success %s after the kill (the cluster's own connect time: %v)",
		steadyConnect.Round(time.Millisecond), strings.Join(probeLines, ", "), clusterConnect.Round(time.Millisecond))
	if len(times) > 0 {
		r.say("- failover per gateway (node kill to its \"uplink connected\"): min %v, median %v, max %v over %d gateways; all: %s",
			times[0].Round(time.Millisecond), times[len(times)/2].Round(time.Millisecond), times[len(times)-1].Round(time.Millisecond), len(times), fmtDurations(times))
	}
	var landedLines []string
	for _, n := range r.cl.nodes {
		if landed[n.mqttURL()] > 0 {
			landedLines = append(landedLines, fmt.Sprintf("%d to %s", landed[n.mqttURL()], n.name))
		}
	}
	r.say("- moved: %s", strings.Join(landedLines, ", "))
	var acks []time.Duration
	for _, g := range moved {
		if at, ok := ackedAt[g]; ok {
			acks = append(acks, at.Sub(killAt))
		}
	}
	slices.Sort(acks)
	if len(acks) > 0 {
		r.say("- first acknowledgement from the cluster after the kill, per moved gateway (its status.json acked counter, polled every 50 ms): min %v, median %v, max %v over %d gateways",
			acks[0].Round(time.Millisecond), acks[len(acks)/2].Round(time.Millisecond), acks[len(acks)-1].Round(time.Millisecond), len(acks))
	}
	r.promise(len(acks) == len(moved), "every moved gateway was acknowledged by the cluster again (%d of %d measured)", len(acks), len(moved))
	// What a subscriber saw: the longest pause between two messages of a
	// gateway reaching it around the kill (20 msg/s: 50 ms apart when
	// nothing pauses), for the moved gateways and for the others.
	waitFor(ctx, 30*time.Second, func() bool {
		for _, g := range moved {
			at, _, ok := g.connectedSince(killAt)
			if !ok || r.subs[0].lastArrival(g.id).Before(at) {
				return false
			}
		}
		return true
	})
	var gapsMoved, gapsStayed []time.Duration
	for _, g := range r.gws {
		if g == gwA {
			continue
		}
		gap := r.subs[0].longestGap(g.id, killAt, killAt.Add(bound+5*time.Second))
		if slices.Contains(moved, g) {
			gapsMoved = append(gapsMoved, gap)
		} else {
			gapsStayed = append(gapsStayed, gap)
		}
	}
	r.say("- longest pause in delivery at %s's subscriber around the kill: moved gateways %s; gateways that stayed %s",
		r.subs[0].node.name, fmtRange(gapsMoved), fmtRange(gapsStayed))
	r.promise(len(notBack) == 0, "every gateway of the killed node connected again (not: %s)", strings.Join(notBack, " "))
	r.promise(len(late) == 0, "each failover within reconnect_max + the cluster's connect time = %v (over: %s)", bound.Round(time.Millisecond), strings.Join(late, ", "))
	// The gateways on the nodes that stayed up keep their connections
	// unless the cluster ends them: NATS closes an MQTT connection whose
	// QoS 1 publish got no JetStream ack within 5 s, which happens when
	// the killed node led the stream the messages go to. Those count as
	// failovers too, timed from the kill.
	var dropped []*gateway
	for _, g := range r.gws {
		if g != gwA && !slices.Contains(moved, g) && g.countSince(killAt, `msg="uplink disconnected"`) > 0 {
			dropped = append(dropped, g)
		}
	}
	if len(dropped) == 0 {
		r.say("- no gateway on the nodes that stayed up lost its connection")
	} else {
		waitFor(ctx, bound+30*time.Second, func() bool {
			for _, g := range dropped {
				at, _, _ := g.firstSince(killAt, `msg="uplink disconnected"`)
				if _, _, ok := g.connectedSince(at); !ok {
					return false
				}
			}
			return true
		})
		var ended, back []time.Duration
		var ids, over, reasons []string
		for _, g := range dropped {
			ids = append(ids, g.clientID())
			at, _, _ := g.firstSince(killAt, `msg="uplink disconnected"`)
			if m := reasonRe.FindStringSubmatch(g.lineAt(at)); m != nil && !slices.Contains(reasons, m[1]) {
				reasons = append(reasons, m[1])
			}
			c, _, ok := g.connectedSince(at)
			if !ok {
				over = append(over, g.clientID()+" not back")
				continue
			}
			ended = append(ended, at.Sub(killAt))
			back = append(back, c.Sub(at))
			if c.Sub(at) > bound {
				over = append(over, fmt.Sprintf("%s %v", g.clientID(), c.Sub(at).Round(time.Millisecond)))
			}
		}
		r.say("- %d gateways on the nodes that stayed up were disconnected by the cluster (edgegw's reason: %s; the nodes' logs say why): %s; their connections ended after the kill: %s; connected again after that end: %s",
			len(dropped), strings.Join(reasons, ", "), strings.Join(ids, " "), fmtRange(ended), fmtRange(back))
		r.promise(len(over) == 0, "each of those connected again within reconnect_max + the cluster's connect time = %v of its disconnect (over: %s)", bound.Round(time.Millisecond), strings.Join(over, ", "))
	}
	r.say("")

	// Gateway B: kill -9 one that failed over.
	for _, g := range moved {
		if g != gwA {
			gwB = g
			break
		}
	}
	if until(atGatewayKillB) != nil {
		return 2
	}
	if gwB != nil {
		if code := r.killGateway(ctx, gwB); code != 0 {
			return code
		}
	}

	if until(atNodeRestart) != nil {
		return 2
	}
	r.logf("restarting node %s", target.name)
	t = time.Now()
	if err := target.start(); err != nil {
		r.logf("%v", err)
		return 2
	}
	restartReady := time.Since(t)

	if until(p.publish) != nil {
		return 2
	}
	stopPubs()
	pubWG.Wait()
	pubEnd := time.Now()
	r.logf("publishers stopped; waiting for the spools to drain")

	// Drain: every spool empty and nothing in flight, then every message
	// acknowledged locally seen by both subscribers.
	var lastErr error
	drained := waitFor(ctx, 60*time.Second, func() bool {
		for _, g := range r.gws {
			st, err := g.status(ctx)
			if err != nil {
				lastErr = err
				return false
			}
			if st.BacklogMessages != 0 || st.Inflight != 0 || st.State != "connected" {
				lastErr = fmt.Errorf("%s: state %s, backlog %d, in flight %d", g.clientID(), st.State, st.BacklogMessages, st.Inflight)
				return false
			}
		}
		return true
	})
	drainTime := time.Since(pubEnd)
	if !drained {
		r.logf("spools not drained within 60s: %v", lastErr)
	}
	allSeen := func() bool {
		for _, s := range r.subs {
			s.mu.Lock()
			for _, pb := range pubs {
				pb.mu.Lock()
				for seq := range pb.acked {
					if s.copies[pb.gw.id][seq] == 0 {
						pb.mu.Unlock()
						s.mu.Unlock()
						return false
					}
				}
				pb.mu.Unlock()
			}
			s.mu.Unlock()
		}
		return true
	}
	waitFor(ctx, 20*time.Second, allSeen)
	// Late copies (a redelivery) would come within a moment.
	if sleepCtx(ctx, 2*time.Second) != nil {
		return 2
	}
	r.count(pubs, gwA, gwB, moved, drained, drainTime)

	// Where the gateways are after the node came back: a working
	// connection is not moved, so the restarted node holds only those
	// whose connection renewed since (none, when no gateway restarted
	// after it).
	r.say("## After the node restart")
	r.say("")
	var counts []string
	for _, n := range r.cl.nodes {
		counts = append(counts, fmt.Sprintf("%s %d", n.name, len(n.mqttClients("gw-"))))
	}
	r.say("- node %s ready again %v after its restart; gateways per node at the end: %s", target.name, restartReady.Round(time.Millisecond), strings.Join(counts, ", "))
	r.promise(len(target.mqttClients("gw-")) == 0, "no gateway moved back to the restarted node %s (a working connection stays where it is)", target.name)
	r.say("")

	// Stop the fleet before the collision case.
	var wg sync.WaitGroup
	for _, g := range r.gws {
		wg.Go(func() { g.signal(syscall.SIGTERM) })
	}
	wg.Wait()
	return 0
}

// flushWindow is how long an acknowledgement from the cluster may stay
// unwritten in the spool's acks.log: sync_interval (20 ms by default)
// plus the fsync and the commit's own turn, allowed 80 ms here.
const flushWindow = 100 * time.Millisecond

// killGateway kills g with SIGKILL and starts it again gatewayDown later.
// Before the kill it samples g's acked counter every 50 ms for 300 ms:
// the highest rate it saw times flushWindow is how many acknowledgements
// the kill may take with it, which with the publishes in flight is the
// documented bound on the copies the restarted gateway sends (a drain
// after an outage acknowledges far faster than the publishers' rate).
func (r *runner) killGateway(ctx context.Context, g *gateway) int {
	var rate float64
	prev, err := g.status(ctx)
	for range 6 {
		if err != nil || sleepCtx(ctx, 50*time.Millisecond) != nil {
			break
		}
		var st bridgeStatus
		if st, err = g.status(ctx); err == nil {
			rate = max(rate, float64(st.Acked-prev.Acked)/0.05)
			prev = st
		}
	}
	r.killBound[g] = r.p.maxInflight + int(math.Ceil(rate*flushWindow.Seconds()))
	r.killRate[g] = rate
	r.logf("kill -9 %s (acked up to %.0f msg/s just before)", g.clientID(), rate)
	if err := g.signal(syscall.SIGKILL); err != nil {
		r.logf("%v", err)
		return 2
	}
	if sleepCtx(ctx, gatewayDown) != nil {
		return 2
	}
	if err := g.start(); err != nil {
		r.logf("%v", err)
		return 2
	}
	return 0
}

// count reports sent, acknowledged, received, lost and duplicated.
func (r *runner) count(pubs []*publisher, gwA, gwB *gateway, moved []*gateway, drained bool, drainTime time.Duration) {
	p := r.p
	sent, acked, failed := 0, 0, 0
	for _, pb := range pubs {
		pb.mu.Lock()
		sent += pb.sent
		acked += len(pb.acked)
		failed += pb.failed
		pb.mu.Unlock()
	}
	r.say("## Messages")
	r.say("")
	r.promise(drained, "every spool drained (backlog 0, nothing in flight, connected) %v after the publishers stopped", drainTime.Round(time.Millisecond))
	r.say("- sent %d, acknowledged locally %d (%d publishes unanswered: the gateway was killed under them)", sent, acked, failed)

	// The documented bound on copies after a kill -9 at QoS 1: the
	// publishes in flight (at most max_inflight) plus those acknowledged
	// upstream whose removal from the spool was in the last flush window
	// (the rate times sync_interval and an fsync; 100 ms allowed here).
	killed := map[*gateway]bool{gwA: true}
	if gwB != nil {
		killed[gwB] = true
	}
	for si, s := range r.subs {
		s.mu.Lock()
		lost, unackedArrived := 0, 0
		dupKilled := map[string]int{}
		dupMoved, dupOther := 0, 0
		var lostEx []string
		for _, pb := range pubs {
			pb.mu.Lock()
			got := s.copies[pb.gw.id]
			for seq := range pb.acked {
				if got[seq] == 0 {
					lost++
					if len(lostEx) < 10 {
						lostEx = append(lostEx, fmt.Sprintf("%s#%d", pb.gw.clientID(), seq))
					}
				}
			}
			for seq, c := range got {
				if !pb.acked[seq] {
					unackedArrived++
				}
				if c <= 1 {
					continue
				}
				switch {
				case killed[pb.gw]:
					dupKilled[pb.gw.clientID()] += c - 1
				case slices.Contains(moved, pb.gw):
					dupMoved += c - 1
				default:
					dupOther += c - 1
				}
			}
			pb.mu.Unlock()
		}
		received := 0
		for _, m := range s.copies {
			received += len(m)
		}
		redeliv, malformed := s.redeliv, s.malformed
		s.mu.Unlock()

		r.say("- subscriber %d (on %s): received %d distinct messages (%d of them never acknowledged locally); %d redeliveries marked DUP by the node, not counted; %d malformed",
			si+1, s.node.name, received, unackedArrived, redeliv, malformed)
		r.promise(lost == 0, "subscriber %d: lost (acknowledged locally, never received) = %d %s", si+1, lost, strings.Join(lostEx, " "))
		var kl []string
		killedOK := true
		for _, g := range []*gateway{gwA, gwB} {
			if g == nil {
				continue
			}
			kl = append(kl, fmt.Sprintf("%s %d (bound %d: max_inflight %d + %.0f msg/s acked x %v)",
				g.clientID(), dupKilled[g.clientID()], r.killBound[g], p.maxInflight, r.killRate[g], flushWindow))
			if dupKilled[g.clientID()] > r.killBound[g] {
				killedOK = false
			}
		}
		r.promise(killedOK, "subscriber %d: copies from the gateways killed with -9 within the documented bound (the publishes in flight, at most max_inflight, and the acknowledgements of the last flush window): %s", si+1, strings.Join(kl, ", "))
		r.promise(dupMoved <= p.maxInflight*len(moved), "subscriber %d: copies from the gateways that failed over (a reconnect may resend what was in flight, at most max_inflight each): %d", si+1, dupMoved)
		r.promise(dupOther == 0, "subscriber %d: copies from the other gateways = %d", si+1, dupOther)
	}
	r.say("")
}

func fmtDurations(ds []time.Duration) string {
	var s []string
	for _, d := range ds {
		s = append(s, fmt.Sprintf("%.2fs", d.Seconds()))
	}
	return strings.Join(s, " ")
}

// fmtRange is "min X, median Y, max Z" of ds.
func fmtRange(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	ds = slices.Clone(ds)
	slices.Sort(ds)
	return fmt.Sprintf("min %v, median %v, max %v", ds[0].Round(time.Millisecond), ds[len(ds)/2].Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond))
}

// overHalf is the probability that one of k nodes gets more than half of
// n gateways each placed uniformly at random (the events are disjoint).
func overHalf(n, k int) float64 {
	p := 1 / float64(k)
	sum := 0.0
	for j := n/2 + 1; j <= n; j++ {
		lc := lgamma(n+1) - lgamma(j+1) - lgamma(n-j+1)
		sum += math.Exp(lc + float64(j)*math.Log(p) + float64(n-j)*math.Log(1-p))
	}
	return float64(k) * sum
}

func lgamma(x int) float64 {
	v, _ := math.Lgamma(float64(x))
	return v
}
