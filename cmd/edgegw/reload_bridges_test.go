package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgegw/edgegw/internal/testutil"
)

// TestReloadBridgeRules: SIGHUP changes a running bridge's topic rules
// with the real binary and a real mosquitto upstream. An out rule added
// while the cloud is down spools at once and reaches the cloud with the
// backlog spooled before it; an in rule added then is subscribed at the
// next connection; rules added and removed while connected take effect on
// the live connection; a changed keepalive reconnects the bridge. Nothing
// spooled is lost.
func TestReloadBridgeRules(t *testing.T) {
	sensorsOut := topicConf{Pattern: "sensors/#", Direction: "out", QoS: 1}
	alertsOut := topicConf{Pattern: "alerts/#", Direction: "out", QoS: 1}
	cmdIn := topicConf{Pattern: "cmd/#", Direction: "in", QoS: 1}
	otaIn := topicConf{Pattern: "ota/#", Direction: "in", QoS: 1}

	up := startCloud(t, true)
	g := newHarness(t)
	g.Persist("batch", "10ms")
	b := g.Bridge("cloud", up.Addr).With("keepalive", "2s").With("ack_timeout", "2s").FastReconnect().Topic(sensorsOut)
	var atCloud, atLocal seen
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// A persistent reader (mosquitto_sub -c) registered before anything
	// flows keeps what arrives at the cloud across its restart.
	first := up.Subscribe(ctx, "#", 1)

	g.Start()
	connected := func() int { return strings.Count(g.Logs(), `msg="uplink connected"`) }
	testutil.Eventually(t, 10*time.Second, "bridge connected", func() bool { return connected() == 1 })
	hup := func(keepalive string, rules ...topicConf) {
		t.Helper()
		b.With("keepalive", keepalive)
		b.Topics = rules
		g.Reload()
		if strings.Contains(g.Logs(), "need a restart") {
			t.Fatal("reload asks for a restart")
		}
	}
	pub := g.Client("local-pub", false)
	publish := func(c mqtt.Client, topic string) {
		t.Helper()
		mustToken(t, "publish "+topic, c.Publish(topic, 1, false, topic))
	}
	publish(pub, "sensors/a/0")
	if got := <-first; len(got) != 1 || got[0] != "sensors/a/0 sensors/a/0" {
		t.Fatalf("cloud reader got %q", got)
	}

	// Cloud down: a backlog is spooled, then an out and an in rule are added.
	up.Stop()
	testutil.Eventually(t, 10*time.Second, "bridge disconnected", func() bool { return strings.Contains(g.Logs(), `msg="uplink disconnected"`) })
	for i := 1; i <= 20; i++ {
		publish(pub, fmt.Sprintf("sensors/a/%d", i))
	}
	hup("2s", sensorsOut, alertsOut, cmdIn)
	if !strings.Contains(g.Logs(), "subscriptions=\"not connected") {
		t.Fatal("reload while disconnected did not say the subscription waits for the connection")
	}
	publish(pub, "alerts/fire")

	up.Start()
	// The bridge's promise: the cloud acknowledged every spooled message
	// (the spool drains only on PUBACKs read from the wire).
	// 22 acknowledgements: sensors/a/0, the 20 spooled while down, and
	// alerts/fire, which only the reloaded rules take.
	testutil.Eventually(t, 30*time.Second, "the spool drained into the cloud", func() bool {
		return g.Metric(`edgegw_bridge_spool_messages{bridge="cloud"}`) == 0 &&
			g.Metric(`edgegw_bridge_acked_total{bridge="cloud"}`) >= 22
	})
	// Not checked here: what the cloud then hands a reader. mosquitto did
	// not restore its persistent reader's session across the restart, so
	// the reader saw the backlog only when it reconnected before the
	// bridge did (a race the bridge won in loaded full runs). Spool order
	// upstream is checked by the bridge's own tests (TestDrainOverSlowLink,
	// TestQoS2IntoDefaultMosquitto).
	observer := up.Client(t, "cloud-observer")
	mustToken(t, "cloud subscribe", observer.Subscribe("#", 1, atCloud.handler))

	// The in rule added while down was subscribed at the connection.
	sub := g.Client("local-sub", false)
	mustToken(t, "local subscribe", sub.Subscribe("#", 1, atLocal.handler))
	cloudPub := up.Client(t, "cloud-pub")
	testutil.Eventually(t, 10*time.Second, "cmd/go from the cloud", func() bool {
		publish(cloudPub, "cmd/go")
		return atLocal.has("cmd/go")
	})

	// Connected: remove alerts/# and cmd/#, add ota/#.
	hup("2s", sensorsOut, otaIn)
	if !strings.Contains(g.Logs(), "subscribed 1, unsubscribed 1 on the live connection") {
		t.Fatal("the live connection's subscriptions were not changed")
	}
	testutil.Eventually(t, 10*time.Second, "ota/x from the cloud", func() bool {
		publish(cloudPub, "ota/x")
		return atLocal.has("ota/x")
	})
	// Order is kept on each path, so a fence behind a removed topic proves
	// the removed topic did not pass.
	publish(pub, "alerts/fire2")
	publish(pub, "sensors/fence")
	testutil.Eventually(t, 10*time.Second, "sensors/fence at the cloud", func() bool { return atCloud.has("sensors/fence") })
	if atCloud.has("alerts/fire2") {
		t.Fatal("alerts/fire2 reached the cloud after its rule was removed")
	}
	publish(cloudPub, "cmd/stop")
	publish(cloudPub, "ota/fence")
	testutil.Eventually(t, 10*time.Second, "ota/fence locally", func() bool { return atLocal.has("ota/fence") })
	if atLocal.has("cmd/stop") {
		t.Fatal("cmd/stop arrived locally after its rule was removed")
	}
	if connected() != 2 {
		t.Fatalf("the bridge reconnected for a rules-only reload: %d connections", connected())
	}

	// A connection setting reconnects this bridge, with the new value.
	hup("3s", sensorsOut, otaIn)
	if !strings.Contains(g.Logs(), `changed=keepalive`) {
		t.Fatal("keepalive change not logged")
	}
	testutil.Eventually(t, 10*time.Second, "reconnected", func() bool { return connected() == 3 })
	publish(pub, "sensors/after")
	testutil.Eventually(t, 10*time.Second, "sensors/after at the cloud", func() bool { return atCloud.has("sensors/after") })
}
