package status

import (
	"context"
	"strings"
	"testing"
	"time"
	"unsafe"

	"go.uber.org/goleak"

	"github.com/edgegw/edgegw/bridge"
	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRingIsBounded: the history keeps exactly its last Samples samples.
func TestRingIsBounded(t *testing.T) {
	r := ring{buf: make([]sample, 3)}
	for i := range 7 {
		r.add(sample{backlog: int64(i)})
	}
	if r.n != 3 || len(r.buf) != 3 {
		t.Fatalf("ring holds %d in %d slots, want 3 in 3", r.n, len(r.buf))
	}
	for i := range 3 {
		if got := r.at(i).backlog; got != int64(4+i) {
			t.Fatalf("sample %d is %d, want %d (oldest first)", i, got, 4+i)
		}
	}
}

// TestRatesAndTimeToEmpty: rates compare with the oldest sample of the
// last minute; the time to empty is the backlog over its net shrink rate.
func TestRatesAndTimeToEmpty(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	h := &History{rings: map[string]*ring{}}
	r := &ring{buf: make([]sample, 10)}
	h.rings["cloud"] = r
	r.add(sample{t: t0, backlog: 500})                                 // too old once live is at +70s
	r.add(sample{t: t0.Add(30 * time.Second), acked: 0, backlog: 100}) // the base
	r.add(sample{t: t0.Add(50 * time.Second), acked: 30, backlog: 80})
	live := sample{t: t0.Add(70 * time.Second), acked: 60, backlog: 60}
	r0 := h.rates("cloud", live, true)
	in, out, empty := r0.in, r0.out, r0.empty
	// 40 s: 60 acked, backlog 100 -> 60: 20 entered.
	if in == nil || out == nil || empty == nil {
		t.Fatalf("rates: %v %v %v", in, out, empty)
	}
	if *in != 0.5 || *out != 1.5 || *empty != 60 || r0.state != BacklogDraining {
		t.Fatalf("in %v/s out %v/s empty in %v s (%s), want 0.5, 1.5, 60 (backlog 60 shrinking 1/s), draining",
			*in, *out, *empty, r0.state)
	}

	grow := sample{t: t0.Add(70 * time.Second), acked: 10, backlog: 150}
	if r := h.rates("cloud", grow, true); r.empty != nil {
		t.Fatalf("a growing backlog has a time to empty: %v", *r.empty)
	}
	if r := h.rates("cloud", sample{t: live.t, acked: 160}, true); r.empty == nil || *r.empty != 0 || r.state != BacklogEmpty {
		t.Fatalf("an empty backlog: time to empty %v (%s), want 0, empty", r.empty, r.state)
	}
	if r := h.rates("other", live, true); r.in != nil || r.out != nil {
		t.Fatal("rates without samples")
	}
}

// history returns a History of one bridge "cloud" holding samples every
// DefaultInterval, the last one at now: (acked, backlog) pairs, oldest first.
func history(now time.Time, counts ...[2]int) *History {
	h := &History{rings: map[string]*ring{}}
	r := &ring{buf: make([]sample, DefaultSamples)}
	h.rings["cloud"] = r
	for i, c := range counts {
		at := now.Add(-time.Duration(len(counts)-1-i) * DefaultInterval)
		r.add(sample{t: at, acked: uint64(c[0]), backlog: int64(c[1])})
	}
	return h
}

// TestBacklogState: the alarm (not draining) is for a backlog whose
// oldest messages have waited a stall window (three samples, 30 s) in a
// connected bridge, or any backlog of a bridge that is not connected; an
// uplink that keeps up, with a message or a few in its batch window at
// every sample, raises none.
func TestBacklogState(t *testing.T) {
	now := time.Unix(2_000_000, 0)
	live := func(acked, backlog int) sample {
		return sample{t: now.Add(5 * time.Second), acked: uint64(acked), backlog: int64(backlog)}
	}
	for _, tc := range []struct {
		name      string
		h         *History
		live      sample
		connected bool
		want      string
	}{
		{"keeping up at 13/s, backlog 0 or 1 at each sample", history(now, [2]int{0, 0}, [2]int{130, 1}, [2]int{260, 0}, [2]int{390, 1}, [2]int{520, 0}),
			live(585, 1), true, BacklogKeepingUp},
		{"keeping up at 500/s, backlog 8 to 12 at every sample", history(now, [2]int{0, 10}, [2]int{5000, 12}, [2]int{10000, 8}, [2]int{15000, 11}),
			live(17500, 12), true, BacklogKeepingUp},
		{"keeping up, the backlog 1 then 2 (not falling)", history(now, [2]int{0, 1}, [2]int{10, 1}, [2]int{20, 1}, [2]int{30, 1}),
			live(35, 2), true, BacklogKeepingUp},
		{"connected, nothing acked, 1 waiting since 30 to 40 s before the live sample", history(now, [2]int{100, 0}, [2]int{100, 1}, [2]int{100, 1}, [2]int{100, 1}, [2]int{100, 1}),
			live(100, 1), true, BacklogNotDraining},
		{"connected, acks slower than the sensors: 1000 waited", history(now, [2]int{0, 1000}, [2]int{100, 1100}, [2]int{200, 1200}, [2]int{300, 1300}),
			live(350, 1350), true, BacklogNotDraining},
		{"connected, stalled for less than a stall window", history(now, [2]int{0, 0}, [2]int{10, 0}, [2]int{20, 0}, [2]int{30, 0}, [2]int{30, 4}),
			live(30, 4), true, BacklogKeepingUp},
		{"connected, draining an outage's backlog", history(now, [2]int{0, 5000}, [2]int{500, 4500}, [2]int{1000, 4000}, [2]int{1500, 3500}),
			live(1750, 3250), true, BacklogDraining},
		{"connected 5 s ago, a backlog, one sample", history(now, [2]int{0, 7}), live(0, 7), true, BacklogUnknown},
		{"disconnected with a backlog, no history", history(now), live(0, 5), false, BacklogNotDraining},
		{"disconnected, backlog 0", history(now, [2]int{9, 0}), live(9, 0), false, BacklogEmpty},
		{"connected, backlog 0 after a stall", history(now, [2]int{0, 3}, [2]int{0, 3}, [2]int{0, 3}, [2]int{0, 3}), live(3, 0), true, BacklogEmpty},
	} {
		if got := tc.h.rates("cloud", tc.live, tc.connected).state; got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

// TestHistorySamplesABridge: Run samples a real bridge (spool open, uplink
// never run) until cancelled; the chart shows its backlog.
func TestHistorySamplesABridge(t *testing.T) {
	gw := gateway.New(gateway.Options{}, nil)
	b, err := bridge.New(bridge.Config{Name: "cloud", Addresses: []string{"tcp://127.0.0.1:1"}, CleanSession: true,
		Topics: []bridge.Rule{{Pattern: "sensors/#", Direction: "out", QoS: 1}}}, gw, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Open(); err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for range 3 {
		gw.Publish(&gateway.Message{Topic: "sensors/t", Payload: []byte("x"), QoS: 1})
	}
	src := &Sources{Bridges: []*bridge.Bridge{b}}
	h := NewHistory(src)
	h.Interval, h.Samples = time.Millisecond, 4
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	testutil.Eventually(t, 5*time.Second, "history full", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		r := h.rings["cloud"]
		return r != nil && r.n == 4
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ps := h.series("cloud")
	if len(ps) != 4 || ps[3].backlog != 3 {
		t.Fatalf("series %+v, want 4 points ending at backlog 3", ps)
	}
	var svg strings.Builder
	writeChart(&svg, "backlog", ps, ps[3].t, ps[3].t.Sub(ps[0].t)+time.Second, backlogLines)
	if !strings.Contains(svg.String(), `<path d="M`) || strings.Count(svg.String(), " L") != 3 {
		t.Fatalf("backlog chart has not 4 points:\n%s", svg.String())
	}
}

func TestExplain(t *testing.T) {
	for err, want := range map[string]string{
		"": "",
		"dial tcp 10.0.0.1:8883: connect: connection refused": "nothing accepts connections",
		"dial tcp: lookup cloud.example: no such host":        "does not resolve",
		"ack watchdog: no PUBACK for 30s":                     "ack watchdog",
		"something new":                                       "The uplink failed: something new",
		"set bridges[].max_packet_size if the cloud broker limits packet size: the uplink keeps ending right after " +
			"sending the same message (412 bytes, topic site/t): read: connection reset by peer": "Set bridges[].max_packet_size",
		`another client is probably using client id "edge-01": the upstream keeps ending the connection right after it connects: EOF`: "Another client probably uses this bridge's client id",
	} {
		if got := explain(err); !strings.Contains(got, want) || (want == "" && got != "") {
			t.Errorf("explain(%q) = %q, want it to say %q", err, got, want)
		}
	}
}

// TestSampleSize holds docs/status-page.md's "360 samples of 56 bytes per
// bridge (about 20 KiB)".
func TestSampleSize(t *testing.T) {
	if n := unsafe.Sizeof(sample{}); n != 56 || DefaultSamples*n > 20<<10 {
		t.Fatalf("a sample is %d bytes, %d per bridge; docs/status-page.md says 56 and about 20 KiB", n, DefaultSamples*n)
	}
}
