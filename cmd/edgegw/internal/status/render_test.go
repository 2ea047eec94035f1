package status

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/edgegw/edgegw/bridge"
)

// TestRenderEscapes: client ids, user names, topics in errors and bridge
// names come from the network or the config; none can inject markup.
func TestRenderEscapes(t *testing.T) {
	evil := `<img src=x onerror=alert(1)>"'&`
	now := time.Now()
	d := pageData{Now: now, Span: "1h00m", Snapshot: Snapshot{Version: evil,
		Bridges: []Bridge{{Name: evil, State: "disconnected", Since: now, LastError: evil, LastErrorText: evil,
			Address: evil, Addresses: []string{evil}}},
		Listeners: []Listener{{Name: evil, Type: "tcp", Address: evil, Clients: []Client{{ClientID: evil,
			Username: evil, Remote: evil, Protocol: "5.0", Since: now, Slow: true}}}},
		SerialLinks: []SerialLink{{Listener: evil, Device: evil, Framing: evil, State: evil,
			FramesBad: map[string]int64{evil: 1}}},
		Drops: []Drop{{Reason: evil, Count: 1}}}}
	html := string(renderPage(d, nil, nil))
	if strings.Contains(html, "<img src=x") || strings.Contains(html, `"'&`) {
		t.Fatalf("unescaped markup in the page:\n%s", html)
	}
	if n := strings.Count(html, "&lt;img src=x onerror=alert(1)&gt;"); n < 15 {
		t.Fatalf("the value appears escaped %d times, want every place (15 or more):\n%s", n, html)
	}
	for _, fact := range []string{`<p class="banner disconnected"`, `<tr class="slow">`, `<tr class="warn">`,
		`chart.svg?bridge=%3Cimg+src%3Dx+onerror%3Dalert%281%29%3E%22%27%26&amp;kind=rate`} {
		if !strings.Contains(html, fact) {
			t.Errorf("page lacks %q", fact)
		}
	}
}

// TestRenderBacklogAlarm: through the page as it is rendered, a connected
// bridge that keeps up (a message in its batch window at the moment the
// page is made) shows no alarm, and one whose backlog has waited a stall
// window still does, next to the same green banner.
func TestRenderBacklogAlarm(t *testing.T) {
	now := time.Unix(2_000_000, 0)
	at := now.Add(5 * time.Second)
	page := func(h *History, st bridge.Stats) string {
		t.Helper()
		b := bridgeOf("cloud", []string{"tcp://cloud:1883"}, st, at, h)
		return string(renderPage(pageData{Now: at, Span: "1h00m", Snapshot: Snapshot{Bridges: []Bridge{b}}}, nil, nil))
	}
	const eta = `data-k="bridges.0.time_to_empty_seconds" data-f="eta">`

	keeping := page(history(now, [2]int{0, 0}, [2]int{130, 1}, [2]int{260, 0}, [2]int{390, 1}),
		bridge.Stats{State: bridge.Connected, Since: now.Add(-time.Hour), Acked: 455, SpoolMessages: 1})
	for _, want := range []string{"Uplink cloud: connected", `<span class="eta" ` + eta + `keeping up<`,
		`<b data-k="bridges.0.backlog_messages">1</b> <span data-k="bridges.0.backlog_messages" data-f="noun" data-n="message">message</span>`} {
		if !strings.Contains(keeping, want) {
			t.Errorf("keeping up: page lacks %q", want)
		}
	}
	if strings.Contains(keeping, "not draining") || strings.Contains(keeping, "alarm") {
		t.Errorf("keeping up: the page raises an alarm:\n%s", keeping)
	}

	stalled := page(history(now, [2]int{100, 0}, [2]int{100, 1}, [2]int{100, 1}, [2]int{100, 1}, [2]int{100, 1}),
		bridge.Stats{State: bridge.Connected, Since: now.Add(-time.Hour), Acked: 100, SpoolMessages: 1})
	for _, want := range []string{"Uplink cloud: connected", `<span class="eta alarm" ` + eta + `not draining<`} {
		if !strings.Contains(stalled, want) {
			t.Errorf("connected, stalled: page lacks %q", want)
		}
	}

	down := page(history(now), bridge.Stats{State: bridge.Disconnected, Since: now, SpoolMessages: 5})
	if want := `<span class="eta alarm" ` + eta + `not draining<`; !strings.Contains(down, want) {
		t.Errorf("disconnected with a backlog: page lacks %q", want)
	}
}

// TestRenderPlurals: a count of one is followed by the singular, any
// other by the plural, everywhere on the page.
func TestRenderPlurals(t *testing.T) {
	tags := regexp.MustCompile(`<[^>]*>`)
	nouns := `(message|session|connect|disconnect|attempt|trip|timeout|client)`
	now := time.Now()
	for _, n := range []int{1, 2} {
		u := uint64(n)
		d := pageData{Now: now, Span: "1h00m", Snapshot: Snapshot{
			Broker: Broker{QueuedMessages: int64(n), SessionsConnected: n, SessionsDisconnected: n},
			Bridges: []Bridge{{Name: "cloud", State: "connected", Since: now, BacklogMessages: int64(n),
				Sent: u, Acked: u, Resumed: u, Received: u, SpoolDropped: u, AcceptFailed: u, InboundFailed: u,
				Connects: u, Disconnects: u, ConnectFailures: u, WatchdogTrips: u, WriteTimeouts: u}},
			Listeners: []Listener{{Name: "lan", Type: "tcp", Clients: make([]Client, n)}}}}
		text := tags.ReplaceAllString(string(renderPage(d, nil, nil)), "")
		wrong := regexp.MustCompile(`(^|[^0-9.])1 ([a-z]+ )?` + nouns + `s\b`)
		if n == 2 {
			wrong = regexp.MustCompile(`(^|[^0-9.])2 ([a-z]+ )?` + nouns + `\b[^s]`)
		}
		if m := wrong.FindAllString(text, -1); len(m) > 0 {
			t.Errorf("count %d: %q", n, m)
		}
		for _, want := range []string{"connect", "disconnect", "failed attempt", "watchdog trip", "write timeout", "offline session", "client"} {
			if !strings.Contains(text, fmt.Sprintf("%d %s", n, want)) {
				t.Errorf("count %d: no %q in\n%s", n, fmt.Sprintf("%d %s", n, want), text)
			}
		}
	}
}

// TestRenderCountersPerProcess: the bridge's delivery and connection
// counters say they count since this process started (the ledger counts
// across restarts), and the Upstream row says what the upstream granted.
func TestRenderCountersPerProcess(t *testing.T) {
	now := time.Now()
	u := Upstream{Protocol: "5", MaxQoS: 1, RetainAvailable: true, ReceiveMaximum: 20}
	d := pageData{Now: now, Span: "1h00m", Snapshot: Snapshot{Bridges: []Bridge{{Name: "cloud", State: "connected", Since: now,
		Upstream: &u, UpstreamText: upstreamText(u, true), QoSNotGranted: "hold (upstream_max_qos 2)"}}}}
	text := regexp.MustCompile(`<[^>]*>`).ReplaceAllString(string(renderPage(d, nil, nil)), "")
	for _, want := range []string{"Delivery since this process started", "Connections since this process started",
		"MQTT 5 · max QoS 1 (a message above it is HELD, unsent) · retain available · receive maximum 20",
		"above the granted QoS: hold (upstream_max_qos 2)"} {
		if !strings.Contains(text, want) {
			t.Errorf("page lacks %q:\n%s", want, text)
		}
	}
	u311 := Upstream{Protocol: "3.1.1", BridgeFlag: true, MaxQoS: 2, RetainAvailable: true, QoS2Window: 5}
	if got, want := upstreamText(u311, false), "MQTT 3.1.1 with the bridge flag · max QoS 2 · takes only 5 QoS 2 messages in flight (learned; set max_inflight_qos2)"; got != want {
		t.Errorf("upstream text %q, want %q", got, want)
	}
}
