package status

import (
	"context"
	"sync"
	"time"

	"github.com/edgegw/edgegw/bridge"
)

// Default history: one sample every 10 s for the last hour.
const (
	DefaultInterval = 10 * time.Second
	DefaultSamples  = 360
)

// rateWindow is how far back the rates shown as numbers look.
const rateWindow = time.Minute

// stallSamples is how many sampling intervals (30 s at the default) a
// message may wait in a connected bridge's spool before the page says the
// backlog is not draining. An uplink that keeps up always has a message or
// two in its current batch window, so "backlog > 0" alone is no alarm.
const stallSamples = 3

// The backlog states (Bridge.BacklogState), in the order rates decides them.
const (
	BacklogEmpty       = "empty"        // nothing in the spool
	BacklogKeepingUp   = "keeping_up"   // connected; nothing has waited a stall window
	BacklogDraining    = "draining"     // shrinking over the last minute: TimeToEmpty is set
	BacklogUnknown     = "unknown"      // connected, not shrinking, no sample a stall window old yet
	BacklogNotDraining = "not_draining" // the alarm: uplink down, or messages waiting a stall window
)

// sample is one bridge's counters at one time.
type sample struct {
	t            time.Time
	acked        uint64 // acknowledged upstream
	dropped      uint64 // left the spool without an ack: dropped by it, or refused upstream for good
	backlog      int64  // messages in the spool
	backlogBytes int64
}

func sampleOf(t time.Time, st bridge.Stats) sample {
	return sample{t: t, acked: st.Acked, dropped: st.SpoolDropped + st.UpstreamDropped, backlog: st.SpoolMessages, backlogBytes: st.SpoolBytes}
}

// left is how many messages left the spool between a and b.
func left(a, b sample) float64 { return float64(b.acked-a.acked) + float64(b.dropped-a.dropped) }

// entered is how many messages entered the spool between a and b: what
// left it plus what it grew by.
func entered(a, b sample) float64 { return left(a, b) + float64(b.backlog-a.backlog) }

// ring is a fixed-size circular buffer of samples, oldest first.
type ring struct {
	buf   []sample
	start int
	n     int
}

func (r *ring) add(s sample) {
	if r.n < len(r.buf) {
		r.buf[(r.start+r.n)%len(r.buf)] = s
		r.n++
		return
	}
	r.buf[r.start] = s
	r.start = (r.start + 1) % len(r.buf)
}

func (r *ring) at(i int) sample { return r.buf[(r.start+i)%len(r.buf)] }

// History keeps the last Samples samples of every bridge, taken every
// Interval by Run: a bounded amount of memory (about 50 B a sample, 18 KiB
// a bridge at the defaults), filled by one goroutine.
type History struct {
	Interval time.Duration // 0 = DefaultInterval
	Samples  int           // per bridge; 0 = DefaultSamples

	src   *Sources
	mu    sync.Mutex
	rings map[string]*ring
}

// NewHistory returns a History of src's bridges.
func NewHistory(src *Sources) *History {
	return &History{src: src, rings: make(map[string]*ring)}
}

func (h *History) interval() time.Duration {
	if h.Interval > 0 {
		return h.Interval
	}
	return DefaultInterval
}

// Run samples every bridge at once and then every Interval until ctx is
// cancelled; it returns nil then.
func (h *History) Run(ctx context.Context) error {
	t := time.NewTicker(h.interval())
	defer t.Stop()
	for {
		h.sample(time.Now())
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// sample records every bridge's counters at now.
func (h *History) sample(now time.Time) {
	for _, b := range h.src.Bridges {
		s := sampleOf(now, b.Stats())
		h.mu.Lock()
		r := h.rings[b.Name()]
		if r == nil {
			n := h.Samples
			if n <= 0 {
				n = DefaultSamples
			}
			r = &ring{buf: make([]sample, n)}
			h.rings[b.Name()] = r
		}
		r.add(s)
		h.mu.Unlock()
	}
}

// rates is what the history says of one bridge's spool.
type rates struct {
	in, out *float64 // messages in and acked per second; nil without an earlier sample
	empty   *float64 // time to empty in seconds: 0 for an empty backlog, nil when it does not shrink
	state   string   // Backlog*
}

// rates compares live with the oldest sample of the last rateWindow (or
// the newest before it, when sampling is slower) for the rates and the
// time to empty at the net rate. The state says whether the backlog is an
// alarm: a connected bridge keeps up when every message that was in the
// spool at the newest sample a stall window old has left it since (the
// spool sends oldest first, so none has waited longer than about that
// window); it is not draining when it neither keeps up nor shrinks.
func (h *History) rates(name string, live sample, connected bool) rates {
	var r rates
	if live.backlog == 0 {
		r.empty = new(float64)
	}
	stall := stallSamples * h.interval()
	h.mu.Lock()
	rg := h.rings[name]
	var base, old sample
	found, foundOld := false, false
	if rg != nil {
		for i := rg.n - 1; i >= 0; i-- {
			s := rg.at(i)
			if !s.t.Before(live.t) {
				continue
			}
			if found && live.t.Sub(s.t) > rateWindow {
				break
			}
			base, found = s, true
		}
		for i := rg.n - 1; i >= 0 && !foundOld; i-- {
			if s := rg.at(i); live.t.Sub(s.t) >= stall {
				old, foundOld = s, true
			}
		}
	}
	h.mu.Unlock()
	if dt := live.t.Sub(base.t).Seconds(); found && dt > 0 {
		i, o := entered(base, live)/dt, float64(live.acked-base.acked)/dt
		r.in, r.out = &i, &o
		if net := float64(live.backlog-base.backlog) / dt; live.backlog > 0 && net < 0 {
			e := float64(live.backlog) / -net
			r.empty = &e
		}
	}
	switch {
	case live.backlog == 0:
		r.state = BacklogEmpty
	case connected && foundOld && left(old, live) >= float64(old.backlog):
		r.state = BacklogKeepingUp
	case r.empty != nil:
		r.state = BacklogDraining
	case connected && !foundOld:
		r.state = BacklogUnknown
	default:
		r.state = BacklogNotDraining
	}
	return r
}

// point is one interval of a chart.
type point struct {
	t       time.Time
	in, out float64 // messages per second over the interval
	backlog float64 // messages at its end
}

// series returns a bridge's chart points, oldest first.
func (h *History) series(name string) []point {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.rings[name]
	if r == nil {
		return nil
	}
	var ps []point
	for i := 0; i < r.n; i++ {
		s := r.at(i)
		p := point{t: s.t, backlog: float64(s.backlog)}
		if i > 0 {
			prev := r.at(i - 1)
			if dt := s.t.Sub(prev.t).Seconds(); dt > 0 {
				p.in = max(entered(prev, s)/dt, 0)
				p.out = float64(s.acked-prev.acked) / dt
			}
		}
		ps = append(ps, p)
	}
	return ps
}
