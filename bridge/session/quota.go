package session

// The QoS 2 window an MQTT 3.1.1 peer showed it takes. MQTT 3.1.1 has no
// Receive Maximum, and a broker that takes fewer QoS 2 flows in flight
// than the bridge sends does one of two things with the first flow over
// its quota: it acknowledges it and drops it (Debian's mosquitto 2.0.11,
// whose PUBREC says 0x97 only over MQTT 5), which nothing on the wire
// shows, or it closes the connection (later mosquitto 2.0 releases:
// "receive maximum exceeded"). The second is learned here.
//
// The signature is counted in packets, not time: the peer closed the
// connection (EOF or reset: not a DISCONNECT, not the engine's own
// teardown) while a QoS 2 PUBLISH written on it was unanswered, and
// before it had answered, in all, as many QoS 2 PUBLISHes with a PUBREC
// as the engine had in flight at once on it. That is "soon after
// CONNACK" whatever the round trip: a connection that lived answers
// thousands; one that a quota ended answered the quota and closed on the
// next. A broken link or a restarting broker may look the same once, so
// the window is learned after quotaAfter such connections in a row, as
// the fewest PUBRECs one of them answered (at least 1), and never grows
// again for the life of the engine: the peer's quota is its
// configuration, and a probe above it costs a closed connection. A
// connection ended otherwise breaks the streak.
//
// Once learned, at most that many QoS 2 flows are on the wire: resume
// re-sends PUBRELs (they free the peer's quota) and as many of the other
// flows as the window holds, oldest first; the rest wait, under their
// packet ids, and go as flows complete (sendHeld), before any new QoS 2
// flow. A held flow keeps its id and its place: nothing is lost or sent
// twice.

import (
	"errors"
	"io"
	"syscall"
	"time"

	"github.com/edgegw/edgegw/gateway/packet"
)

// quotaAfter is how many connections in a row must end with the quota
// signature before the window is learned.
const quotaAfter = 2

// QoS2Window returns the QoS 2 window learned from an MQTT 3.1.1 peer
// (0: none learned).
func (e *Engine) QoS2Window() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.win2
}

// Learned returns the QoS 2 window this link taught the engine when it
// ended (0: none). Valid once Done is closed and Close has returned.
func (l *Link) Learned() int {
	l.e.mu.Lock()
	defer l.e.mu.Unlock()
	return l.learned
}

// QuotaEnd reports whether the link ended with the quota signature (a
// QoS 2 quota below what was in flight, probably; counted toward
// learning the window). Valid once Close has returned.
func (l *Link) QuotaEnd() bool {
	l.e.mu.Lock()
	defer l.e.mu.Unlock()
	return l.quotaEnd
}

// onWire2Locked is the QoS 2 flows on the wire: in the session and not
// held back. Caller holds mu.
func (e *Engine) onWire2Locked() int { return e.count2 - len(e.held) }

// roomFor2Locked reports whether one more QoS 2 flow may go on the wire
// under the learned window. Caller holds mu.
func (e *Engine) roomFor2Locked() bool { return e.win2 == 0 || e.onWire2Locked() < e.win2 }

// sentOnLocked notes that flow f went on the wire of l. Caller holds mu.
func (l *Link) sentOnLocked(f *Flow) {
	f.link = l
	if f.QoS == 2 {
		l.peak2 = max(l.peak2, l.e.onWire2Locked())
	}
}

// sendHeld sends the held flows while the learned window has room,
// oldest first (the reader, as flows complete, and Publish, before a new
// flow). heldMu keeps their order on the wire.
func (l *Link) sendHeld() error {
	l.heldMu.Lock()
	defer l.heldMu.Unlock()
	return l.sendHeldLocked()
}

// sendHeldLocked is sendHeld. Caller holds heldMu.
func (l *Link) sendHeldLocked() error {
	e := l.e
	for {
		e.mu.Lock()
		if len(e.held) == 0 || e.link != l || !e.roomFor2Locked() {
			e.mu.Unlock()
			return nil
		}
		f := e.held[0]
		e.held = e.held[1:]
		pub := f.pub
		l.sentOnLocked(f)
		e.mu.Unlock()
		if pub == nil {
			var err error
			if pub, err = e.load(f); err != nil {
				return err
			}
		}
		dup := *pub
		dup.Dup = true // sent before, on an earlier connection [MQTT-3.3.1-1]
		e.mu.Lock()
		f.sent = time.Now()
		e.mu.Unlock()
		if err := l.c.Send(&dup); err != nil {
			return err
		}
	}
}

// endLink learns from how link l ended (its reader's last read error):
// the quota signature above, over MQTT 3.1.1 only (MQTT 5 peers state
// their Receive Maximum).
func (l *Link) endLink(readErr error) {
	e := l.e
	if e.cfg.Version == packet.V5 {
		return
	}
	peerClosed := errors.Is(readErr, io.EOF) || errors.Is(readErr, io.ErrUnexpectedEOF) || errors.Is(readErr, syscall.ECONNRESET)
	e.mu.Lock()
	defer e.mu.Unlock()
	unanswered := 0
	for _, f := range e.byRec {
		if f.QoS == 2 && f.link == l && !f.released {
			unanswered++
		}
	}
	if !peerClosed || unanswered == 0 || l.recs >= l.peak2 {
		e.quotaRun, e.quotaMin = 0, 0
		return
	}
	l.quotaEnd = true
	took := max(1, l.recs)
	if e.quotaRun == 0 || took < e.quotaMin {
		e.quotaMin = took
	}
	e.quotaRun++
	if e.quotaRun < quotaAfter || (e.win2 != 0 && e.quotaMin >= e.win2) {
		return
	}
	e.win2 = e.quotaMin
	l.learned = e.win2
	e.quotaRun, e.quotaMin = 0, 0
}
