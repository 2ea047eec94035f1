package bridge

import (
	"context"
	"testing"
	"time"
)

// simLink drives a sendWindow over a simulated link (no wall clock): a
// bottleneck of rate bytes/s with a FIFO queue, and a round trip of rtt
// besides. The sender always has a backlog of size-byte publishes.
type simLink struct {
	rate     float64
	rtt      time.Duration
	size     int
	limit    func(w *sendWindow) int // bytes the sender keeps in flight at most, besides the window (nil: none)
	jitter   float64                 // acks come up to this share of rtt late, varying (a busy broker, a loaded machine)
	sent     int                     // publishes sent, for the jitter's pattern
	now      time.Time
	free     time.Time // when the bottleneck is free again
	inflight []simPkt  // in ack order (FIFO link)

	acked        int           // bytes acknowledged
	maxBytes     int           // most bytes in flight
	maxQueue     time.Duration // longest wait in the bottleneck's queue
	steadyBytes  int           // most bytes in flight once the window has left startup
	steadyWindow int
}

type simPkt struct {
	st  stamp
	ack time.Time
}

func (l *simLink) run(t *testing.T, w *sendWindow, d time.Duration) {
	t.Helper()
	end := l.now.Add(d)
	for l.now.Before(end) {
		for { // send while the window has room
			// As the sender does: waiting for room in the window clears
			// app-limited (acquire), waiting for something it may send
			// sets it (the picker).
			w.mu.Lock()
			ok := w.roomLocked(l.size, 1)
			if !ok {
				w.appLimited = false
			}
			w.mu.Unlock()
			if ok && l.limit != nil {
				_, inflight, _, _ := w.snapshot()
				if ok = inflight == 0 || inflight+l.size <= l.limit(w); !ok {
					w.setAppLimited()
				}
			}
			if !ok {
				break
			}
			st := w.add(l.size, 1, l.now)
			start := l.now
			if l.free.After(start) {
				start = l.free
			}
			l.maxQueue = max(l.maxQueue, start.Sub(l.now))
			l.free = start.Add(time.Duration(float64(l.size) / l.rate * float64(time.Second)))
			ack := l.free.Add(l.rtt + time.Duration(l.jitter*float64(l.rtt)*float64(l.sent%7)/6))
			if n := len(l.inflight); n > 0 && ack.Before(l.inflight[n-1].ack) {
				ack = l.inflight[n-1].ack // acks stay in order
			}
			l.sent++
			l.inflight = append(l.inflight, simPkt{st, ack})
			_, b, _, _ := w.snapshot()
			l.maxBytes = max(l.maxBytes, b)
			if w.full {
				l.steadyBytes = max(l.steadyBytes, b)
			}
		}
		if len(l.inflight) == 0 {
			t.Fatal("window allows nothing with nothing in flight")
		}
		p := l.inflight[0]
		l.inflight = l.inflight[1:]
		l.now = p.ack
		w.release(p.st, l.now)
		l.acked += p.st.size
		if w.full {
			_, _, cw, _ := w.snapshot()
			l.steadyWindow = max(l.steadyWindow, cw)
		}
	}
}

// TestWindowFillsTheLink: over links from 1 Mbit/s to 100 Mbit/s and round
// trips from 1 ms to 600 ms, the automatic window carries at least 90% of
// the link's rate, leaves startup, and then keeps at most about 2 BDP in
// flight (the bottleneck's queue at most about one round trip).
func TestWindowFillsTheLink(t *testing.T) {
	for _, tc := range []struct {
		name string
		rate float64 // bytes/s
		rtt  time.Duration
		size int // bytes per publish
	}{
		{"1Mbit-50ms", 125e3, 50 * time.Millisecond, 100},
		{"1Mbit-300ms", 125e3, 300 * time.Millisecond, 100},
		{"10Mbit-50ms", 1.25e6, 50 * time.Millisecond, 100},
		{"10Mbit-300ms", 1.25e6, 300 * time.Millisecond, 100},
		// 100-byte publishes would meet autoMaxCount first (8192 per
		// 600 ms, 1.4 MB/s): a documented cap.
		{"100Mbit-600ms", 12.5e6, 600 * time.Millisecond, 1000},
		{"100Mbit-1ms", 12.5e6, time.Millisecond, 100},
		{"64kbit-600ms", 8e3, 600 * time.Millisecond, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Unix(1e9, 0)
			w := newSendWindow(autoMaxCount, 20, true, start)
			l := &simLink{rate: tc.rate, rtt: tc.rtt, size: tc.size, now: start, free: start}
			d := 40*tc.rtt + 5*time.Second
			l.run(t, w, d)
			bdp := int(tc.rate * tc.rtt.Seconds())
			use := float64(l.acked) / (tc.rate * d.Seconds())
			_, _, cwnd, minRTT := w.snapshot()
			t.Logf("link use %.0f%%, BDP %d B, window %d B (steady max %d), in flight max %d B (steady %d), queue max %s, min rtt %s",
				100*use, bdp, cwnd, l.steadyWindow, l.maxBytes, l.steadyBytes, l.maxQueue, minRTT)
			if !w.full {
				t.Errorf("never left startup")
			}
			// Startup takes a few round trips of the run: over the rest the
			// link is full.
			if use < 0.9 {
				t.Errorf("carried %.0f%% of the link, want at least 90%%", 100*use)
			}
			if lim := max(windowFloor, 2*bdp) + bdp/2 + 2*tc.size; l.steadyBytes > lim {
				t.Errorf("after startup %d bytes in flight, want at most about 2 BDP (%d)", l.steadyBytes, lim)
			}
			if lim := max(windowInit, (startupGain+1)*bdp+2*tc.size); l.maxBytes > lim {
				t.Errorf("%d bytes in flight at most, want at most %d (startup gain + 1 BDP)", l.maxBytes, lim)
			}
		})
	}
}

// TestWindowHeldToAQuarter: a sender that keeps only a quarter of the
// window in flight, after it filled the link, does not shrink the window:
// its samples measure the sender, not the link (before, each round trip's
// window was half the last one's, down to the floor).
func TestWindowHeldToAQuarter(t *testing.T) {
	for _, tc := range []struct {
		name string
		rate float64
		rtt  time.Duration
	}{
		{"2Mbit-50ms", 250e3, 50 * time.Millisecond},
		{"10Mbit-300ms", 1.25e6, 300 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Unix(1e9, 0)
			w := newSendWindow(autoMaxCount, 20, true, start)
			l := &simLink{rate: tc.rate, rtt: tc.rtt, size: 100, now: start, free: start}
			l.run(t, w, 40*tc.rtt)
			l.limit = func(w *sendWindow) int { return w.cwnd / 4 }
			l.run(t, w, 100*tc.rtt)
			bdp := int(tc.rate * tc.rtt.Seconds())
			_, _, cwnd, _ := w.snapshot()
			t.Logf("held to 25%%: window %d B, BDP %d B", cwnd, bdp)
			if cwnd < bdp {
				t.Errorf("window %d B fell below one BDP (%d B): the quarter shrank it", cwnd, bdp)
			}
		})
	}
}

// TestBacklogShareFillsTheLink: a live-first backlog with backlog_share
// 25 % and nothing live, held to its share of the window (shareOf) from
// the connection's first publish, with acks up to 30 % of a round trip
// late, fills the link: before, it drained at
// 8-10 % of a 2 Mbit/s, 50 ms link (make bench-lanes), because a window
// learned from what a quarter of it carried never grew.
func TestBacklogShareFillsTheLink(t *testing.T) {
	for _, tc := range []struct {
		name string
		rate float64
		rtt  time.Duration
	}{
		{"2Mbit-50ms", 250e3, 50 * time.Millisecond},
		{"10Mbit-300ms", 1.25e6, 300 * time.Millisecond},
		{"100Mbit-5ms", 12.5e6, 5 * time.Millisecond},
		{"64kbit-600ms", 8e3, 600 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Unix(1e9, 0)
			w := newSendWindow(autoMaxCount, 20, true, start)
			l := &simLink{rate: tc.rate, rtt: tc.rtt, size: 100, now: start, free: start, jitter: 0.3,
				limit: func(w *sendWindow) int { _, b, _ := w.shareOf(0.25); return b }}
			d := 40*tc.rtt + 5*time.Second
			l.run(t, w, d)
			use := float64(l.acked) / (tc.rate * d.Seconds())
			_, _, cwnd, _ := w.snapshot()
			t.Logf("backlog share 25%%: link use %.0f%%, window %d B, BDP %d B, queue max %s", 100*use, cwnd, int(tc.rate*tc.rtt.Seconds()), l.maxQueue)
			if use < 0.85 {
				t.Errorf("the backlog carried %.0f%% of the link, want at least 85%%", 100*use)
			}
		})
	}
}

// TestWindowCaps: a fixed window and the QoS 2 window hold whatever the
// link; a publish larger than the whole window goes alone.
func TestWindowCaps(t *testing.T) {
	now := time.Unix(1e9, 0)
	w := newSendWindow(3, 2, false, now)
	var sts []stamp
	for range 3 {
		w.mu.Lock()
		ok := w.roomLocked(10, 1)
		w.mu.Unlock()
		if !ok {
			t.Fatal("no room below max_inflight")
		}
		sts = append(sts, w.add(10, 1, now))
	}
	w.mu.Lock()
	if w.roomLocked(10, 1) {
		t.Error("room above max_inflight")
	}
	w.mu.Unlock()
	for _, st := range sts {
		w.release(st, now)
	}

	q2 := newSendWindow(autoMaxCount, 2, true, now)
	a, b := q2.add(10, 2, now), q2.add(10, 2, now)
	q2.mu.Lock()
	if q2.roomLocked(10, 2) || q2.roomLocked(10, 1) || !q2.roomLocked(10, 0) {
		t.Error("QoS 2 window full: want no room for QoS 2 nor QoS 1 (mosquitto's quota counts it), room for QoS 0")
	}
	q2.mu.Unlock()
	q2.release(a, now)
	q2.release(b, now)

	big := newSendWindow(autoMaxCount, 20, true, now)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	st, ok := big.acquire(ctx, 10*windowInit, 1)
	if !ok {
		t.Fatal("a publish larger than the window never goes with nothing in flight")
	}
	big.mu.Lock()
	if big.roomLocked(1, 1) {
		t.Error("room next to a publish larger than the window")
	}
	big.mu.Unlock()
	big.release(st, now.Add(time.Millisecond))
}

// TestMaxFilter: the windowed maximum forgets a sample once the window has
// passed it.
func TestMaxFilter(t *testing.T) {
	var f maxFilter
	t0 := time.Unix(1e9, 0)
	win := time.Second
	f.update(100, t0, win)
	f.update(50, t0.Add(300*time.Millisecond), win)
	f.update(40, t0.Add(600*time.Millisecond), win)
	if got := f.get(); got != 100 {
		t.Fatalf("max %v, want 100", got)
	}
	f.update(30, t0.Add(1100*time.Millisecond), win)
	if got := f.get(); got != 50 && got != 40 {
		t.Fatalf("after the window max %v, want a later sample (50 or 40)", got)
	}
	f.update(10, t0.Add(5*time.Second), win)
	if got := f.get(); got != 10 {
		t.Fatalf("long after max %v, want 10", got)
	}
}
