package bridge_test

import (
	"strconv"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgegw/edgegw/bridge"
	"github.com/edgegw/edgegw/internal/testutil"
)

// publishBacklog publishes n messages prefix0..prefix(n-1) on topic at
// qos, pipelined, and waits for every local acknowledgement.
func publishBacklog(t *testing.T, c mqtt.Client, topic string, qos byte, prefix string, n int) {
	t.Helper()
	toks := make([]mqtt.Token, n)
	for i := range toks {
		toks[i] = c.Publish(topic, qos, false, prefix+strconv.Itoa(i))
	}
	for i, tok := range toks {
		if !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
			t.Fatalf("publish %s%d: %v", prefix, i, tok.Error())
		}
	}
}

// outage makes the uplink go down and stay down until the returned func.
func outage(t *testing.T, px *proxy, b *running) (end func()) {
	t.Helper()
	px.setRefuse(true)
	px.reset()
	b.waitState(t, bridge.Disconnected)
	return func() {
		px.setRefuse(false)
		b.waitState(t, bridge.Connected)
	}
}

// TestHighFirstDuringBulkDrain: an alarm on a high-priority rule,
// published while a backlog of bulk messages drains, is sent at the next
// free window slot: at most the window (already in flight) reaches the
// cloud between its publication and its arrival, not the backlog. Over
// MQTT 3.1.1 and MQTT 5 alike (mosquitto's Receive Maximum, 20, then
// bounds the window too).
func TestHighFirstDuringBulkDrain(t *testing.T) {
	for _, proto := range []string{bridge.Protocol311, bridge.Protocol5} {
		t.Run(proto+"/window16", func(t *testing.T) { testHighFirst(t, proto, 16) })
		t.Run(proto+"/auto", func(t *testing.T) { testHighFirst(t, proto, bridge.MaxInflightAuto) })
	}
}

func testHighFirst(t *testing.T, proto string, window int) {
	const backlog = 2000
	up := startMosquitto(t)
	gw := startGateway(t)
	px := startProxy(t, up.addr())
	px.setAckDelay(5 * time.Millisecond) // an uplink with a round trip: the drain takes a while
	cfg := testConfig(t, "b1", px.url())
	cfg.Protocol = proto
	cfg.MaxInflight = window
	cfg.Topics = []bridge.Rule{
		{Pattern: "alarms/#", Direction: bridge.Out, QoS: 1, RemotePrefix: "site/", Priority: "high"},
		{Pattern: "bulk/#", Direction: bridge.Out, QoS: 1, RemotePrefix: "site/", Priority: "bulk"},
	}
	upSub := subscribe(t, up.addr(), "up-sub", "site/#", 1)
	b := runBridge(t, cfg, gw.srv)
	b.waitState(t, bridge.Connected)
	lc := client(t, gw.addr, "local-pub")

	end := outage(t, px, b)
	publishBacklog(t, lc, "bulk/t", 1, "b", backlog)
	end()
	testutil.Eventually(t, 10*time.Second, "the drain under way", func() bool { return upSub.len() >= 100 })
	before := upSub.len()
	sent := time.Now()
	publish(t, lc, "alarms/fire", 1, "fire")
	testutil.Eventually(t, 10*time.Second, "the alarm upstream", func() bool { return upSub.has("site/alarms/fire", "fire") })
	latency := time.Since(sent)
	ahead := 0
	for _, m := range upSub.all() {
		if m.topic == "site/alarms/fire" {
			break
		}
		ahead++
	}
	testutil.Eventually(t, 30*time.Second, "the backlog upstream", func() bool { return countDistinct(upSub.all(), "site/bulk/t") == backlog })
	t.Logf("HIGH-FIRST MQTT %s, backlog %d bulk, max_inflight %d (0: auto), ack delay 5ms: alarm published with %d bulk upstream, arrived after %d (latency %s)",
		proto, backlog, cfg.MaxInflight, before, ahead, latency)
	if p := b.Stats().Protocol; p != proto {
		t.Fatalf("uplink protocol %q, want %s", p, proto)
	}
	// With a fixed window, two windows (in flight, and on their way to the
	// subscriber); with auto, before the backlog drained.
	if (window > 0 && ahead-before > 2*window) || ahead >= backlog {
		t.Errorf("%d bulk messages reached the cloud between the alarm's publication and its arrival; at most the window (in flight, and on its way to the subscriber) may", ahead-before)
	}
	l, _ := b.Ledger()
	if !l.AddsUp {
		t.Errorf("ledger %+v", l)
	}
}

// TestLiveFirstDrain: after an outage, with drain live-first, messages
// published while the backlog drains reach the cloud before the backlog
// has drained; with fifo, after all of it. Both at QoS 2 with a
// persistent session and an uplink reset in the middle of the drain:
// every message arrives exactly once, each part (live, backlog) in order.
// Over MQTT 3.1.1 and MQTT 5 alike.
func TestLiveFirstDrain(t *testing.T) {
	for _, proto := range []string{bridge.Protocol311, bridge.Protocol5} {
		for _, drain := range []string{bridge.DrainLiveFirst, bridge.DrainFIFO} {
			t.Run(proto+"/"+drain+"/qos2-window16", func(t *testing.T) { testDrainOrder(t, proto, drain, 16, 2, 600, true) })
			// No reset here: the flows in flight at a reset are re-sent first
			// and hold the window until they are acked (window.go), and with
			// auto that may be most of a small backlog.
			t.Run(proto+"/"+drain+"/qos1-auto", func(t *testing.T) {
				testDrainOrder(t, proto, drain, bridge.MaxInflightAuto, 1, 3000, false)
			})
		}
	}
}

// testDrainOrder runs one drain: with QoS 2 every message must arrive
// exactly once, with QoS 1 at least once (a reset may cost duplicates).
func testDrainOrder(t *testing.T, proto, drain string, window int, qos byte, backlog int, reset bool) {
	const live = 10
	up := startMosquitto(t)
	gw := startGateway(t)
	px := startProxy(t, up.addr())
	px.setAckDelay(5 * time.Millisecond)
	cfg := testConfig(t, "b1", px.url())
	cfg.Protocol = proto
	cfg.CleanSession = false
	cfg.MaxInflight = window
	cfg.Drain = drain
	cfg.BacklogShare = 0.25
	cfg.Topics = []bridge.Rule{{Pattern: "sensors/#", Direction: bridge.Out, QoS: int(qos), RemotePrefix: "site/"}}
	upSub := subscribe(t, up.addr(), "up-sub", "site/#", qos)
	b := runBridge(t, cfg, gw.srv)
	b.waitState(t, bridge.Connected)
	lc := client(t, gw.addr, "local-pub")

	end := outage(t, px, b)
	publishBacklog(t, lc, "sensors/t", qos, "b", backlog)
	end()
	testutil.Eventually(t, 10*time.Second, "the drain under way", func() bool { return upSub.len() >= 50 })
	if reset {
		// Flows in flight are resumed under their packet ids. Live
		// messages are those accepted during the new connection: wait
		// for it, not for the old one's state.
		connects := b.Stats().Connects
		px.reset()
		testutil.Eventually(t, 15*time.Second, "the reconnect", func() bool {
			st := b.Stats()
			return st.Connects > connects && st.State == bridge.Connected
		})
	}
	start := time.Now()
	var worst time.Duration
	for i := range live {
		sent := time.Now()
		publish(t, lc, "sensors/t", qos, "l"+strconv.Itoa(i))
		testutil.Eventually(t, 20*time.Second, "live message upstream", func() bool { return upSub.has("site/sensors/t", "l"+strconv.Itoa(i)) })
		worst = max(worst, time.Since(sent))
	}
	testutil.Eventually(t, 30*time.Second, "everything upstream", func() bool {
		return countDistinct(upSub.all(), "site/sensors/t") == backlog+live
	})
	drained := time.Since(start)

	var lastLive, lastBacklog, dups int
	seen := make(map[string]bool)
	next := map[byte]int{}
	for k, m := range upSub.all() {
		if seen[m.payload] {
			if qos == 2 {
				t.Fatalf("%s arrived twice (QoS 2, persistent session)", m.payload)
			}
			dups++
			continue
		}
		seen[m.payload] = true
		part := m.payload[0]
		if want := string(part) + strconv.Itoa(next[part]); m.payload != want {
			t.Fatalf("out of order within its part: got %s, want %s", m.payload, want)
		}
		next[part]++
		if part == 'l' {
			lastLive = k
		} else {
			lastBacklog = k
		}
	}
	if next['b'] != backlog || next['l'] != live {
		t.Fatalf("got %d backlog and %d live messages", next['b'], next['l'])
	}
	t.Logf("DRAIN MQTT %s %s: backlog %d QoS %d, max_inflight %d (0: auto), backlog_share 25%%, ack delay 5ms, reset mid-drain %v: worst live latency %s (live published one at a time), everything upstream %s after the first live one; last live at position %d, last backlog at %d; %d duplicates",
		proto, drain, backlog, qos, cfg.MaxInflight, reset, worst.Round(time.Millisecond), drained.Round(time.Millisecond), lastLive, lastBacklog, dups)
	if drain == bridge.DrainLiveFirst && lastLive > lastBacklog {
		t.Errorf("live-first: a live message arrived after the whole backlog")
	}
	if drain == bridge.DrainFIFO && lastLive < lastBacklog {
		t.Errorf("fifo: a live message overtook the backlog")
	}
	if p := b.Stats().Protocol; p != proto {
		t.Errorf("uplink protocol %q, want %s", p, proto)
	}
	if st := b.Stats(); reset && st.Resumed == 0 {
		t.Errorf("the reset cut no flow: the test proves nothing about exactly once")
	}
}
