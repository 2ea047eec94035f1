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
	in, out, empty := h.rates("cloud", live)
	// 40 s: 60 acked, backlog 100 -> 60: 20 entered.
	if in == nil || out == nil || empty == nil {
		t.Fatalf("rates: %v %v %v", in, out, empty)
	}
	if *in != 0.5 || *out != 1.5 || *empty != 60 {
		t.Fatalf("in %v/s out %v/s empty in %v s, want 0.5, 1.5, 60 (backlog 60 shrinking 1/s)", *in, *out, *empty)
	}

	grow := sample{t: t0.Add(70 * time.Second), acked: 10, backlog: 150}
	if _, _, empty := h.rates("cloud", grow); empty != nil {
		t.Fatalf("a growing backlog has a time to empty: %v", *empty)
	}
	if _, _, empty := h.rates("cloud", sample{t: live.t, acked: 160}); empty == nil || *empty != 0 {
		t.Fatalf("an empty backlog: time to empty %v, want 0", empty)
	}
	if in, out, _ := h.rates("other", live); in != nil || out != nil {
		t.Fatal("rates without samples")
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

func TestChartWithoutSamples(t *testing.T) {
	var svg strings.Builder
	writeChart(&svg, "rates", nil, time.Now(), time.Hour, rateLines)
	if s := svg.String(); !strings.HasPrefix(s, "<svg") || !strings.Contains(s, "no samples yet") || strings.Contains(s, "<path") {
		t.Fatalf("empty chart:\n%s", s)
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
