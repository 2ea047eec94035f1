package bridge

// Refusals: local messages the bridge's spool could not keep (full disk,
// a write error, a spool that cannot open). Their publishers are not
// acknowledged (the gateway answers an MQTT 5 publisher with 0x83 and
// disconnects a 3.1.1 one), so a sensor retrying against a full disk can
// refuse hundreds of messages a second: a log line per refusal would bury
// the cause and wear the same flash. Every refusal is counted
// (Stats.AcceptFailed, edgegw_bridge_refused_total); the log gets the
// first refusal of a burst at once, then at most one line per
// refusalLogEvery with the number refused since, and one line when the
// spool takes messages again.

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// refusalLogEvery is the least time between two refusal log lines.
const refusalLogEvery = 10 * time.Second

// refusalLog rate-limits the bridge's refusal log lines. Safe for
// concurrent use: the spool's flusher and publishers' readers call it.
type refusalLog struct {
	log    *slog.Logger
	every  time.Duration
	active atomic.Bool // a burst has been logged and not yet closed

	mu      sync.Mutex
	last    time.Time // when the last line was written
	pending uint64    // refusals not yet in a line
	since   time.Time // first of the pending ones
}

// refused notes one refusal and logs if the last line is old enough.
func (r *refusalLog) refused(topic string, err error) {
	now := time.Now()
	r.mu.Lock()
	if r.pending == 0 {
		r.since = now
	}
	r.pending++
	if !r.last.IsZero() && now.Sub(r.last) < r.every {
		r.mu.Unlock()
		return
	}
	n, since := r.pending, r.since
	r.pending, r.last = 0, now
	r.active.Store(true)
	r.mu.Unlock()
	r.log.Warn("local messages refused: the spool cannot keep them; publishers are not acknowledged",
		"refused", n, "over", now.Sub(since).Round(time.Millisecond), "topic", topic, "err", err)
}

// kept notes that the spool took a message: if refusals were left out of
// the log, one line closes the burst. Cheap when there were none.
func (r *refusalLog) kept() {
	if !r.active.Load() {
		return
	}
	r.mu.Lock()
	if r.last.IsZero() {
		r.mu.Unlock()
		return
	}
	n, since := r.pending, r.since
	r.pending, r.last = 0, time.Time{}
	r.active.Store(false)
	r.mu.Unlock()
	if n > 0 {
		r.log.Warn("local messages refused: the spool cannot keep them; publishers are not acknowledged",
			"refused", n, "over", time.Since(since).Round(time.Millisecond))
	}
	r.log.Info("spool keeps local messages again")
}
