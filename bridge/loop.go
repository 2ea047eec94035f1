package bridge

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"
)

// backoff is capped exponential backoff with jitter.
type backoff struct{ min, max, cur time.Duration }

func (bo *backoff) reset() { bo.cur = 0 }

// healthyUplink is how long a connection must stay up to count as healthy
// when it delivered nothing (see lost).
const healthyUplink = 10 * time.Second

// lost is told that a connection which lasted up and on which the broker
// acknowledged acked messages (PUBACK, PUBCOMP: Bridge.peerAcked, not a
// QoS 0 write, which a broker closing the connection at an oversize
// PUBLISH before it never reads) has ended; it resets the backoff only if
// the connection was healthy: it delivered a message, or stayed up
// healthyUplink. A CONNACK
// alone proves little: a broker that closes the connection right after
// it, every time (a PUBLISH over its packet size limit, which the bridge
// sends first on every connection; another client taking over the same
// client id; a policy that disconnects on the first publish), would be
// reconnected to at reconnect_min for ever, about 10 times a second with
// a 100 ms reconnect_min, each time re-sending what was in flight.
// Delivering a message is progress, so a flaky link that still moves the
// spool reconnects at once; 10 s is longer than any such broker's reaction
// and shorter than an idle NAT's timeout, so an idle uplink cut now and
// then still reconnects at reconnect_min.
func (bo *backoff) lost(up time.Duration, acked uint64) {
	if acked > 0 || up >= healthyUplink {
		bo.reset()
	}
}

// next returns a wait in [cur/2, cur] (at least min), doubling cur up to
// max each call.
func (bo *backoff) next() time.Duration {
	if bo.cur == 0 {
		bo.cur = bo.min
	} else {
		bo.cur = min(bo.cur*2, bo.max)
	}
	d := bo.cur/2 + rand.N(bo.cur/2+1)
	return max(d, bo.min)
}

// loop is the owner goroutine's reconnect loop: each round tries the
// addresses in order, serves the first that connects until it is lost,
// then waits a jittered backoff (reset after a healthy connection: see
// backoff.lost).
func (b *Bridge) loop(ctx context.Context) {
	bo := backoff{min: b.cfg.ReconnectMin, max: b.cfg.ReconnectMax}
	for ctx.Err() == nil {
		b.applyPending()
		for _, u := range b.c.Load().addrs {
			trips, writeTimeouts := b.trips.Load(), b.writeTimeouts.Load()
			serve, err := b.connectUplink(ctx, u) // uplinkengine.go
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, errReload) {
				break // apply the new settings first
			}
			if err != nil {
				err = b.noteSetupLost(ctx, err, writeTimeouts) // stuck.go: lost after its CONNACK?
				if errors.As(err, new(*setupLost)) {
					err, _ = b.noteCollision(ctx, 0, err, trips, writeTimeouts) // collision.go
				} else {
					b.collide.reset() // no CONNACK: the upstream is down or unreachable, no other client's doing
				}
				b.connectFailed(u, err)
				continue
			}
			start, acked := time.Now(), b.peerAcked.Load()
			b.failLog.connected(b.log, start)
			why := serve(ctx)
			up := time.Since(start)
			bo.lost(up, b.peerAcked.Load()-acked)
			if named, ok := b.noteCollision(ctx, up, why, trips, writeTimeouts); ok { // collision.go
				msg := named.Error() // the connection's end reason, set as it ended, now says it
				b.lastErr.Store(&msg)
			}
			break
		}
		t := time.NewTimer(bo.next())
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-b.rl.wake: // a reload's new connection settings: try them now
			t.Stop()
			bo.reset()
		case <-t.C:
		}
	}
}
