package session

// The link's timer goroutine: keepalive and the ack watchdog.
//
// Keepalive: a PINGREQ goes out (control lane, never behind queued
// publishes) when nothing was read for half the keepalive or nothing
// written for three quarters of it (a client must send something within
// the keepalive, [MQTT-3.1.2-23](3.1.1)); a peer from which nothing at
// all was read for 1.5 times the keepalive is dead. A stuck write is the
// writer's: wire breaks the connection within the write timeout.
//
// Ack watchdog: if an unacknowledged publish is older than ack_timeout
// and nothing was read from upstream since it was sent, the link is torn
// down. It looks at the oldest publish sent after the last read, not at
// the oldest of all: in a drain the oldest is often a QoS 2 flow whose
// PUBREC came long ago, and a link that went dead behind it must still
// be found by the newer ones. The goroutine sleeps until the next of these
// deadlines (at most a second, so a flow sent meanwhile is looked at).

import (
	"time"

	"github.com/edgegw/edgegw/gateway/packet"
)

// maxTimerSleep bounds the timer's sleep.
const maxTimerSleep = time.Second

func (l *Link) timerLoop() {
	e := l.e
	ka := l.keepAlive
	at := e.cfg.AckTimeout
	var pingSent time.Time
	pingOut := false
	t := time.NewTimer(maxTimerSleep)
	defer t.Stop()
	for {
		now := time.Now()
		lastRead, lastWrite := l.c.LastRead(), l.c.LastWrite()
		next := now.Add(maxTimerSleep)
		earlier := func(d time.Time) {
			if d.Before(next) {
				next = d
			}
		}
		if ka > 0 {
			if pingOut && lastRead.After(pingSent) {
				pingOut = false
			}
			dead := lastRead.Add(ka * 3 / 2)
			if !now.Before(dead) {
				l.c.Abort(ErrKeepalive)
				return
			}
			earlier(dead)
			if !pingOut {
				due := lastRead.Add(ka / 2)
				if w := lastWrite.Add(ka * 3 / 4); w.Before(due) {
					due = w
				}
				if !now.Before(due) {
					if l.c.SendControl(&packet.Pingreq{}) != nil {
						return
					}
					pingSent, pingOut = now, true
				} else {
					earlier(due)
				}
			}
		}
		if sent, ok := e.oldestSentAfter(lastRead); ok {
			trip := sent.Add(at)
			if !now.Before(trip) {
				l.c.Abort(ErrWatchdog)
				return
			}
			earlier(trip)
		}
		t.Reset(time.Until(next))
		select {
		case <-t.C:
		case <-l.c.Done():
			return
		}
	}
}

// oldestSentAfter returns when the oldest unfinished flow sent after t
// was sent.
func (e *Engine) oldestSentAfter(t time.Time) (time.Time, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var oldest time.Time
	for _, f := range e.byRec {
		if f.sent.After(t) && (oldest.IsZero() || f.sent.Before(oldest)) {
			oldest = f.sent
		}
	}
	return oldest, !oldest.IsZero()
}
