package metrics

import (
	"context"
	"io"
	"net/http"
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
			return []BridgeStatus{{Name: "cloud", Connected: true, SpoolMessages: 3, WatchdogTrips: 1}}
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
		`edgegw_messages_dropped_total{reason="queue_full"} 0`,
		`edgegw_bridge_up{bridge="cloud"} 1`,
		`edgegw_bridge_spool_messages{bridge="cloud"} 3`,
		`edgegw_bridge_watchdog_trips_total{bridge="cloud"} 1`,
		`edgegw_serial_link_state{listener="uart0",state="waiting"} 1`,
		`edgegw_serial_frame_errors_total{kind="crc",listener="uart0"} 2`,
		"go_goroutines",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if code, body := get(t, base+"/healthz"); code != 200 || !strings.Contains(body, "ok") {
		t.Fatalf("/healthz = %d %q", code, body)
	}
	problems = []string{"bridge cloud disconnected for 10m0s"}
	if code, body := get(t, base+"/healthz"); code != 503 || !strings.Contains(body, "bridge cloud") {
		t.Fatalf("/healthz = %d %q, want 503 naming the bridge", code, body)
	}
}
