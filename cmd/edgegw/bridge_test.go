package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgegw/edgegw/internal/testutil"
)

// Tests of the bridge through the binary, with Debian mosquitto as the
// cloud broker.

// TestBinaryBridgeSurvivesKill9 is principle 4 end to end with the real
// binary: a QoS 1 message acknowledged by edgegw while the cloud is down
// survives kill -9 of edgegw and reaches the cloud after both come back.
func TestBinaryBridgeSurvivesKill9(t *testing.T) {
	up := startCloud(t, true)
	g := newHarness(t).NoMetrics()
	g.Persist("batch", "10ms")
	g.Bridge("cloud", up.Addr).With("keepalive", "2s").With("ack_timeout", "2s").
		With("reconnect_min", "100ms").With("reconnect_max", "500ms").
		Topic(topicConf{Pattern: "sensors/#", Direction: "out", QoS: 1, RemotePrefix: "site-a/"})

	// Cloud up: a message flows through at once.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Register the persistent upstream reader first, then leave.
	first := up.Subscribe(ctx, "site-a/#", 1)
	g.Start()
	g.WaitLog("uplink connected")
	pub := func(topic, msg string) { g.Mosq("mosquitto_pub", "-q", "1", "-t", topic, "-m", msg) }
	// mosquitto_sub may not be subscribed yet: publish until it has one.
	var got []string
	deadline := time.After(20 * time.Second)
wait:
	for i := 0; ; i++ {
		pub("sensors/t1", fmt.Sprintf("warmup-%d", i))
		select {
		case got = <-first:
			break wait
		case <-time.After(300 * time.Millisecond):
		case <-deadline:
			t.Fatal("nothing arrived upstream")
		}
	}
	if !strings.HasPrefix(got[0], "site-a/sensors/t1 warmup-") {
		t.Fatalf("upstream got %q", got)
	}

	// Cloud down; messages are acknowledged locally (spooled), then edgegw
	// is killed with SIGKILL.
	up.Stop()
	for i := 0; i < 20; i++ {
		pub("sensors/t1", fmt.Sprintf("m%02d", i))
	}
	g.Kill()

	// Both come back; every acknowledged message reaches the cloud.
	up.Start()
	rest := up.Subscribe(ctx, "site-a/#", 20)
	g.Start()
	select {
	case lines := <-rest:
		seen := map[string]bool{}
		for _, l := range lines {
			seen[strings.TrimPrefix(l, "site-a/sensors/t1 ")] = true
		}
		for i := 0; i < 20; i++ {
			if !seen[fmt.Sprintf("m%02d", i)] {
				t.Fatalf("m%02d lost after kill -9; upstream got %q", i, lines)
			}
		}
	case <-ctx.Done():
		t.Fatal("spooled messages did not reach the cloud after restart")
	}
}

// TestBinaryHealthzBridgeDown: /healthz turns 503 once a bridge has been
// down longer than metrics.bridge_down_after, and back to 200 when it
// connects.
func TestBinaryHealthzBridgeDown(t *testing.T) {
	cloudAddr := freePort(t)
	g := newHarness(t)
	g.Cfg.Metrics.BridgeDownAfter = "1s"
	g.Bridge("cloud", cloudAddr).FastReconnect().Topic(topicConf{Pattern: "sensors/#", Direction: "out"})
	g.Start()
	var body string
	testutil.Eventually(t, 15*time.Second, "/healthz 503 naming the bridge", func() bool {
		code, b := g.Healthz()
		body = b
		return code == 503 && strings.Contains(b, "bridge cloud disconnected")
	})
	t.Logf("unhealthy: %s", strings.TrimSpace(body))
	startCloudAt(t, cloudAddr, false)
	testutil.Eventually(t, 15*time.Second, "/healthz 200 after the bridge connects", func() bool {
		code, _ := g.Healthz()
		return code == 200
	})
}

// TestBinaryBridgedCommandSurvivesKill9: a command from the cloud (an `in`
// rule) for an offline persistent subscriber (an actuator) is acknowledged
// upstream only once it is kept, so kill -9 of edgegw right after does not
// lose it.
func TestBinaryBridgedCommandSurvivesKill9(t *testing.T) {
	up := startCloud(t, true)
	g, _ := persistentGateway(t, "batch")
	g.Bridge("cloud", up.Addr).With("reconnect_min", "100ms").With("reconnect_max", "500ms").In("cmd/#", 1)
	g.Start()
	g.WaitLog("uplink connected")
	g.Mosq("mosquitto_sub", "-c", "-i", "actuator", "-q", "1", "-t", "cmd/#", "-E")
	for i := range 5 {
		up.Mosq(t, "mosquitto_pub", "-q", "1", "-t", "cmd/valve", "-m", fmt.Sprint("open-", i))
	}
	// Acknowledged upstream (the bridge counts it after the gateway kept it).
	testutil.Eventually(t, 15*time.Second, "5 commands received", func() bool {
		return g.Metric(`edgegw_bridge_received_total{bridge="cloud"}`) == 5
	})
	g.Kill()
	g.Start()
	out := g.Mosq("mosquitto_sub", "-c", "-i", "actuator", "-q", "1", "-t", "cmd/#", "-C", "5", "-W", "20")
	if got := strings.Fields(out); strings.Join(got, ",") != "open-0,open-1,open-2,open-3,open-4" {
		t.Fatalf("actuator got %q after kill -9", out)
	}
}

// TestBinarySpoolVersionByteZeroLosesOnlyTheDamage: a segment header whose
// version byte reads 0 (one flipped bit of version 2; no edgegw ever wrote
// version 0, so it is damage, not a newer format) costs no message: the
// header holds none (docs/bridge.md, "Damaged or full storage": "Damage
// costs the damaged messages and no more; the spool repairs what it finds
// when it opens, logs it and carries on"). The spool once refused to open
// ("unknown format version 0"): the bridge failed for good, none of the 20
// spooled messages went upstream and every new one for it was refused.
// Only a higher version with no readable record behind it is refused now
// (bridge/spool loadSegment, parseAckLog).
func TestBinarySpoolVersionByteZeroLosesOnlyTheDamage(t *testing.T) {
	cloudAddr := freePort(t)
	g := newHarness(t).NoMetrics()
	state := g.Persist("batch", "")
	g.Bridge("cloud", cloudAddr).With("reconnect_min", "100ms").With("reconnect_max", "500ms").
		Topic(topicConf{Pattern: "sensors/#", Direction: "out", QoS: 1, RemotePrefix: "site/"})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// The cloud is down: 20 messages are spooled (acknowledged), then a clean stop.
	g.Start()
	var lines strings.Builder
	for i := range 20 {
		fmt.Fprintf(&lines, "m%02d\n", i)
	}
	host, port := hostPort(g.Addr)
	pub := exec.CommandContext(ctx, "mosquitto_pub", "-h", host, "-p", port, "-q", "1", "-t", "sensors/t", "-l")
	pub.Stdin = strings.NewReader(lines.String())
	if out, err := pub.CombinedOutput(); err != nil {
		t.Fatalf("mosquitto_pub: %v %s", err, out)
	}
	g.Stop()

	segs, _ := filepath.Glob(filepath.Join(state, "bridges", "cloud", "*.seg"))
	if len(segs) != 1 {
		t.Fatalf("segments: %v", segs)
	}
	b, err := os.ReadFile(segs[0])
	if err != nil || len(b) < 16 || b[4] == 0 {
		t.Fatalf("segment %s: %v, %d bytes", segs[0], err, len(b))
	}
	b[4] = 0 // the version byte; every record is intact
	os.WriteFile(segs[0], b, 0o600)

	// The cloud comes up with a persistent reader registered, then edgegw.
	up := startCloudAt(t, cloudAddr, false)
	up.Mosq(t, "mosquitto_sub", "-t", "site/#", "-q", "1", "-i", "cloud-reader", "-c", "-E")
	waitCtx, waitCancel := context.WithTimeout(ctx, 20*time.Second)
	defer waitCancel()
	rest := up.Subscribe(waitCtx, "site/#", 20)
	g.Start()
	got := <-rest
	seen := map[string]bool{}
	for _, l := range got {
		seen[strings.TrimPrefix(l, "site/sensors/t ")] = true
	}
	missing := 0
	for i := range 20 {
		if !seen[fmt.Sprintf("m%02d", i)] {
			missing++
		}
	}
	if missing > 0 {
		t.Fatalf("%d of 20 spooled messages did not reach the cloud in 20 s after a damaged version byte in the segment header (every record intact); upstream got %q", missing, got)
	}
}

// TestBinaryQoS2DuplicatesAfterKill9: the real binary is killed with
// SIGKILL while it drains QoS 2 messages into mosquitto, then restarted:
// every message arrives exactly once (docs/bridge.md). The case that
// duplicated before the spool kept the flows' state: a message whose
// PUBREL the broker took (it delivered it and forgot the id) while the
// spool's ack of it was not yet in acks.log (acks are written once per
// sync_interval) came back as a new message; now its flow is found in the
// PUBREL phase and only the PUBREL is sent again. Over a round trip longer
// than the ack flush window and over loopback, where every message
// completed in the last flush window is such a case.
func TestBinaryQoS2DuplicatesAfterKill9(t *testing.T) {
	for _, tc := range []struct {
		name string
		rtt  time.Duration
	}{
		{"rtt200ms", 200 * time.Millisecond},
		{"loopback", 0},
	} {
		t.Run(tc.name, func(t *testing.T) { testQoS2Kill9(t, tc.rtt) })
	}
}

func testQoS2Kill9(t *testing.T, rtt time.Duration) {
	const n, killAt = 600, 150
	// The spool on tmpfs: kill -9 keeps the page cache anyway, and a quick
	// fsync keeps the ack flush window (20 ms + fsync) far below the
	// 200 ms round trip on a busy machine.
	spoolDir, err := os.MkdirTemp("/dev/shm", "edgegw-crash-")
	if err != nil {
		t.Fatalf("tmpfs: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(spoolDir) })
	up := startCloud(t, false)
	px := testutil.StartProxy(t, up.Addr)
	px.SetDelay(testutil.Down, rtt)
	g := newHarness(t).NoMetrics()
	g.Cfg.Persistence = &persistenceConf{Dir: spoolDir, Sync: "batch", SyncInterval: "20ms"}
	g.Bridge("cloud", px.Addr()).With("clean_session", false).With("ack_timeout", "5s").FastReconnect().Out("sensors/#", 2)

	// The cloud reader: QoS 2, counts every copy.
	var (
		mu  sync.Mutex
		got = make(map[string]int)
	)
	count := func() (distinct, copies int) {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range got {
			copies += c
		}
		return len(got), copies
	}
	mustToken(t, "subscribe", up.Client(t, "cloud-reader").Subscribe("sensors/#", 2, func(_ mqtt.Client, m mqtt.Message) {
		mu.Lock()
		got[string(m.Payload())]++
		mu.Unlock()
	}))

	g.Start()
	lc := g.Client("local-pub", false)
	toks := make([]mqtt.Token, n)
	for i := range toks {
		toks[i] = lc.Publish("sensors/t", 2, false, "m"+strconv.Itoa(i))
	}
	for i, tok := range toks {
		if !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
			t.Fatalf("local publish %d: %v", i, tok.Error())
		}
	}
	lc.Disconnect(0)

	testutil.Eventually(t, 30*time.Second, "the drain under way", func() bool { d, _ := count(); return d >= killAt })
	g.Kill()
	atKill, _ := count()

	px.SetDelay(testutil.Down, 0)
	g.Start()
	testutil.Eventually(t, 60*time.Second, "every message upstream", func() bool { d, _ := count(); return d == n })
	// A late copy comes before a last message through the same path.
	mustToken(t, "end marker", g.Client("local-pub", false).Publish("sensors/end", 2, false, "end"))
	testutil.Eventually(t, 30*time.Second, "the end marker", func() bool { mu.Lock(); defer mu.Unlock(); return got["end"] == 1 })

	distinct, copies := count()
	dups := copies - distinct
	t.Logf("QOS2-KILL9 %d messages, RTT %s, max_inflight_qos2 20, sync_interval 20ms: killed with %d upstream; after restart %d distinct, %d duplicates",
		n, rtt, atKill, distinct-1, dups)
	if distinct-1 != n {
		t.Fatalf("%d of %d messages lost", n-(distinct-1), n)
	}
	if dups > 0 {
		t.Errorf("%d QoS 2 duplicates after kill -9; docs/bridge.md promises exactly once", dups)
	}
}

// TestBinaryBridgeSpoolCannotOpen: one bridge's spool directory is a
// file. edgegw starts anyway; the local broker serves, the other bridge
// delivers upstream, and the failed bridge is reported in the log (ERROR,
// with the cause), in /healthz (503, naming it) and in its retained state
// topic ("failed"). The refusals of its messages are counted, and a burst
// of them is one log line, not one WARN per message.
func TestBinaryBridgeSpoolCannotOpen(t *testing.T) {
	up := startCloud(t, false)
	g := newHarness(t)
	state := g.Persist("", "")
	if err := os.MkdirAll(filepath.Join(state, "bridges"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(state, "bridges", "bad"), []byte("a file where a directory should be"), 0o600); err != nil {
		t.Fatal(err)
	}
	g.Cfg.Metrics.BridgeDownAfter = "1m"
	g.Bridge("bad", up.Addr).Out("alarms/#", 1)
	g.Bridge("good", up.Addr).FastReconnect().Out("sensors/#", 1)

	upstream := make(chan string, 16)
	mustToken(t, "subscribe upstream", up.Client(t, "cloud-reader").Subscribe("sensors/#", 1, func(_ mqtt.Client, m mqtt.Message) { upstream <- string(m.Payload()) }))

	g.Start()
	lc := g.Client("local", false)

	// The failed bridge's retained state, and local routing at all.
	states := make(chan string, 16)
	mustToken(t, "subscribe state", lc.Subscribe("$SYS/bridge/+/state", 1, func(_ mqtt.Client, m mqtt.Message) {
		states <- m.Topic() + " " + string(m.Payload())
	}))
	testutil.Eventually(t, 10*time.Second, "$SYS/bridge/bad/state failed", func() bool {
		select {
		case s := <-states:
			return s == "$SYS/bridge/bad/state failed"
		default:
			return false
		}
	})

	// The other bridge works.
	mustToken(t, "local publish", lc.Publish("sensors/t1", 1, false, "through the good bridge"))
	select {
	case m := <-upstream:
		if m != "through the good bridge" {
			t.Fatalf("upstream got %q", m)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the good bridge delivered nothing")
	}

	// /healthz names the failed bridge and its cause.
	var body string
	testutil.Eventually(t, 10*time.Second, "/healthz 503 naming the failed bridge", func() bool {
		var code int
		code, body = g.Healthz()
		return code == 503 && strings.Contains(body, "bridge bad failed") && strings.Contains(body, "not a directory")
	})
	if strings.Contains(body, "bridge good") {
		t.Errorf("/healthz blames the good bridge: %s", body)
	}
	logs := g.Logs()
	if !strings.Contains(logs, "level=ERROR") || !strings.Contains(logs, "bridge=bad") || !strings.Contains(logs, "not a directory") {
		t.Error("no ERROR line naming the bridge and the cause in the log")
	}
	t.Logf("healthz: %s", strings.TrimSpace(body))

	// An MQTT 5 publisher sends 89 QoS 1 messages for the failed bridge:
	// each is refused with 0x83, counted, and the bridge logs the burst in
	// one line.
	const refusals = 89
	host, port := hostPort(g.Addr)
	pub := exec.Command("mosquitto_pub", "-h", host, "-p", port, "-V", "5", "-q", "1", "-t", "alarms/x", "-l")
	pub.Stdin = strings.NewReader(strings.Repeat("alarm\n", refusals))
	out, _ := pub.CombinedOutput() // it reports the refusals; the counts below are the test
	var metrics map[string]float64
	testutil.Eventually(t, 10*time.Second, "edgegw_bridge_refused_total 89", func() bool {
		metrics = g.MetricsMap()
		return metrics[`edgegw_bridge_refused_total{bridge="bad"}`] == refusals
	})
	lines := 0
	for _, l := range strings.Split(g.Logs(), "\n") {
		if strings.Contains(l, "local messages refused") && strings.Contains(l, "bridge=bad") {
			lines++
		}
	}
	t.Logf("mosquitto_pub -V 5: %d refusals, %d bridge log lines; mosquitto_pub said: %.200s", refusals, lines, out)
	if lines != 1 {
		t.Errorf("%d bridge log lines for one burst of %d refusals; want 1", lines, refusals)
	}
	// The broker counts them too and writes no line per message.
	if v := metrics["edgegw_messages_not_stored_total"]; v != refusals {
		t.Errorf("edgegw_messages_not_stored_total is %v, want %d", v, refusals)
	}
	if n := strings.Count(g.Logs(), "message not stored"); n > 0 {
		t.Errorf("%d per-message \"message not stored\" lines in the log; want none above DEBUG", n)
	}
}

// TestBinaryBridgeQoS2ResentWhenBrokerLostSession: a cloud broker that
// comes back without the bridge's session (restarted without persistence,
// or a failover address) answers CONNECT with session present = 0. A QoS 2
// flow whose PUBREC the bridge had must then be sent again as a new
// message: re-sending only its PUBREL gets a PUBCOMP for a message the new
// broker never had (MQTT lets it), the record leaves the spool, and a
// message the sensor was acknowledged for never reaches the cloud (the
// 3.1.1 uplink once did that). docs/bridge.md: "At least once upstream",
// "With clean_session: true the broker forgot them, and they are sent
// again as new messages", "MQTT 3.1.1 and 5 alike", and one WARN line
// names the flows sent again.
func TestBinaryBridgeQoS2ResentWhenBrokerLostSession(t *testing.T) {
	forEachUplink(t, func(t *testing.T, ul uplink) {
		up := startCloud(t, false) // Debian mosquitto's defaults: no persistence
		// The proxy loses the first PUBREL towards the cloud, and all
		// after it on that connection, as a link that dies right then.
		proxy := testutil.StartProxy(t, up.Addr)
		var held atomic.Bool
		proxy.Filter(testutil.Up, func(pkt []byte) testutil.Verdict {
			if pkt[0] == 0x62 && held.CompareAndSwap(false, true) {
				return testutil.Sink
			}
			return testutil.Pass
		})
		g := newHarness(t).NoMetrics()
		g.Persist("batch", "10ms")
		g.Bridge("cloud", proxy.Addr()).Uplink(ul).With("clean_session", false).
			With("keepalive", "30s").With("ack_timeout", "30s").FastReconnect().
			Topic(topicConf{Pattern: "sensors/#", Direction: "out", QoS: 2, RemotePrefix: "site/"})
		g.Start()
		g.WaitLog("uplink connected")

		// mosquitto_pub -q 2 exits 0 once edgegw sent PUBCOMP: the message
		// is acknowledged.
		pub := func(msg string) {
			g.Mosq("mosquitto_pub", "-q", "2", "-i", "sensor-"+msg, "-t", "sensors/t1", "-m", msg)
		}

		// m1 reaches mosquitto, which answers PUBREC; the bridge's PUBREL is
		// lost with the link.
		pub("m1")
		testutil.Eventually(t, 10*time.Second, "the bridge's PUBREL of m1", held.Load)

		// The cloud broker restarts without the session; the reader is
		// subscribed before the bridge can reach it again.
		proxy.Refuse(true)
		up.Kill()
		up.Start()
		got := make(chan string, 16)
		mustToken(t, "cloud reader subscribe", up.Client(t, "cloud-reader").Subscribe("site/#", 2, func(_ mqtt.Client, m mqtt.Message) { got <- string(m.Payload()) }))
		proxy.Refuse(false)

		// A later message shows the bridge is through; m1 must arrive too.
		pub("m2")
		seen := map[string]int{}
		deadline := time.After(20 * time.Second)
		for seen["m2"] == 0 {
			select {
			case m := <-got:
				seen[m]++
			case <-deadline:
				t.Fatalf("m2 did not reach the cloud; got %v", seen)
			}
		}
		grace := time.After(3 * time.Second)
		for seen["m1"] == 0 {
			select {
			case m := <-got:
				seen[m]++
			case <-grace:
				t.Fatalf("m1, acknowledged to its sensor (PUBCOMP), never reached the cloud: after the broker lost the session "+
					"(CONNACK session present 0) the bridge re-sent only m1's PUBREL, the broker completed it with nothing, "+
					"and the record left the spool; the cloud got %v", seen)
			}
		}
		if seen["m1"] > 1 || seen["m2"] > 1 {
			t.Fatalf("QoS 2 duplicates at the cloud: %v", seen)
		}
		// docs/bridge.md: "One WARN line says so, with the number of flows."
		if logs := g.Logs(); !strings.Contains(logs, "upstream has no session for the bridge") || !strings.Contains(logs, "flows=1") {
			t.Fatal("no WARN line naming the 1 flow sent again as a new message")
		}
	})
}

// TestBinaryBridgeRetainedCommandStaysRetained: a command the cloud
// publishes retained while the bridge is connected must be retained
// locally too ("The retain flag is kept", docs/bridge.md), so a device
// that subscribes later gets it. Over 3.1.1 the bridge flag makes
// mosquitto forward the retain flag; over MQTT 5 the bridge's SUBSCRIBE
// must ask for Retain As Published, or the broker clears the flag on live
// messages and the command is delivered but never retained locally.
func TestBinaryBridgeRetainedCommandStaysRetained(t *testing.T) {
	forEachUplink(t, func(t *testing.T, ul uplink) {
		up := startCloud(t, false)
		g := newHarness(t).NoMetrics()
		g.Persist("batch", "10ms")
		g.Bridge("cloud", up.Addr).Uplink(ul).With("reconnect_min", "100ms").With("reconnect_max", "500ms").
			Topic(topicConf{Pattern: "cmd/#", Direction: "in", QoS: 1, RemotePrefix: "site-a/"})
		g.Start()

		// A live local subscriber sees every command that crosses.
		lines := make(chan string, 100)
		mustToken(t, "live subscribe", g.Client("live", false).Subscribe("cmd/#", 1, func(_ mqtt.Client, m mqtt.Message) {
			lines <- m.Topic() + " " + string(m.Payload())
		}))
		cloudPub := func(args ...string) { up.Mosq(t, "mosquitto_pub", append([]string{"-q", "1"}, args...)...) }
		seen := func(want string) func() bool {
			return func() bool {
				select {
				case l := <-lines:
					return l == want
				case <-time.After(100 * time.Millisecond):
					return false
				}
			}
		}
		// The bridge's subscription is in place once a ping crosses.
		testutil.Eventually(t, 10*time.Second, "a live command crosses the bridge", func() bool {
			cloudPub("-t", "site-a/cmd/ping", "-m", "ping")
			return seen("cmd/ping ping")()
		})
		// Now a retained command, published while the bridge is connected.
		cloudPub("-t", "site-a/cmd/valve", "-m", "open", "-r")
		testutil.Eventually(t, 5*time.Second, "the retained command reaches the live subscriber", seen("cmd/valve open"))

		// A device that subscribes afterwards gets it as retained.
		host, port := hostPort(g.Addr)
		b, _ := exec.Command("mosquitto_sub", "-h", host, "-p", port, "-t", "cmd/valve", "-v",
			"-C", "1", "-W", "2", "--retained-only").Output()
		if got := strings.TrimSpace(string(b)); got != "cmd/valve open" {
			t.Errorf("uplink %s: a device subscribing after the cloud's retained command got %q, want the retained %q",
				ul.Name, got, "cmd/valve open")
		}
	})
}

// oversizeRig is the binary bridging to a Debian mosquitto with
// max_packet_size 200 (the cloud), with a paho reader subscribed to site/#
// on it. Over MQTT 3.1.1 one message over the cloud's limit once made
// mosquitto close the connection every time the bridge sent it; the bridge
// reconnected about 10 times a second (every CONNACK reset the backoff),
// sent it first again, and every message acknowledged behind it stayed in
// the spool.
type oversizeRig struct {
	g   *harness
	mu  sync.Mutex
	got map[string]bool // payloads the cloud reader received
}

func startOversizeRig(t *testing.T, bridge func(*bridgeConf)) *oversizeRig {
	t.Helper()
	up := startCloud(t, false, "max_packet_size 200")
	r := &oversizeRig{got: map[string]bool{}}
	mustToken(t, "cloud reader subscribe", up.Client(t, "cloud-reader").Subscribe("site/#", 1, func(_ mqtt.Client, m mqtt.Message) {
		r.mu.Lock()
		r.got[string(m.Payload())] = true
		r.mu.Unlock()
	}))
	r.g = newHarness(t)
	r.g.Persist("", "")
	b := r.g.Bridge("cloud", up.Addr)
	bridge(b)
	b.Topic(topicConf{Pattern: "sensors/#", Direction: "out", QoS: 1, RemotePrefix: "site/"})
	r.g.Start()
	r.g.WaitLog("uplink connected")
	return r
}

func (r *oversizeRig) pub(msg string) {
	r.g.Mosq("mosquitto_pub", "-q", "1", "-t", "sensors/t1", "-m", msg)
}

func (r *oversizeRig) has(msg string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.got[msg]
}

// oversizeMsg is a 426-byte PUBLISH to site/sensors/t1 over MQTT 3.1.1
// (2 + 15 topic + 2 packet id + 404 payload = 423 of remaining length, in
// 2 bytes, after the type byte).
var oversizeMsg = "big " + strings.Repeat("x", 400)

// TestBinaryMaxPacketSizeDropsOversize: with bridges[].max_packet_size
// set to the cloud's limit, the oversize message is dropped before it is
// sent, counted as packet_too_large and as refused in the ledger, and
// every message around it is delivered, on one connection. Over MQTT
// 3.1.1, where the broker cannot say its limit, and over MQTT 5.
func TestBinaryMaxPacketSizeDropsOversize(t *testing.T) {
	forEachUplink(t, func(t *testing.T, ul uplink) {
		r := startOversizeRig(t, func(b *bridgeConf) { b.Uplink(ul).With("max_packet_size", 200) })
		r.pub("before")
		r.pub(oversizeMsg)
		const after = 50
		for i := range after {
			r.pub(fmt.Sprintf("after-%d", i))
		}
		testutil.Eventually(t, 15*time.Second, "every message after the large one at the cloud", func() bool {
			for i := range after {
				if !r.has(fmt.Sprintf("after-%d", i)) {
					return false
				}
			}
			return r.has("before")
		})
		testutil.Eventually(t, 5*time.Second, "the ledger settled", func() bool {
			return r.g.Metric(`edgegw_bridge_ledger_messages{bridge="cloud",term="queued"}`) == 0
		})
		m := r.g.MetricsMap()
		tooLarge := m[`edgegw_bridge_upstream_dropped_total{bridge="cloud",reason="packet_too_large"}`]
		refused := m[`edgegw_bridge_ledger_dropped_messages{bridge="cloud",reason="refused"}`]
		delivered := m[`edgegw_bridge_ledger_messages{bridge="cloud",term="delivered"}`]
		connects := m[`edgegw_bridge_connects_total{bridge="cloud"}`]
		if r.has(oversizeMsg) || tooLarge != 1 || refused != 1 || delivered != after+1 || connects != 1 {
			t.Fatalf("large one at the cloud %v, packet_too_large %v, ledger refused %v, delivered %v, connects %v; want false, 1, 1, %d, 1",
				r.has(oversizeMsg), tooLarge, refused, delivered, connects, after+1)
		}
	})
}

// connectedAt returns the times of the bridge's "uplink connected" lines.
func connectedAt(t *testing.T, logs string) []time.Time {
	t.Helper()
	var ts []time.Time
	for _, m := range regexp.MustCompile(`time=(\S+) level=INFO msg="uplink connected" bridge=cloud`).FindAllStringSubmatch(logs, -1) {
		at, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			t.Fatalf("log time %q: %v", m[1], err)
		}
		ts = append(ts, at)
	}
	return ts
}

// TestBinaryOversizeWithoutLimitSaysSo: without max_packet_size, over MQTT
// 3.1.1, the oversize message is not dropped (the bridge cannot tell it
// from a message a flaky link cut several times), but the bridge says
// what is wrong and stops hammering the broker:
//   - one ERROR line naming the bridge, the message's topic and size and
//     bridges[].max_packet_size; /status.json's last_error carries the
//     same hint and last_error_text explains it;
//   - the reconnects slow down: with reconnect_min 50ms and reconnect_max
//     1s, the backoff doubles after every connection that delivered
//     nothing, so the 8 connections after the message take at least
//     50+50+100+200+400+500+500 ms = 1.8 s (the timers' lower bounds).
//     When every CONNACK reset it, that was 8 connections in 0.4-0.5 s,
//     for ever. The test asserts at least 1.5 s, which a slow machine only
//     makes longer.
func TestBinaryOversizeWithoutLimitSaysSo(t *testing.T) {
	r := startOversizeRig(t, func(b *bridgeConf) { b.With("reconnect_min", "50ms").With("reconnect_max", "1s") })
	r.pub("before")
	testutil.Eventually(t, 10*time.Second, "before at the cloud", func() bool { return r.has("before") })
	r.pub(oversizeMsg)
	r.pub("after")

	testutil.Eventually(t, 15*time.Second, "8 connections", func() bool { return len(connectedAt(t, r.g.Logs())) >= 8 })
	logs := r.g.Logs()
	ts := connectedAt(t, logs)
	span := ts[7].Sub(ts[0])
	t.Logf("OVERSIZE-RECONNECTS 8 connections in %s", span.Round(time.Millisecond))
	if span < 1500*time.Millisecond {
		t.Errorf("8 connections in %s; want >= 1.5 s (the backoff must grow while no connection delivers anything)", span)
	}
	want := `level=ERROR msg="uplink keeps ending right after the same message was sent: if the cloud broker limits packet size, set bridges[].max_packet_size to its limit`
	if n := strings.Count(logs, want); n != 1 {
		t.Errorf("%d ERROR lines %q; want 1", n, want)
	}
	if !regexp.MustCompile(`level=ERROR msg="uplink keeps ending[^\n]* bridge=cloud [^\n]*topic=site/sensors/t1 size=426 `).MatchString(logs) {
		t.Error("the ERROR line does not name the bridge, the topic and the size (426)")
	}
	if r.has("after") || r.has(oversizeMsg) {
		t.Errorf("at the cloud: after %v, large one %v; want neither (the large one blocks, and is not dropped)", r.has("after"), r.has(oversizeMsg))
	}

	var doc struct {
		Bridges []struct {
			Name          string `json:"name"`
			LastError     string `json:"last_error"`
			LastErrorText string `json:"last_error_text"`
		} `json:"bridges"`
	}
	if err := r.g.Status(&doc); err != nil || len(doc.Bridges) != 1 {
		t.Fatalf("status.json: %v %+v", err, doc)
	}
	b := doc.Bridges[0]
	if !strings.Contains(b.LastError, "426 bytes, topic site/sensors/t1") || !strings.Contains(b.LastError, "set bridges[].max_packet_size") ||
		!strings.Contains(b.LastErrorText, "Set bridges[].max_packet_size") {
		t.Errorf("status.json bridge %s: last_error %q, last_error_text %q", b.Name, b.LastError, b.LastErrorText)
	}
	if m := r.g.Metric(`edgegw_bridge_ledger_dropped_messages{bridge="cloud",reason="refused"}`); m != 0 {
		t.Errorf("ledger refused %v; want 0: nothing is dropped without the key", m)
	}
}
