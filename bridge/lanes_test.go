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

// driftReading is the prefix of a backlog reading of about 100 bytes (a
// sensor's), with its number appended; slowLink the link (bytes/s each
// way) the auto-window drains run over, so that they take seconds
// whatever the bridge's speed.
const (
	driftReading = "b-reading-of-a-sensor-about-one-hundred-bytes-long-like-those-a-fleet-sends-every-few-seconds-"
	slowLink     = 128 << 10
)

func linkName(window int) string {
	if window == bridge.MaxInflightAuto {
		return "128 KiB/s"
	}
	return "unlimited"
}

// outage makes the uplink go down and stay down until the returned func.
func outage(t *testing.T, px proxy, b *running) (end func()) {
	t.Helper()
	px.Refuse(true)
	px.Cut()
	b.waitState(t, bridge.Disconnected)
	return func() {
		px.Refuse(false)
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
	px.SetDelay(testutil.Down, 5*time.Millisecond) // an uplink with a round trip: the drain takes a while
	prefix := "b"
	if window == bridge.MaxInflightAuto {
		// The auto window starts at 64 KiB: 2,000 readings of 25 bytes
		// fit in it whole, so "at most the window ahead of the alarm"
		// allowed the whole backlog, and the test passed only while the
		// bridge took longer to write 2,000 publishes than the alarm took
		// to be committed. With 100-byte
		// readings (a sensor's) on a link of 128 KiB/s the backlog is
		// about four initial windows and drains for about 2 s whatever
		// the bridge's speed, and the window is what the link carries.
		prefix = driftReading
		px.setLink(0, slowLink)
	}
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
	publishBacklog(t, lc, "bulk/t", 1, prefix, backlog)
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
	t.Logf("HIGH-FIRST MQTT %s, backlog %d bulk of %d bytes, max_inflight %d (0: auto), ack delay 5ms: alarm published with %d bulk upstream, arrived after %d (latency %s)",
		proto, backlog, len(prefix)+3, cfg.MaxInflight, before, ahead, latency)
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

// drainStall is how long a drain may go without a message more reaching
// the cloud before waitDrained calls it stuck.
const drainStall = 30 * time.Second

// waitDrained waits until n distinct messages on topic reached sub. It
// fails only when none more arrived for drainStall: how long a whole drain
// takes is the machine's (over MQTT 5 the backlog's share of mosquitto's
// receive maximum is 5 publishes a round trip, and a loaded machine
// stretches every round trip), a drain that stopped is the bridge's.
func waitDrained(t *testing.T, sub *collector, topic string, n int) {
	t.Helper()
	got, at := 0, time.Now()
	testutil.Eventually(t, time.Hour, "everything upstream", func() bool {
		if c := countDistinct(sub.all(), topic); c > got {
			got, at = c, time.Now()
		}
		if got < n && time.Since(at) > drainStall {
			t.Fatalf("the drain stopped: %d of %d upstream, none more for %s", got, n, drainStall)
		}
		return got >= n
	})
}

// drainAcks is how many of the drain's acks the proxy lets through before
// it holds the rest back: the drain is under way, and far from over.
const drainAcks = 50

// holding reports whether the proxy holds acks back and lets none
// through.
func holding(fl *flows) func() bool {
	return func() bool {
		held, pass := fl.acksHeld()
		return held > 0 && pass == 0
	}
}

// testDrainOrder runs one drain: with QoS 2 every message must arrive
// exactly once, with QoS 1 at least once (a reset may cost duplicates).
//
// Where the drain stands is set by the proxy, not by how fast this
// machine is: it lets drainAcks acks through to the bridge and holds the
// rest back, so the bridge has completed drainAcks backlog messages and
// has at most its share of the window more in flight (the count share
// alone, a quarter of max_inflight or of auto's 8,192 publishes, is well
// below the backlog). With live-first the acks stay held while the live
// messages go, but for those that make room for a live one: an automatic
// window learns from every ack and may have shrunk below what the backlog
// took under the window it was sent in, and then nothing goes until
// enough of it is acked. They go one at a time, only while a live message
// waits to be sent: the bridge, live-first, sends it before any more of
// the backlog, so the backlog cannot drain meanwhile (it once did on a
// loaded machine, when ten live round trips took longer than the whole
// drain). With fifo the acks are released first: a live message cannot go
// before the backlog, held or not.
func testDrainOrder(t *testing.T, proto, drain string, window int, qos byte, backlog int, reset bool) {
	const live = 10
	up := startMosquitto(t)
	gw := startGateway(t)
	px := startProxy(t, up.addr())
	fl := watchFlows(px)
	px.SetDelay(testutil.Down, 5*time.Millisecond)
	prefix := map[byte]string{'b': "b", 'l': "l"}
	if window == bridge.MaxInflightAuto {
		// 100-byte readings (a sensor's) on a link of 128 KiB/s: the
		// drain lasts about 3 s whatever the bridge's speed, and the
		// window is what the link carries, not the whole backlog at once.
		prefix = map[byte]string{'b': driftReading, 'l': "l" + driftReading[1:]}
		px.setLink(0, slowLink)
	}
	cfg := testConfig(t, "b1", px.url())
	cfg.Protocol = proto
	cfg.CleanSession = false
	cfg.MaxInflight = window
	cfg.Drain = drain
	cfg.BacklogShare = 0.25
	// The proxy holds acks back on purpose: the watchdog must not take
	// the held ones for a dead uplink. The test's faults are resets, seen
	// at once: no keepalive needs to find a dead link, and with a second's
	// keepalive a PINGRESP late behind the slow link's queue on a loaded
	// machine started a new connection, to which a live message accepted
	// just before it but not yet sent is backlog.
	cfg.AckTimeout = time.Minute
	cfg.KeepAlive = time.Minute
	cfg.Topics = []bridge.Rule{{Pattern: "sensors/#", Direction: bridge.Out, QoS: int(qos), RemotePrefix: "site/"}}
	upSub := subscribe(t, up.addr(), "up-sub", "site/#", qos)
	b := runBridge(t, cfg, gw.srv)
	b.waitState(t, bridge.Connected)
	lc := client(t, gw.addr, "local-pub")

	end := outage(t, px, b)
	publishBacklog(t, lc, "sensors/t", qos, prefix['b'], backlog)
	fl.holdAcks(drainAcks)
	end()
	testutil.Eventually(t, 20*time.Second, "the drain under way, its acks held", holding(fl))
	if reset {
		// Flows in flight are resumed under their packet ids: the held
		// acks make sure there are some. Live messages are those
		// accepted during the new connection: wait for it, not for the
		// old one's state. The acks of the old connection go with it.
		connects := b.Stats().Connects
		px.Cut()
		fl.holdAcks(drainAcks)
		testutil.Eventually(t, 15*time.Second, "the reconnect", func() bool {
			st := b.Stats()
			return st.Connects > connects && st.State == bridge.Connected
		})
		testutil.Eventually(t, 20*time.Second, "the drain under way again, its acks held", holding(fl))
	}
	if drain != bridge.DrainLiveFirst {
		fl.releaseAcks()
	}
	start := time.Now()
	var worst time.Duration
	passed := 0 // acks let through for room for a live message
	for i := range live {
		payload := prefix['l'] + strconv.Itoa(i)
		sent := time.Now()
		publish(t, lc, "sensors/t", qos, payload)
		if drain == bridge.DrainLiveFirst {
			testutil.Eventually(t, 20*time.Second, "live message sent", func() bool {
				if fl.published(payload) {
					return true
				}
				if holding(fl)() {
					fl.passAcks(1)
					passed++
				}
				return false
			})
		}
		testutil.Eventually(t, 20*time.Second, "live message upstream", func() bool { return upSub.has("site/sensors/t", payload) })
		worst = max(worst, time.Since(sent))
	}
	fl.releaseAcks()
	waitDrained(t, upSub, "site/sensors/t", backlog+live)
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
		if want := prefix[part] + strconv.Itoa(next[part]); m.payload != want {
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
	t.Logf("DRAIN MQTT %s %s: backlog %d QoS %d of %d bytes, max_inflight %d (0: auto), backlog_share 25%%, ack delay 5ms, link %s, reset mid-drain %v, acks held after %d (%d let through for live ones): worst live latency %s (live published one at a time), everything upstream %s after the first live one; last live at position %d, last backlog at %d; %d duplicates",
		proto, drain, backlog, qos, len(prefix['b'])+3, cfg.MaxInflight, linkName(window), reset, drainAcks, passed, worst.Round(time.Millisecond), drained.Round(time.Millisecond), lastLive, lastBacklog, dups)
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
