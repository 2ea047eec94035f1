package bridge

// A message the cloud broker will never take, and does not refuse: over
// MQTT 3.1.1 a broker with a packet size limit (mosquitto's
// max_packet_size, AWS IoT's 128 KiB) closes the connection when a larger
// PUBLISH arrives, since 3.1.1 cannot refuse one message. The bridge
// reconnects and sends the same message first again (it is the oldest
// unacknowledged one), and every message behind it waits in the spool.
// max_packet_size (uplinkengine.go refuse) drops such a message before it is
// sent; without it the bridge cannot tell that message from one cut by a
// flaky link several times in a row, and an acknowledged message is never
// dropped on a guess. So it only says so: when stuckAfter connections in a
// row were ended by the peer while the same record was the oldest one
// written and not acknowledged, it logs one ERROR line naming the record's
// topic and size and the key to set, and the connection's end reason
// (Stats.LastError: /status.json, $SYS/bridge/<name>/last_error) carries
// the same hint while the streak lasts.
//
// A connection counts whether it was lost while serving (noteEnd) or
// while it was being set up after its CONNACK (lostInSetup): with a
// persistent session the client re-sends the session's flows right after
// the CONNACK, before the bridge subscribes its in rules, so the broker
// closes the connection before the SUBACK and the attempt fails. The
// oldest record is then the session's oldest flow, re-sent on it.

import (
	"context"
	"errors"
	"fmt"

	"github.com/edgegw/edgegw/bridge/spool"
)

// stuckAfter is how many connections in a row must end, by the peer,
// with the same record the oldest unacknowledged one before the bridge
// says the record may be too large for the cloud broker. One or two is a
// link that drops now and then; three with the same message first is a
// pattern worth a line, not yet an action.
const stuckAfter = 3

// stuckTopicMax bounds the topic quoted in the last error (the log line
// has it whole).
const stuckTopicMax = 80

// stuckRecord is the streak of connections that ended with the same
// record first in line. Only the owner goroutine uses it.
type stuckRecord struct {
	id     spool.ID
	topic  string // as sent upstream; "" until a connection sent it itself (not resumed)
	size   int    // its PUBLISH in bytes, with topic
	n      int    // connections in a row ended by the peer with it the oldest unacknowledged
	logged bool   // the ERROR line for this streak was written
}

// connEnd is how one connection ended, for stuckRecord.
type connEnd struct {
	byPeer bool     // neither the bridge (watchdog, write timeout, reload, stop) nor ctx ended it
	oldest inflight // the oldest flow written and not acknowledged
	held   bool     // oldest is set: there was one
}

// ended notes how a connection ended and returns the hint for its end
// reason once the streak has reached stuckAfter ("" otherwise), and
// whether this is the first time for the streak (log it).
func (w *stuckRecord) ended(e connEnd) (hint string, first bool) {
	if !e.byPeer || !e.held {
		w.n, w.logged = 0, false // the streak ends; the record's topic and size stay known
		return "", false
	}
	if e.oldest.id != w.id {
		*w = stuckRecord{id: e.oldest.id}
	}
	w.n++
	if e.oldest.topic != "" {
		w.topic, w.size = e.oldest.topic, e.oldest.wire
	}
	if w.n < stuckAfter {
		return "", false
	}
	what := fmt.Sprintf("record %d", w.id) // topic unknown: only ever re-sent from the session (not expected)
	if w.topic != "" {
		topic := w.topic
		if len(topic) > stuckTopicMax {
			topic = topic[:stuckTopicMax] + "..."
		}
		what = fmt.Sprintf("%d bytes, topic %s", w.size, topic)
	}
	// The key first: edgegw_bridge_last_error_info keeps 200 bytes. No
	// count in it: the connect failure log (log.go) repeats a line only
	// when its text changes.
	hint = "set bridges[].max_packet_size if the cloud broker limits packet size: " +
		"the uplink keeps ending right after sending the same message (" + what + ")"
	first = !w.logged
	w.logged = true
	return hint, first
}

// noteEnd is serveUplink's last word on a connection that ended with why:
// it feeds b.stuck and returns why, with the hint once the streak is long
// enough. trips and writeTimeouts are the counters' values when the
// connection came up; pending is its (stopped) acker's queue.
func (b *Bridge) noteEnd(ctx context.Context, s *uplink, pending *flowQueue, why error, trips, writeTimeouts uint64) error {
	e := connEnd{
		byPeer: ctx.Err() == nil && !errors.Is(why, errReload) &&
			b.trips.Load() == trips && b.writeTimeouts.Load() == writeTimeouts,
		oldest: s.oldest, held: s.waiting,
	}
	if !e.held { // the acker had not taken the oldest flow yet: it is first in its queue
		done, cancel := context.WithCancel(context.Background())
		cancel()
		e.oldest, e.held = pending.pop(done) // returns a queued flow without waiting
	}
	return b.stuckHint(e, why)
}

// setupLost is a connection attempt that got its CONNACK and was lost
// before it was up (subscribing the in rules): connectEngine returns it,
// with the engine's oldest flow, and the loop counts
// it as a connection that ended (noteSetupLost).
type setupLost struct {
	err    error
	oldest spool.ID // the session's oldest flow, re-sent on the connection
	held   bool     // there was one
}

func (e *setupLost) Error() string { return e.err.Error() }
func (e *setupLost) Unwrap() error { return e.err }

// errNoAnswer is why the bridge gave up waiting for an answer upstream
// (the connection was not lost: not the peer's doing).
var errNoAnswer = errors.New("no answer")

// noteSetupLost is the loop's word on a failed connection attempt (err):
// one lost after its CONNACK counts as a connection that ended, by the
// peer unless the bridge gave up waiting for an answer (errNoAnswer), a
// write timed out (writeTimeouts: the counter before the attempt), a
// reload or the stop. It returns err, with the hint once the streak is
// long enough. A failure before the CONNACK is no connection: it leaves
// the streak as it is.
func (b *Bridge) noteSetupLost(ctx context.Context, err error, writeTimeouts uint64) error {
	var sl *setupLost
	if !errors.As(err, &sl) {
		return err
	}
	e := connEnd{
		byPeer: ctx.Err() == nil && !errors.Is(err, errReload) && !errors.Is(err, errNoAnswer) &&
			// A wait bounded by its context gave up: no answer either.
			!errors.Is(err, context.DeadlineExceeded) &&
			b.writeTimeouts.Load() == writeTimeouts,
		oldest: inflight{id: sl.oldest}, held: sl.held,
	}
	return b.stuckHint(e, err)
}

// stuckHint feeds b.stuck with how a connection ended and returns why,
// with the hint (and the ERROR line, once) when the streak is long
// enough.
func (b *Bridge) stuckHint(e connEnd, why error) error {
	hint, first := b.stuck.ended(e)
	if hint == "" {
		return why
	}
	if first {
		b.log.Error("uplink keeps ending right after the same message was sent: if the cloud broker limits packet size, "+
			"set bridges[].max_packet_size to its limit; until then the message stays first in line and the messages behind it wait",
			"topic", b.stuck.topic, "size", b.stuck.size, "record", uint64(b.stuck.id), "times", b.stuck.n, "reason", why)
	}
	return fmt.Errorf("%s: %w", hint, why)
}
