package bridge

// Design note: how much is in flight upstream (issue 20). A fixed window
// of N unacknowledged publishes drains at N / RTT whatever the link
// carries: 32 over a 50 ms round trip is 640 msg/s, a 20,000-message
// backlog takes half a minute, and every live reading waits behind it. So
// with max_inflight "auto" (the default) the window is sized by the link,
// the way a delay-aware congestion control sizes its window (BBR's
// estimate, simplified):
//
//   - every acknowledged publish gives a delivery-rate sample: the bytes
//     acknowledged since it was sent divided by the time since the ack that
//     preceded its send;
//   - the round-trip floor is the smallest send-to-ack time seen on this
//     connection (a new connection may take another route: it starts over);
//   - the window in bytes is a gain times the bandwidth-delay product:
//     gain x (the highest recent rate sample) x (the round-trip floor).
//
// While nothing queues on the path the rate samples are window/RTT, so the
// window grows by the gain every round trip. It starts at windowInit with
// gain 8 (startup: a 20,000-reading backlog needs about 4 round trips, 5
// with gain 4 and 7 with doubling; mosquitto's bridge, which does not
// bound what it sends, drained it 5-10 % faster than gain 4 over 50 and
// 300 ms, make bench-drain); once the rate has not grown by a quarter in 3
// round trips the link is full, and the gain drops to 2 for the rest of
// the connection: the window settles at 2 BDP, the link stays busy while
// at most one BDP waits in the bottleneck's queue, which bounds the round
// trip (and so live latency, the wait of a PINGREQ behind the publishes,
// and the ack watchdog's view) at about twice its floor; in startup, at
// most 8 times. The window never goes below windowFloor bytes, and one
// publish is always allowed when nothing is in flight, however large.
//
// The window only adds a bound: the count cap (max_inflight when the
// operator sets a number, autoMaxCount otherwise) and the QoS 2 window
// (max_inflight_qos2: the upstream's receive quota, which a 3.1.1 broker
// cannot report exceeded) hold as before. A QoS 1 flow does not hold
// mosquitto's quota (it is complete at its PUBACK), so QoS 1 uses what the
// link carries; it only needs one free place as it arrives (roomLocked).

import (
	"context"
	"sync"
	"time"
)

// Limits of the automatic window.
const (
	// autoMaxCount caps the publishes in flight with max_inflight auto:
	// far below the 65535 packet ids, and a bound
	// on what a reconnect may send twice (QoS 1) and on the memory held by
	// unacknowledged publishes.
	autoMaxCount = 8192
	// autoMaxBytes caps the bytes in flight with max_inflight auto
	// (100 Mbit/s over a 600 ms round trip needs 7.5 MB).
	autoMaxBytes = 16 << 20
	// windowInit is the window in bytes before the first ack of a
	// connection: about 600 readings of 100 bytes. The network does not
	// see it as a burst: what TCP's own congestion window does not let
	// out yet waits in the socket's buffer.
	windowInit = 64 << 10
	// windowFloor is the smallest window in bytes.
	windowFloor = 8 << 10
	// rateWindowMin is the shortest time a rate sample is remembered
	// (otherwise 10 round trips).
	rateWindowMin = time.Second
	// startupGain and steadyGain multiply the bandwidth-delay product.
	startupGain = 8
	steadyGain  = 2
	// fullGrowth is the growth of the rate per round trip below which a
	// round counts as not growing; fullRounds such rounds end startup.
	fullGrowth = 1.25
	fullRounds = 3
)

// publishSize is the bytes a publish of topic and payload takes on the
// wire, close enough for the window: fixed header (at most 5), topic
// length, topic, packet id, payload.
func publishSize(topic string, payload int) int { return 5 + 2 + len(topic) + 2 + payload }

// sendWindow bounds a session's publishes in flight: the sender acquires
// before each publish, the acker releases in send order. It lives as long
// as one connection.
type sendWindow struct {
	maxCount int  // max_inflight, or autoMaxCount
	maxQoS2  int  // max_inflight_qos2, at most maxCount
	auto     bool // size by the link (bytes), within maxCount

	mu sync.Mutex
	// wake is closed (and set to nil) when room may have appeared. It is
	// made only when the sender waits (under mu, where it found no room),
	// not for every release: at a sensor's rate the sender almost never
	// waits, and a channel per ack was a third of the bridge's garbage.
	wake   chan struct{}
	count  int
	qos2   int
	bytes  int
	cwnd   int           // window in bytes (auto)
	acked  int64         // bytes acknowledged on this connection
	ackAt  time.Time     // when the last of them was
	minRTT time.Duration // round-trip floor; 0 until the first ack
	rate   maxFilter     // delivery rate, bytes/s
	// appLimited: the sender last waited for something to send (the
	// picker), not for room here; see stamp.appLimited.
	appLimited bool

	// Startup: a round ends when a publish sent after it began is acked.
	full       bool    // the link is full: steadyGain from now on
	roundEnd   int64   // acked bytes at which the current round ends
	fullRate   float64 // the rate the next rounds must beat by fullGrowth
	flatRounds int     // rounds in a row that did not
}

func newSendWindow(maxCount, maxQoS2 int, auto bool, now time.Time) *sendWindow {
	return &sendWindow{
		maxCount: maxCount, maxQoS2: min(maxQoS2, maxCount), auto: auto,
		cwnd: windowInit, ackAt: now,
	}
}

// stamp is what the window recorded about a publish when it was sent.
type stamp struct {
	size  int
	qos   byte
	sent  time.Time
	acked int64     // the window's acked bytes at the send
	ackAt time.Time // and when the last of them was
	// appLimited: since the sender last waited for room in the window,
	// it has waited for something to send, so the sender, not the link,
	// set the pace (learnLocked).
	appLimited bool
}

// roomLocked reports whether a publish of size bytes at qos fits.
//
// A QoS 1 publish also waits while the QoS 2 window is full: mosquitto's
// receive quota counts a QoS 1 message as it arrives, and with the quota
// held by QoS 2 flows it answers PUBACK (over MQTT 3.1.1 without the
// 0x97 reason code) and discards the message. Measured against Debian
// mosquitto 2.0.11: with 20 QoS 2 flows unreleased a QoS 1 message is
// acked and never delivered, with 19 it is delivered; QoS 0 is delivered
// either way. The bridge's count of QoS 2 flows (until PUBCOMP) is never
// below mosquitto's (until PUBREL), so below max_inflight_qos2 here the
// QoS 1 message finds room there.
func (w *sendWindow) roomLocked(size int, qos byte) bool {
	if w.count >= w.maxCount || (qos > 0 && w.qos2 >= w.maxQoS2) {
		return false
	}
	return !w.auto || w.bytes == 0 || w.bytes+size <= w.cwnd
}

// acquire waits for room for a publish of size bytes at qos and takes it;
// false if ctx ended first.
func (w *sendWindow) acquire(ctx context.Context, size int, qos byte) (stamp, bool) {
	for {
		w.mu.Lock()
		if w.roomLocked(size, qos) {
			st := w.takeLocked(size, qos, time.Now())
			w.mu.Unlock()
			return st, true
		}
		w.appLimited = false // the window holds the sender back: samples measure the link
		if w.wake == nil {
			w.wake = make(chan struct{})
		}
		wake := w.wake
		w.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return stamp{}, false
		}
	}
}

// setAppLimited records that the sender waits for something it may send
// (the picker): until it next waits for room here, what it sends does not
// fill the window, and the samples of those publishes are app-limited.
func (w *sendWindow) setAppLimited() {
	w.mu.Lock()
	w.appLimited = true
	w.mu.Unlock()
}

// add takes room for a publish already on the wire (the engine re-sent
// it on connect), whether it fits or not.
func (w *sendWindow) add(size int, qos byte, now time.Time) stamp {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.takeLocked(size, qos, now)
}

func (w *sendWindow) takeLocked(size int, qos byte, now time.Time) stamp {
	w.count++
	w.bytes += size
	if qos == 2 {
		w.qos2++
	}
	return stamp{size: size, qos: qos, sent: now, acked: w.acked, ackAt: w.ackAt, appLimited: w.appLimited}
}

// release frees the room of a publish complete at now (acknowledged
// upstream; QoS 0: written) and, with an automatic window, learns from
// the round trip of an acknowledged one. A QoS 0 publish is complete when
// written: its "round trip" says nothing about the link.
func (w *sendWindow) release(st stamp, now time.Time) {
	w.mu.Lock()
	w.count--
	w.bytes -= st.size
	if st.qos == 2 {
		w.qos2--
	}
	if w.auto && st.qos > 0 {
		w.learnLocked(st, now)
	}
	if w.wake != nil { // the sender waits
		close(w.wake)
		w.wake = nil
	}
	w.mu.Unlock()
}

// learnLocked updates the round-trip floor, the delivery rate and the
// window from one acknowledged publish.
func (w *sendWindow) learnLocked(st stamp, now time.Time) {
	w.acked += int64(st.size)
	w.ackAt = now
	if rtt := now.Sub(st.sent); rtt > 0 && (w.minRTT == 0 || rtt < w.minRTT) {
		w.minRTT = rtt
	}
	if w.minRTT == 0 {
		return
	}
	// A sample of a publish sent while the sender, not the window, set
	// the pace (it last waited for something to send, not for room)
	// measures what the sender offered, not what the link carries (BBR's
	// app-limited samples): it may raise the rate, never lower it. Otherwise a sender that does not fill the window shrinks
	// it: a live-first backlog held to half the window (lanes.go) carries
	// one estimated BDP per round trip, less than the link once anything
	// queues, and each round trip's window was smaller than the last, down
	// to the floor (a 100,000-message backlog drained at 8-10 % of a 2
	// Mbit/s link, make bench-lanes; a sender that caught up with a quiet
	// spool did the same).
	if el := now.Sub(st.ackAt); el > 0 {
		rate := float64(w.acked-st.acked) / el.Seconds()
		if !st.appLimited || rate >= w.rate.get() {
			w.rate.update(rate, now, max(rateWindowMin, 10*w.minRTT))
		}
	}
	if st.acked >= w.roundEnd { // a round trip has passed
		w.roundEnd = w.acked
		w.endRoundLocked()
	}
	gain := float64(startupGain)
	if w.full {
		gain = steadyGain
	}
	bdp := w.rate.get() * w.minRTT.Seconds()
	w.cwnd = min(autoMaxBytes, max(windowFloor, int(gain*bdp)))
}

// endRoundLocked ends startup once the rate has stopped growing.
func (w *sendWindow) endRoundLocked() {
	if w.full {
		return
	}
	if r := w.rate.get(); r >= w.fullRate*fullGrowth {
		w.fullRate, w.flatRounds = r, 0
		return
	}
	w.flatRounds++
	w.full = w.flatRounds >= fullRounds
}

// snapshot returns the window's state for Stats: publishes and bytes in
// flight, the window in bytes (0 if fixed) and the round-trip floor.
func (w *sendWindow) snapshot() (count, bytes, cwnd int, minRTT time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.auto {
		cwnd = w.cwnd
	}
	return w.count, w.bytes, cwnd, w.minRTT
}

// maxFilter is a windowed maximum (Kathleen Nichols' algorithm, as in
// Linux's lib/minmax.c): the best, second best and third best samples of
// the window's thirds, so the maximum of the last window is kept in O(1).
type maxFilter struct {
	s [3]sample
}

type sample struct {
	v  float64
	at time.Time
}

func (f *maxFilter) get() float64 { return f.s[0].v }

func (f *maxFilter) update(v float64, now time.Time, win time.Duration) {
	n := sample{v, now}
	if v >= f.s[0].v || now.Sub(f.s[2].at) > win { // a new maximum, or nothing in the window
		f.s = [3]sample{n, n, n}
		return
	}
	if v >= f.s[1].v {
		f.s[1], f.s[2] = n, n
	} else if v >= f.s[2].v {
		f.s[2] = n
	}
	// Expire: the best is older than the window, or the second and third
	// are stale for their thirds.
	switch dt := now.Sub(f.s[0].at); {
	case dt > win:
		f.s[0], f.s[1], f.s[2] = f.s[1], f.s[2], n
		if now.Sub(f.s[0].at) > win {
			f.s[0], f.s[1] = f.s[1], f.s[2]
		}
	case f.s[1].at.Equal(f.s[0].at) && dt > win/4:
		f.s[1], f.s[2] = n, n
	case f.s[2].at.Equal(f.s[1].at) && dt > win/2:
		f.s[2] = n
	}
}
