package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
