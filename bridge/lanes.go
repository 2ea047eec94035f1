package bridge

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/edgegw/edgegw/bridge/spool"
)

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

// picker chooses the next spool record an uplink connection sends, over
// MQTT 3.1.1 and MQTT 5 alike (one picker per connection): the sender
// asks it (next) before it waits for room in the send window; the acker
// tells it when a publish completed (done) and, over MQTT 5, when the
// broker refused one for now (again). Order: lanes strictly by priority
// (high, normal, bulk); within a lane, the records refused for now first
// (after the refusal's backoff), then oldest first; with live-first,
// within a lane the records accepted during this connection (live)
// before the older ones (backlog), and the backlog in flight held to
// backlog_share of the window: of its bytes (max_inflight auto: the
// window the link allows right now), of its count and of its QoS 2
// window (max_inflight_qos2 over 3.1.1; over MQTT 5 the broker's Receive
// Maximum, which every QoS 1/2 publish takes), but at least one message.
// So live messages find room at once while the backlog drains with the
// rest.
type picker struct {
	sp        *spool.Spool
	win       *sendWindow
	budget    *budget // nil: no limit
	liveFirst bool
	share     float64
	quotaQoS  func(qos byte) byte // the QoS under which a publish takes room in win
	boundary  spool.ID            // the first ID accepted during this connection
	resent    map[spool.ID]bool   // flows re-sent on connect: not sent again

	// cursors: the last record picked per lane (all: FIFO; backlog and
	// live: live-first).
	all, backlog, live [spool.NumLanes]spool.ID

	mu           sync.Mutex
	backlogIn    map[spool.ID]inBacklog     // backlog records in flight
	backlogBytes int                        // their wire size
	backlogQuota int                        // how many of them hold a place of the QoS 2 window
	toResend     [spool.NumLanes][]spool.ID // per lane: records refused for now (again), sorted
	hold         time.Time                  // nothing is handed out before (the backoff after a refusal)
	wake         chan struct{}              // a backlog record completed, one is to be sent again, or the spool changed; capacity 1
}

// inBacklog is what a backlog record in flight holds of the window.
type inBacklog struct {
	size  int
	quota bool // a place of the QoS 2 window
}

// newPicker makes the picker of a connection that starts with the spool's
// records up to now as its backlog; quotaQoS is the QoS under which a
// publish takes room in win (over MQTT 5 every QoS 1/2 publish takes the
// receive quota).
func newPicker(sp *spool.Spool, drain string, share float64, win *sendWindow, quotaQoS func(byte) byte) *picker {
	return &picker{
		sp:        sp,
		win:       win,
		liveFirst: drain == DrainLiveFirst,
		share:     share,
		quotaQoS:  quotaQoS,
		boundary:  sp.LastID() + 1,
		resent:    make(map[spool.ID]bool),
		backlogIn: make(map[spool.ID]inBacklog),
		wake:      make(chan struct{}, 1),
	}
}

// sameQoS is the QoS under which an MQTT 3.1.1 publish takes room in the
// send window: its own.
func sameQoS(qos byte) byte { return qos }

// quotaQoS is the QoS under which a publish takes room in the send
// window over MQTT 5: the window's QoS 2 count is the broker's receive
// quota [MQTT-4.9.0-1], which QoS 1 and QoS 2 publishes take alike
// [MQTT-4.9.0-2].
func quotaQoS(qos byte) byte {
	if qos > 0 {
		return 2
	}
	return 0
}

// autoBacklogBytes is the smallest share of an automatic window's bytes
// the backlog may hold in flight, whatever backlog_share says. The window
// is learned from what the link carries (window.go), and it only learns
// more if more is in flight than it estimates the link holds: a backlog
// held to 25 % of a window of 2 bandwidth-delay products (1 BDP in
// startup's 4) never filled the link, so the window never grew past where
// it started, and a 100,000-message backlog drained at 8-10 % of a 2
// Mbit/s link (make bench-lanes). Three quarters of the window is 1.5
// BDP once the link is full: the link stays busy while the round trip is
// up to half again its floor (a loaded broker or machine; one BDP was not
// enough: 21-67 % of the link with acks up to a round trip late), and live
// messages find the last quarter free; in startup it is 3 BDP, so the
// estimate grows every round trip.
const autoBacklogBytes = 0.75

// shareOf returns the backlog's share of the window's current limits:
// count, bytes (0: not bounded by bytes, a fixed max_inflight; at least
// autoBacklogBytes of an automatic window) and QoS 2 window.
func (w *sendWindow) shareOf(share float64) (count, bytes, qos2 int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	count = max(1, int(share*float64(w.maxCount)))
	qos2 = max(1, int(share*float64(w.maxQoS2)))
	if w.auto {
		bytes = max(1, int(max(share, autoBacklogBytes)*float64(w.cwnd)))
	}
	return count, bytes, qos2
}

// resume records a flow re-sent on connect, with the room st it took in
// the window: it is in flight (a backlog one) and the picker skips it.
func (p *picker) resume(id spool.ID, st stamp) {
	p.resent[id] = true
	if p.liveFirst && id < p.boundary {
		p.mu.Lock()
		p.takeLocked(id, inBacklog{size: st.size, quota: st.qos == 2})
		p.mu.Unlock()
	}
}

// takeLocked counts backlog record id in flight. Caller holds mu.
func (p *picker) takeLocked(id spool.ID, e inBacklog) {
	p.backlogIn[id] = e
	p.backlogBytes += e.size
	if e.quota {
		p.backlogQuota++
	}
}

// done is told by the acker (or, for a publish complete when written or
// never sent, the sender) that the publish of record id completed.
func (p *picker) done(id spool.ID) {
	if !p.liveFirst || id >= p.boundary {
		return
	}
	p.mu.Lock()
	e, ok := p.backlogIn[id]
	if ok {
		delete(p.backlogIn, id)
		p.backlogBytes -= e.size
		if e.quota {
			p.backlogQuota--
		}
	}
	p.mu.Unlock()
	if ok {
		p.signal()
	}
}

// again schedules record id of lane, refused by the broker for now
// (MQTT 5), to be sent again first in its lane, and holds every pick back
// until hold (the refusal's backoff). Call done for it first.
func (p *picker) again(id spool.ID, lane spool.Lane, hold time.Time) {
	p.mu.Lock()
	q := p.toResend[lane]
	k, found := slices.BinarySearch(q, id)
	if !found {
		p.toResend[lane] = slices.Insert(q, k, id)
	}
	if hold.After(p.hold) {
		p.hold = hold
	}
	p.mu.Unlock()
	p.signal()
}

func (p *picker) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// held returns how long picks are still held back after a refusal.
func (p *picker) held() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return time.Until(p.hold)
}

// backlogRoom reports whether one more backlog record may go; quota: it
// would take a place of the QoS 2 window.
func (p *picker) backlogRoom(quota bool) bool {
	count, bytes, qos2 := p.win.shareOf(p.share)
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.backlogIn)
	return n == 0 || (n < count && (bytes == 0 || p.backlogBytes < bytes) && (!quota || p.backlogQuota < qos2))
}

// stop takes the picker off the spool's wake-up list (its sender ended).
func (p *picker) stop() { p.sp.ForgetWake(p.wake) }

// next returns the next record to send, waiting until there is one or
// ctx ends.
func (p *picker) next(ctx context.Context) (spool.ID, spool.Message, error) {
	for {
		// The rate limit: nothing is handed out while the bucket is in
		// debt (budget.go).
		if err := p.budget.wait(ctx); err != nil {
			return 0, spool.Message{}, err
		}
		if d := p.held(); d > 0 { // the backoff after a refusal (MQTT 5)
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return 0, spool.Message{}, ctx.Err()
			}
			continue
		}
		// Woken on wake by the spool's next commit, as on a completion
		// (a channel of Changed's per commit was garbage, issue 16).
		p.sp.WakeOnChange(p.wake)
		id, m, ok, retry, err := p.pick()
		if err != nil {
			return 0, m, err
		}
		if ok {
			return id, m, nil
		}
		// Nothing may go now (an empty spool, the backlog at its share, a
		// budget): what is sent next was not held back by the window.
		p.win.setAppLimited()
		var later <-chan time.Time
		var t *time.Timer
		if retry > 0 { // a lane waits for the next budget period
			t = time.NewTimer(retry)
			later = t.C
		}
		select {
		case <-p.wake:
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
			if id, m, ok, err = p.refused(lane, 0, 0); ok || err != nil {
				return id, m, ok, 0, err
			}
			if id, m, ok, err = p.head(lane, &p.all[lane], 0); ok {
				p.all[lane] = id
			}
			if ok || err != nil {
				return id, m, ok, 0, err
			}
			continue
		}
		p.live[lane] = max(p.live[lane], p.boundary-1)
		if id, m, ok, err = p.refused(lane, p.boundary, 0); ok || err != nil {
			return id, m, ok, 0, err
		}
		if id, m, ok, err = p.head(lane, &p.live[lane], 0); ok {
			p.live[lane] = id
		}
		if ok || err != nil {
			return id, m, ok, 0, err
		}
		if !p.backlogRoom(false) {
			continue
		}
		if id, m, ok, err = p.refused(lane, 0, p.boundary); err != nil {
			return id, m, ok, 0, err
		}
		fromHead := false
		if !ok {
			if id, m, ok, err = p.head(lane, &p.backlog[lane], p.boundary); err != nil || !ok {
				if err != nil {
					return id, m, ok, 0, err
				}
				continue
			}
			fromHead = true
		}
		quota := p.quotaQoS(m.QoS) == 2
		if !p.backlogRoom(quota) {
			continue // not taken: the same record is looked at next time
		}
		p.mu.Lock()
		p.takeLocked(id, inBacklog{size: publishSize(m.Topic, len(m.Payload)), quota: quota})
		if !fromHead {
			p.unqueueLocked(lane, id)
		}
		p.mu.Unlock()
		if fromHead {
			p.backlog[lane] = id
		}
		return id, m, true, 0, nil
	}
	return 0, spool.Message{}, false, retry, nil
}

// refused returns the oldest record of lane to be sent again (again)
// with an ID in [lo, hi) (hi 0: no bound). A live one is taken off the
// queue at once; the caller takes a backlog one (unqueueLocked) once it
// has room for it. A record gone meanwhile (overflow, expiry) is
// forgotten.
func (p *picker) refused(lane spool.Lane, lo, hi spool.ID) (spool.ID, spool.Message, bool, error) {
	for {
		p.mu.Lock()
		q := p.toResend[lane]
		k, _ := slices.BinarySearch(q, lo)
		if k == len(q) || (hi != 0 && q[k] >= hi) {
			p.mu.Unlock()
			return 0, spool.Message{}, false, nil
		}
		id := q[k]
		p.mu.Unlock()
		// Get, not Peek(id-1, 1): the record after a gone one may be in
		// flight, and Peek would drop it if it expired meanwhile.
		m, found, err := p.sp.Get(id)
		if err != nil {
			return 0, spool.Message{}, false, err
		}
		if !found || hi == 0 {
			p.mu.Lock()
			p.unqueueLocked(lane, id)
			p.mu.Unlock()
		}
		if found {
			return id, m, true, nil
		}
	}
}

// unqueueLocked takes id off lane's queue of records to send again.
// Caller holds mu.
func (p *picker) unqueueLocked(lane spool.Lane, id spool.ID) {
	if k, found := slices.BinarySearch(p.toResend[lane], id); found {
		p.toResend[lane] = slices.Delete(p.toResend[lane], k, k+1)
	}
}

// head returns the lane's next record after *cursor (below limit, if
// limit is not 0), passing over the flows re-sent on connect: they are in
// flight, and the spool must not read them (it would drop one whose
// expiry passed meanwhile, although it was sent in time and its ack is
// on the way). The caller moves the cursor past the record it takes.
func (p *picker) head(lane spool.Lane, cursor *spool.ID, limit spool.ID) (spool.ID, spool.Message, bool, error) {
	id, m, ok, err := p.sp.HeadSkipping(lane, *cursor, p.isResent)
	if err != nil || !ok || (limit != 0 && id >= limit) {
		return 0, m, false, err
	}
	return id, m, true, nil
}

// isResent reports whether record id was re-sent on connect (resume).
// Called by the spool under its lock, on the sender's goroutine (resent is
// the sender's only).
func (p *picker) isResent(id spool.ID) bool { return p.resent[id] }
