package bridge

// Design note: what a rule adds to a message on its way into the spool.
// A rule's max_age and a message's MQTT 5 expiry become one absolute
// expiry in the spool record, the earlier of the two: a reading worthless
// when old is dropped by the spool when the sender reaches it (counted
// as expired in the ledger), never sent, and an expiry survives restarts
// with the record. It is measured from the moment the bridge accepted the
// message, on the wall clock (a clock step moves it; there is nothing
// better that survives a reboot).

import (
	"context"
	"sync"
	"time"

	"github.com/edgegw/edgegw/bridge/spool"
	"github.com/edgegw/edgegw/gateway"
)

// spoolExpiry is when m, accepted now through rule r, stops being worth
// sending: the earlier of its own expiry and now + r.MaxAge; zero: never.
func spoolExpiry(m *gateway.Message, r *rule, now time.Time) time.Time {
	e := m.Expiry
	if r.MaxAge > 0 {
		if byAge := now.Add(r.MaxAge); e.IsZero() || byAge.Before(e) {
			e = byAge
		}
	}
	return e
}

// spoolMessageFor maps m through out rule r.
func spoolMessageFor(m *gateway.Message, r *rule, now time.Time) spool.Message {
	return spool.Message{
		Topic:   r.RemotePrefix + m.Topic[len(r.LocalPrefix):],
		Payload: m.Payload,
		QoS:     min(m.QoS, byte(r.QoS)),
		Retain:  m.Retain,
		Expiry:  spoolExpiry(m, r, now),
		Lane:    r.lane,
	}
}

// Drain policies (Config.Drain).
const (
	// DrainFIFO sends each lane oldest first, the backlog at full window
	// speed.
	DrainFIFO = "fifo"
	// DrainLiveFirst sends what arrives while the uplink is up at once and
	// lets the backlog (what arrived before this connection) use at most
	// backlog_share of the send window.
	DrainLiveFirst = "live-first"
)

// DefaultBacklogShare is the backlog's share of the send window with
// live-first.
const DefaultBacklogShare = 0.25

// picker chooses the next spool record a session sends; the sender asks
// it (next) before it waits for room in the send window, and the acker
// tells it when a publish completed (done). Order: lanes strictly by
// priority (high, normal, bulk); within a lane, oldest first; with
// live-first, within a lane the records accepted during this connection
// (live) before the older ones (backlog), and the backlog in flight held
// to backlog_share of the window: of its bytes (max_inflight auto: the
// window the link allows right now) and of its count, but at least one
// message. So live messages find room at once while the backlog drains
// with the rest.
type picker struct {
	sp        *spool.Spool
	win       *sendWindow
	budget    *budget // nil: no limit
	liveFirst bool
	share     float64
	boundary  spool.ID          // the first ID accepted during this connection
	resent    map[spool.ID]bool // flows paho re-sent on connect: not sent again

	// cursors: the last record picked per lane (all: FIFO; backlog and
	// live: live-first).
	all, backlog, live [spool.NumLanes]spool.ID

	mu           sync.Mutex
	backlogIn    map[spool.ID]int // backlog records in flight, and their wire size
	backlogBytes int
	freed        chan struct{} // a backlog record completed; capacity 1
}

// newPicker makes the picker of a session that starts with the spool's
// records up to now as its backlog.
func newPicker(sp *spool.Spool, drain string, share float64, win *sendWindow) *picker {
	return &picker{
		sp:        sp,
		win:       win,
		liveFirst: drain == DrainLiveFirst,
		share:     share,
		boundary:  sp.LastID() + 1,
		resent:    make(map[spool.ID]bool),
		backlogIn: make(map[spool.ID]int),
		freed:     make(chan struct{}, 1),
	}
}

// shareOf returns share of the window's current limits: count and bytes
// (bytes 0: not bounded by bytes, a fixed max_inflight).
func (w *sendWindow) shareOf(share float64) (count, bytes int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	count = max(1, int(share*float64(w.maxCount)))
	if w.auto {
		bytes = max(1, int(share*float64(w.cwnd)))
	}
	return count, bytes
}

// resume records a flow paho re-sent on connect: it is in flight (a
// backlog one) and the picker skips it.
func (p *picker) resume(id spool.ID, size int) {
	p.resent[id] = true
	if p.liveFirst && id < p.boundary {
		p.mu.Lock()
		p.backlogIn[id] = size
		p.backlogBytes += size
		p.mu.Unlock()
	}
}

// done is told by the acker that the publish of record id completed.
func (p *picker) done(id spool.ID) {
	if !p.liveFirst || id >= p.boundary {
		return
	}
	p.mu.Lock()
	size, ok := p.backlogIn[id]
	delete(p.backlogIn, id)
	p.backlogBytes -= size
	p.mu.Unlock()
	if !ok {
		return
	}
	select {
	case p.freed <- struct{}{}:
	default:
	}
}

// backlogRoom reports whether one more backlog record may go.
func (p *picker) backlogRoom() bool {
	count, bytes := p.win.shareOf(p.share)
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.backlogIn)
	return n == 0 || (n < count && (bytes == 0 || p.backlogBytes < bytes))
}

// next returns the next record to send, waiting until there is one or
// ctx ends.
func (p *picker) next(ctx context.Context) (spool.ID, spool.Message, error) {
	for {
		// The rate limit: nothing is handed out while the bucket is in
		// debt (budget.go).
		if err := p.budget.wait(ctx); err != nil {
			return 0, spool.Message{}, err
		}
		changed := p.sp.Changed()
		id, m, ok, retry, err := p.pick()
		if err != nil {
			return 0, m, err
		}
		if ok {
			return id, m, nil
		}
		var later <-chan time.Time
		var t *time.Timer
		if retry > 0 { // a lane waits for the next budget period
			t = time.NewTimer(retry)
			later = t.C
		}
		select {
		case <-changed:
		case <-p.freed:
		case <-later:
		case <-ctx.Done():
		}
		if t != nil {
			t.Stop()
		}
		if err := ctx.Err(); err != nil {
			return 0, m, err
		}
	}
}

// pick returns the next record if one may go now; if none may because a
// lane's period budget is used up, retry says when the next period starts.
func (p *picker) pick() (id spool.ID, m spool.Message, ok bool, retry time.Duration, err error) {
	for _, lane := range spool.ByPriority {
		if allowed, wait := p.budget.laneAllowed(lane); !allowed {
			if retry == 0 || wait < retry {
				retry = max(wait, time.Millisecond)
			}
			continue
		}
		if !p.liveFirst {
			if id, m, ok, err := p.head(lane, &p.all[lane], 0); ok || err != nil {
				return id, m, ok, 0, err
			}
			continue
		}
		p.live[lane] = max(p.live[lane], p.boundary-1)
		if id, m, ok, err := p.head(lane, &p.live[lane], 0); ok || err != nil {
			return id, m, ok, 0, err
		}
		if !p.backlogRoom() {
			continue
		}
		id, m, ok, err := p.head(lane, &p.backlog[lane], p.boundary)
		if ok {
			size := publishSize(m.Topic, len(m.Payload))
			p.mu.Lock()
			p.backlogIn[id] = size
			p.backlogBytes += size
			p.mu.Unlock()
		}
		if ok || err != nil {
			return id, m, ok, 0, err
		}
	}
	return 0, spool.Message{}, false, retry, nil
}

// head returns the lane's next record after *cursor (below limit, if
// limit is not 0), skipping the flows paho re-sent, and advances the
// cursor past it.
func (p *picker) head(lane spool.Lane, cursor *spool.ID, limit spool.ID) (spool.ID, spool.Message, bool, error) {
	for {
		id, m, ok, err := p.sp.Head(lane, *cursor)
		if err != nil || !ok || (limit != 0 && id >= limit) {
			return 0, m, false, err
		}
		*cursor = id
		if p.resent[id] {
			delete(p.resent, id)
			continue
		}
		return id, m, true, nil
	}
}
