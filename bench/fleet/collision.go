package main

import (
	"context"
	"syscall"
	"time"
)

const collisionNeedle = "another client is probably using this bridge's client id"

// collision starts two gateways from the same config with the same
// gateway id (so one client id upstream) and times how long until either
// log names the collision.
func (r *runner) collision(ctx context.Context, conf string, env []string) int {
	p := r.p
	a := newGateway(p.bin, conf, r.dir, "collide-a", "collide", p.basePort+300, p.basePort+301, env)
	b := newGateway(p.bin, conf, r.dir, "collide-b", "collide", p.basePort+302, p.basePort+303, env)
	r.collided = []*gateway{a, b}
	t := time.Now()
	if err := a.start(); err != nil {
		r.logf("%v", err)
		return 2
	}
	if !waitFor(ctx, 30*time.Second, func() bool { _, _, ok := a.connectedSince(t); return ok }) {
		r.logf("collision case: the first gateway did not connect within 30s")
		return 2
	}
	r.logf("collision case: second gateway with client id %s", b.clientID())
	tb := time.Now()
	if err := b.start(); err != nil {
		r.logf("%v", err)
		return 2
	}
	named := func() (time.Time, string, bool) {
		ta, _, oka := a.firstSince(tb, collisionNeedle)
		tbb, _, okb := b.firstSince(tb, collisionNeedle)
		switch {
		case oka && (!okb || ta.Before(tbb)):
			return ta, a.name, true
		case okb:
			return tbb, b.name, true
		}
		return time.Time{}, "", false
	}
	waitFor(ctx, 30*time.Second, func() bool { _, _, ok := named(); return ok })
	at, who, ok := named()
	r.say("## Two gateways, one client id")
	r.say("")
	if ok {
		d := at.Sub(tb)
		r.say("- client id %s: named by %s %v after the second gateway started (connects: %s %d, %s %d; connection attempts refused by the cluster: %s %d, %s %d)",
			a.clientID(), who, d.Round(time.Millisecond),
			a.name, a.countSince(t, `msg="uplink connected"`), b.name, b.countSince(tb, `msg="uplink connected"`),
			a.name, a.countSince(t, "connect failed"), b.name, b.countSince(tb, "connect failed"))
		r.promise(d <= 10*time.Second, "the collision is named in the log within 10 s (%v)", d.Round(time.Millisecond))
	} else {
		r.say("- client id %s: not named within 30 s (connects: %s %d, %s %d)", a.clientID(),
			a.name, a.countSince(t, `msg="uplink connected"`), b.name, b.countSince(tb, `msg="uplink connected"`))
		r.promise(false, "the collision is named in the log within 10 s")
	}
	for _, g := range r.collided {
		if err := g.signal(syscall.SIGTERM); err != nil {
			r.logf("%v", err)
		}
	}
	return 0
}
