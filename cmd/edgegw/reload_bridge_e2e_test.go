package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgegw/edgegw/internal/testutil"
)

// TestReloadBridgeRules (issue 15, point 1): SIGHUP changes a running
// bridge's topic rules with the real binary and a real mosquitto upstream.
// An out rule added while the cloud is down spools at once and reaches the
// cloud with the backlog spooled before it; an in rule added then is
// subscribed at the next connection; rules added and removed while
// connected take effect on the live connection; a changed keepalive
// reconnects the bridge. Nothing spooled is lost.
func TestReloadBridgeRules(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildEdgegw(t)
	local, cloud, maddr := freePort(t), freePort(t), freePort(t)
	state := t.TempDir()
	cfg := filepath.Join(t.TempDir(), "edgegw.yaml")
	writeCfg := func(keepalive string, rules ...string) {
		os.WriteFile(cfg, []byte(fmt.Sprintf(`
listeners:
  - {name: lan, type: tcp, address: "%s"}
metrics: {address: "%s"}
persistence: {dir: "%s", sync: batch, sync_interval: 10ms}
bridges:
  - name: cloud
    addresses: ["tcp://%s"]
    client_id: edge-reload
    keepalive: %s
    ack_timeout: 2s
    reconnect_min: 100ms
    reconnect_max: 300ms
    topics:
      - %s
`, local, maddr, state, cloud, keepalive, strings.Join(rules, "\n      - "))), 0o600)
	}
	const (
		sensorsOut = `{pattern: "sensors/#", direction: out, qos: 1}`
		alertsOut  = `{pattern: "alerts/#", direction: out, qos: 1}`
		cmdIn      = `{pattern: "cmd/#", direction: in, qos: 1}`
		otaIn      = `{pattern: "ota/#", direction: in, qos: 1}`
	)
	writeCfg("2s", sensorsOut)

	cloudData := t.TempDir()
	up := startMosquitto(t, cloud, cloudData)
	var atCloud, atLocal seen
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// A persistent reader (mosquitto_sub -c) registered before anything
	// flows keeps what arrives at the cloud across its restart.
	first := subscribeUpstream(ctx, t, cloud, "#", 1)

	g := startEdgegw(t, bin, "--config", cfg)
	connected := func() int { return strings.Count(g.logs(), `msg="uplink connected"`) }
	testutil.Eventually(t, 10*time.Second, "bridge connected", func() bool { return connected() == 1 })
	reloads := 0
	hup := func(keepalive string, rules ...string) {
		t.Helper()
		writeCfg(keepalive, rules...)
		reloads++
		g.cmd.Process.Signal(syscall.SIGHUP)
		testutil.Eventually(t, 10*time.Second, "reload", func() bool { return strings.Count(g.logs(), `msg=reloaded`) == reloads })
		if strings.Contains(g.logs(), "need a restart") {
			t.Fatalf("reload asks for a restart:\n%s", g.logs())
		}
	}
	pub := mqttClient(t, local, "local-pub", false)
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
	testutil.Eventually(t, 10*time.Second, "bridge disconnected", func() bool { return strings.Contains(g.logs(), `msg="uplink disconnected"`) })
	for i := 1; i <= 20; i++ {
		publish(pub, fmt.Sprintf("sensors/a/%d", i))
	}
	hup("2s", sensorsOut, alertsOut, cmdIn)
	if !strings.Contains(g.logs(), "subscriptions=\"not connected") {
		t.Fatalf("reload while disconnected did not say the subscription waits for the connection:\n%s", g.logs())
	}
	publish(pub, "alerts/fire")

	up = startMosquitto(t, cloud, cloudData)
	// The bridge's promise: the cloud acknowledged every spooled message
	// (the spool drains only on PUBACKs read from the wire).
	// 22 acknowledgements: sensors/a/0, the 20 spooled while down, and
	// alerts/fire, which only the reloaded rules take.
	testutil.Eventually(t, 30*time.Second, "the spool drained into the cloud", func() bool {
		return metricValue(t, maddr, `edgegw_bridge_spool_messages{bridge="cloud"}`) == 0 &&
			metricValue(t, maddr, `edgegw_bridge_acked_total{bridge="cloud"}`) >= 22
	})
	// Not checked here: what the cloud then hands a reader. mosquitto did
	// not restore its persistent reader's session across the restart, so
	// the reader saw the backlog only when it reconnected before the
	// bridge did (a race the bridge won in loaded full runs). Spool order
	// upstream is checked by the bridge's own tests (TestDrainOverSlowLink,
	// TestQoS2IntoDefaultMosquitto).
	observer := mqttClient(t, cloud, "cloud-observer", false)
	mustToken(t, "cloud subscribe", observer.Subscribe("#", 1, atCloud.handler))

	// The in rule added while down was subscribed at the connection.
	sub := mqttClient(t, local, "local-sub", false)
	mustToken(t, "local subscribe", sub.Subscribe("#", 1, atLocal.handler))
	cloudPub := mqttClient(t, cloud, "cloud-pub", false)
	testutil.Eventually(t, 10*time.Second, "cmd/go from the cloud", func() bool {
		publish(cloudPub, "cmd/go")
		return atLocal.has("cmd/go")
	})

	// Connected: remove alerts/# and cmd/#, add ota/#.
	hup("2s", sensorsOut, otaIn)
	if !strings.Contains(g.logs(), "subscribed 1, unsubscribed 1 on the live connection") {
		t.Fatalf("the live connection's subscriptions were not changed:\n%s", g.logs())
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
	if !strings.Contains(g.logs(), `changed=keepalive`) {
		t.Fatalf("keepalive change not logged:\n%s", g.logs())
	}
	testutil.Eventually(t, 10*time.Second, "reconnected", func() bool { return connected() == 3 })
	publish(pub, "sensors/after")
	testutil.Eventually(t, 10*time.Second, "sensors/after at the cloud", func() bool { return atCloud.has("sensors/after") })
}

// metricValue reads one series' value from the binary's /metrics (-1 when
// it cannot be read or is missing).
func metricValue(t *testing.T, addr, series string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}
