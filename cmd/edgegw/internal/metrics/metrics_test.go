package metrics

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/edgegw/edgegw/gateway"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestMetricsAndHealth(t *testing.T) {
	gw := gateway.New(gateway.Options{}, nil)
	gw.Publish(&gateway.Message{Topic: "a/b", Payload: []byte("x"), Retain: true})
	var problems []string
	s := &Server{Address: "127.0.0.1:0", Sources: Sources{
		Gateway: gw.Stats,
		Bridges: func() []BridgeStatus {
			return []BridgeStatus{{Name: "cloud", Connected: true, WatchdogTrips: 1, LastError: `EOF "x"`,
				Spool:           SpoolStatus{Messages: 3, Quarantined: 2},
				UpstreamDropped: map[string]int64{"not_authorized": 4, "packet_too_large": 0}, UpstreamRetried: 5,
				Budget:   &BudgetStatus{Used: 1000, Limit: 5000, PeriodEnd: time.Unix(1800000000, 0), Rate: 200, RateWaited: 1500 * time.Millisecond},
				Upstream: &UpstreamStatus{Protocol: "5", MaxQoS: 1, RetainAvailable: true, ReceiveMaximum: 20}, QoSDowngraded: 7,
			}, {Name: "plain", Upstream: &UpstreamStatus{Protocol: "3.1.1", BridgeFlagRefused: true, MaxQoS: 2, RetainAvailable: true, QoS2Window: 5}}}
		},
		Links: func() []LinkStatus {
			return []LinkStatus{{Name: "uart0", State: "waiting", BadFrames: map[string]int64{"crc": 2}}}
		},
		Health: func() []string { return problems },
	}}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Serve(ctx) }()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Error(err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Serve did not return")
		}
	}()
	base := "http://" + s.Addr().String()
	code, body := get(t, base+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics = %d", code)
	}
	for _, want := range []string{
		"edgegw_retained_messages 1",
		"edgegw_messages_received_total 1",
		"edgegw_slow_consumers_total 0",
		"edgegw_auth_failures_total 0",
		"edgegw_messages_not_stored_total 0",
		`edgegw_denied_total{kind="delivery"} 0`,
		`edgegw_denied_total{kind="session_owner"} 0`,
		`edgegw_messages_dropped_total{reason="queue_full"} 0`,
		`edgegw_bridge_up{bridge="cloud"} 1`,
		`edgegw_bridge_spool_messages{bridge="cloud"} 3`,
		`edgegw_bridge_watchdog_trips_total{bridge="cloud"} 1`,
		`edgegw_bridge_spool_quarantined_total{bridge="cloud"} 2`,
		`edgegw_bridge_last_error_info{bridge="cloud",error="EOF \"x\""} 1`,
		`edgegw_bridge_upstream_dropped_total{bridge="cloud",reason="not_authorized"} 4`,
		`edgegw_bridge_upstream_dropped_total{bridge="cloud",reason="packet_too_large"} 0`,
		`edgegw_bridge_upstream_retried_total{bridge="cloud"} 5`,
		`edgegw_bridge_budget_used_bytes{bridge="cloud"} 1000`,
		`edgegw_bridge_budget_limit_bytes{bridge="cloud"} 5000`,
		`edgegw_bridge_budget_period_end_seconds{bridge="cloud"} 1.8e+09`,
		`edgegw_bridge_rate_limit_bytes_per_second{bridge="cloud"} 200`,
		`edgegw_bridge_rate_limit_wait_seconds_total{bridge="cloud"} 1.5`,
		`edgegw_bridge_upstream_retried_total{bridge="plain"} 0`,
		`edgegw_bridge_upstream_info{bridge="cloud",bridge_flag="false",protocol="5"} 1`,
		`edgegw_bridge_upstream_info{bridge="plain",bridge_flag="refused",protocol="3.1.1"} 1`,
		`edgegw_bridge_upstream_max_qos{bridge="cloud"} 1`,
		`edgegw_bridge_upstream_receive_maximum{bridge="cloud"} 20`,
		`edgegw_bridge_upstream_retain_available{bridge="plain"} 1`,
		`edgegw_bridge_upstream_qos2_window{bridge="plain"} 5`,
		`edgegw_bridge_qos_downgraded_total{bridge="cloud"} 7`,
		`edgegw_bridge_qos_held{bridge="cloud"} 0`,
		"# HELP edgegw_bridge_acked_total Upstream publishes acknowledged. Counts since this process started; the delivery ledger (edgegw_bridge_ledger_messages) counts across restarts.",
		`edgegw_serial_link_state{listener="uart0",state="waiting"} 1`,
		`edgegw_serial_frame_errors_total{kind="crc",listener="uart0"} 2`,
		"go_goroutines",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	// A bridge without rate_limit or budget has no budget series.
	if strings.Contains(body, `edgegw_bridge_budget_used_bytes{bridge="plain"}`) || strings.Contains(body, `rate_limit_bytes_per_second{bridge="plain"}`) {
		t.Errorf("budget series for a bridge without a budget")
	}
	if code, body := get(t, base+"/healthz"); code != 200 || !strings.Contains(body, "ok") {
		t.Fatalf("/healthz = %d %q", code, body)
	}
	problems = []string{"bridge cloud disconnected for 10m0s"}
	if code, body := get(t, base+"/healthz"); code != 503 || !strings.Contains(body, "bridge cloud") {
		t.Fatalf("/healthz = %d %q, want 503 naming the bridge", code, body)
	}
}

// TestBridgeSys: every per-bridge series but up has its $SYS topic, with
// the same value.
func TestBridgeSys(t *testing.T) {
	b := BridgeStatus{Name: "cloud", ConnectFailures: 4, Resumed: 2, LastError: "dial: refused",
		Spool: SpoolStatus{IDGap: 9, Syncs: 11}}
	// sys returns b's $SYS topics and values, having checked those in want.
	sys := func(b BridgeStatus, want map[string]string) map[string]string {
		t.Helper()
		got := make(map[string]string)
		for _, v := range BridgeSys(b) {
			got[v.Topic] = v.Value
		}
		for topic, w := range want {
			if got[topic] != w {
				t.Errorf("%s = %q, want %q", topic, got[topic], w)
			}
		}
		return got
	}
	got := sys(b, map[string]string{
		"$SYS/bridge/cloud/connect_failures": "4", "$SYS/bridge/cloud/resumed": "2",
		"$SYS/bridge/cloud/spool/id_gap": "9", "$SYS/bridge/cloud/spool/syncs": "11",
		"$SYS/bridge/cloud/last_error": "dial: refused", "$SYS/bridge/cloud/sent": "0",
	})
	always := 0
	for _, s := range bridgeTable {
		if s.only == nil {
			always++
		}
	}
	if len(got) != always { // all but up and those a bridge without budget lacks, plus last_error
		t.Errorf("%d $SYS topics for %d series", len(got), always)
	}

	b.Budget = &BudgetStatus{Used: 7, Limit: 9, PeriodEnd: time.Unix(1800000000, 0), Rate: 3, RateWaited: 250 * time.Millisecond}
	b.UpstreamDropped = map[string]int64{"qos_not_supported": 2}
	b.Upstream = &UpstreamStatus{Protocol: "5", MaxQoS: 1, RetainAvailable: true, ReceiveMaximum: 20, MaxPacketSize: 1 << 20}
	b.QoSDowngraded = 5
	got = sys(b, map[string]string{
		"$SYS/bridge/cloud/budget/used": "7", "$SYS/bridge/cloud/budget/limit": "9",
		"$SYS/bridge/cloud/budget/period_end": "1800000000", "$SYS/bridge/cloud/rate_limit/bytes_per_second": "3",
		"$SYS/bridge/cloud/rate_limit/wait_seconds": "0.25", "$SYS/bridge/cloud/upstream/dropped/qos_not_supported": "2",
		"$SYS/bridge/cloud/upstream/max_qos": "1", "$SYS/bridge/cloud/upstream/retain_available": "1",
		"$SYS/bridge/cloud/upstream/receive_maximum": "20", "$SYS/bridge/cloud/upstream/maximum_packet_size": "1048576",
		"$SYS/bridge/cloud/qos/downgraded": "5", "$SYS/bridge/cloud/qos/held": "0",
	})
	// Every series, one drop reason, but not the 3.1.1 upstream's learned
	// QoS 2 window.
	if _, ok := got["$SYS/bridge/cloud/upstream/qos2_window"]; ok || len(got) != len(bridgeTable) {
		t.Errorf("%d $SYS topics for %d series and one drop reason, less qos2_window (%v)", len(got), len(bridgeTable), ok)
	}

	b.Upstream = &UpstreamStatus{Protocol: "3.1.1", MaxQoS: 2, RetainAvailable: true, QoS2Window: 5}
	got = sys(b, map[string]string{"$SYS/bridge/cloud/upstream/qos2_window": "5", "$SYS/bridge/cloud/upstream/max_qos": "2"})
	if _, ok := got["$SYS/bridge/cloud/upstream/receive_maximum"]; ok {
		t.Error("a 3.1.1 upstream has an MQTT 5 receive_maximum topic")
	}
}

// TestExposition checks the hand-written text format: families sorted, one
// HELP and TYPE each, label pairs sorted by name, values escaped, and the
// go_* and process_* series Prometheus' Go client used to export.
func TestExposition(t *testing.T) {
	e := newExpo()
	e.counter("b_total", "B.").v(3, "z", "1", "a", `q"\`+"\n")
	e.gauge("a", "A help\\ with\nnewline.").v(1.5).v(2e7, "k", "v")
	collectRuntime(e)
	collectProcess(e)
	var sb strings.Builder
	if err := e.writeTo(&sb); err != nil {
		t.Fatal(err)
	}
	out := sb.String()
	for _, want := range []string{
		"# HELP a A help\\\\ with\\nnewline.\n# TYPE a gauge\na 1.5\na{k=\"v\"} 2e+07\n",
		"# HELP b_total B.\n# TYPE b_total counter\nb_total{a=\"q\\\"\\\\\\n\",z=\"1\"} 3\n",
		"go_goroutines ", "go_threads ", `go_info{version="go`, "go_gc_gogc_percent ",
		"go_gc_gomemlimit_bytes ", "go_gc_duration_seconds_count ", `go_gc_duration_seconds{quantile="0.5"} `,
		"go_memstats_heap_inuse_bytes ", "go_memstats_alloc_bytes_total ", "go_memstats_next_gc_bytes ",
		"go_memstats_sys_bytes ", "go_sched_gomaxprocs_threads ",
		"process_cpu_seconds_total ", "process_resident_memory_bytes ", "process_open_fds ",
		"process_max_fds ", "process_start_time_seconds ", "process_virtual_memory_bytes ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("exposition lacks %q", want)
		}
	}
	var names []string
	seen := map[string]bool{}
	for line := range strings.Lines(out) {
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name := strings.Fields(rest)[0]
			if seen[name] {
				t.Errorf("family %s twice", name)
			}
			seen[name] = true
			names = append(names, name)
			continue
		}
		if strings.HasPrefix(line, "#") {
			continue
		}
		if f := strings.Fields(line); len(f) < 2 {
			t.Errorf("malformed sample line %q", line)
		}
	}
	if !slices.IsSorted(names) {
		t.Errorf("families not sorted: %v", names)
	}
}

// TestListenBusyHint: a metrics port that another program holds fails with
// the key to change, not a bare bind error (issue 15, point 7).
func TestListenBusyHint(t *testing.T) {
	taken := &Server{Address: "127.0.0.1:0"}
	if err := taken.Listen(); err != nil {
		t.Fatal(err)
	}
	defer taken.ln.Close()
	s := &Server{Address: taken.Addr().String()}
	err := s.Listen()
	if err == nil {
		s.ln.Close()
		t.Fatal("second Listen on the same port succeeded")
	}
	for _, want := range []string{"metrics.address " + s.Address, "address already in use", "another program listens there, ss -ltnp shows which", `set it to "" to turn metrics off`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}
