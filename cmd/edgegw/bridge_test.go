package main

import (
	"context"
	"fmt"
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
