package bridge

// Two clients with one client id. A broker keeps one connection per
// client id: when a second client connects with it, the broker ends the
// first one's connection [MQTT-3.1.4-3] (over MQTT 5 with DISCONNECT 0x8E
// session taken over, over 3.1.1 by closing the socket). Two gateways
// given one client id (one config on hosts or containers that share a
// host name or machine id) then end each other's connection at every
// reconnect, for ever, each with nothing in its log but EOF. The bridge
// names the likely cause: after collisionAfter connections in a row that
// the upstream ended within healthyUplink of their CONNACK, with no failed
// attempt between them (or at once on 0x8E), one ERROR line names the client id, and the end reason
// (Stats.LastError: /status.json, the page, /metrics) says it while the
// streak lasts.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/edgegw/edgegw/bridge/session"
)

// collisionAfter is how many connections in a row must be ended by the
// upstream right after they came up before the bridge names a client id
// collision. One is a link that dropped; two in a row, each ended within
// seconds of its CONNACK, is the ping-pong of two clients with one id
// (named within a few reconnects, well inside 10 s at the default
// reconnect_min).
const collisionAfter = 2

// rcSessionTakenOver is MQTT 5's DISCONNECT reason when another connection
// took the session over [MQTT-3.1.4-3].
const rcSessionTakenOver = 0x8E

// serverDisconnect is an MQTT 5 broker's DISCONNECT, as a connection's end
// reason.
type serverDisconnect struct{ rc byte }

func (e *serverDisconnect) Error() string {
	if e.rc == rcSessionTakenOver {
		return "upstream sent DISCONNECT 0x8e (session taken over: another connection with this client id)"
	}
	return fmt.Sprintf("upstream sent DISCONNECT 0x%02x", e.rc)
}

// collisionWatch is the streak of connections the upstream ended right
// after they came up. Only the owner goroutine uses it.
type collisionWatch struct {
	n      int  // such connections in a row
	logged bool // the ERROR line for this streak was written
}

// reset ends the streak: a connection attempt failed before its CONNACK.
// Two clients with one id never make the other's attempts fail (each is
// accepted, then ended by the next), a broker restarting or an outage
// does: between two connections it ended, one that failed is no
// collision.
func (w *collisionWatch) reset() { w.n, w.logged = 0, false }

// ended notes a connection that lasted up (0: lost while being set up,
// after its CONNACK) and returns whether the streak names a collision
// now, and whether for the first time in the streak. byPeer: the upstream
// ended it (not the bridge, its watchdog, a write timeout, a reload or the
// stop); takenOver: it said so (MQTT 5, 0x8E).
func (w *collisionWatch) ended(up time.Duration, byPeer, takenOver bool) (named, first bool) {
	switch {
	case takenOver:
		w.n = max(w.n+1, collisionAfter)
	case byPeer && up < healthyUplink:
		w.n++
	default:
		w.n, w.logged = 0, false
		return false, false
	}
	if w.n < collisionAfter {
		return false, false
	}
	first = !w.logged
	w.logged = true
	return true, first
}

// collisionError is a connection's end reason when the streak names a
// client id collision.
type collisionError struct {
	clientID string
	err      error
}

func (e *collisionError) Error() string {
	return fmt.Sprintf("another client is probably using client id %q: the upstream keeps ending the connection right after it connects "+
		"(or it refuses what the bridge sends at once: more QoS 2 messages in flight than it takes, see max_inflight_qos2): %v",
		e.clientID, e.err)
}

func (e *collisionError) Unwrap() error { return e.err }

// noteCollision is the loop's word on a connection that ended after up
// (0: lost in its setup, after the CONNACK): trips and writeTimeouts are
// the counters when it came up, why its end reason. When the streak names
// a collision it logs the ERROR line (once per streak) and returns why
// wrapped in a collisionError and true; otherwise why and false.
func (b *Bridge) noteCollision(ctx context.Context, up time.Duration, why error, trips, writeTimeouts uint64) (error, bool) {
	// Ends the bridge made itself are not the peer's: a reload, a request
	// unanswered, a timeout, the keepalive finding a silent peer, the
	// watchdog and a write timeout (their counters moved).
	byPeer := ctx.Err() == nil && !errors.Is(why, errReload) && !errors.Is(why, errNoAnswer) &&
		!errors.Is(why, context.DeadlineExceeded) && !errors.Is(why, session.ErrKeepalive) &&
		b.trips.Load() == trips && b.writeTimeouts.Load() == writeTimeouts
	var sd *serverDisconnect
	takenOver := errors.As(why, &sd) && sd.rc == rcSessionTakenOver
	if errors.As(why, new(*qos2QuotaEnd)) {
		// Closed with QoS 2 publishes unanswered, as a broker closes a
		// connection over its QoS 2 quota: the engine learns the window
		// from it (session/quota.go); no other client's doing.
		byPeer = false
	}
	if b.stuck.n >= stuckAfter && !takenOver {
		// The same message first in line every time: stuck.go's hint
		// (a packet size limit) is the likelier cause.
		byPeer = false
	}
	named, first := b.collide.ended(up, byPeer, takenOver)
	if !named {
		return why, false
	}
	if first {
		b.log.Error("another client is probably using this bridge's client id: the cloud broker ended the connection right after it connected, "+
			"each time; give every gateway its own client_id (docs/bridge.md, two clients with one client id); "+
			"a broker that takes fewer QoS 2 messages in flight than max_inflight_qos2 closes the connection the same way (lower max_inflight_qos2)",
			"client_id", b.cfg.ClientID, "times", b.collide.n, "reason", why)
	}
	return &collisionError{clientID: b.cfg.ClientID, err: why}, true
}
