package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgegw/edgegw/internal/testutil"
)

// startMosquitto runs Debian's mosquitto as the cloud broker on addr with
// its persistence in dir, so a persistent subscriber's session survives a
// restart of the cloud broker (Stop saves it; a later startMosquitto on the
// same dir loads it).
func startMosquitto(t *testing.T, addr, dir string) *testutil.Mosquitto {
	t.Helper()
	_, port, _ := net.SplitHostPort(addr)
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatalf("mosquitto address %q: %v", addr, err)
	}
	conf := fmt.Sprintf("listener %s 127.0.0.1\nallow_anonymous true\npersistence true\npersistence_location %s/\n", port, dir)
	return testutil.StartMosquitto(t, conf, p)
}

// subscribeUpstream runs mosquitto_sub on the upstream until it has n
// messages and returns its output lines.
func subscribeUpstream(ctx context.Context, t *testing.T, addr, topic string, n int) <-chan []string {
	host, port, _ := net.SplitHostPort(addr)
	out := make(chan []string, 1)
	cmd := exec.CommandContext(ctx, "mosquitto_sub", "-h", host, "-p", port, "-t", topic, "-v", "-q", "1",
		"-C", fmt.Sprint(n), "-i", "cloud-reader", "-c") // persistent: nothing is missed while we reconnect
	go func() {
		b, _ := cmd.Output()
		out <- strings.Split(strings.TrimSpace(string(b)), "\n")
	}()
	return out
}

// TestBinaryBridgeSurvivesKill9 is principle 4 end to end with the real
// binary: a QoS 1 message acknowledged by edgegw while the cloud is down
// survives kill -9 of edgegw and reaches the cloud after both come back.
func TestBinaryBridgeSurvivesKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildEdgegw(t)
	local, cloud := freePort(t), freePort(t)
	lhost, lport, _ := net.SplitHostPort(local)
	state := t.TempDir()
	cfg := filepath.Join(t.TempDir(), "edgegw.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`
listeners:
  - {name: lan, type: tcp, address: "%s"}
metrics: {address: ""}
persistence: {dir: "%s", sync: batch, sync_interval: 10ms}
bridges:
  - name: cloud
    addresses: ["tcp://%s"]
    client_id: edge-test
    keepalive: 2s
    ack_timeout: 2s
    reconnect_min: 100ms
    reconnect_max: 500ms
    topics:
      - {pattern: "sensors/#", direction: out, qos: 1, remote_prefix: "site-a/"}
`, local, state, cloud)), 0o600)

	// Cloud up: a message flows through at once.
	cloudData := t.TempDir()
	up := startMosquitto(t, cloud, cloudData)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Register the persistent upstream reader first, then leave.
	first := subscribeUpstream(ctx, t, cloud, "site-a/#", 1)
	g := startEdgegw(t, bin, "--config", cfg)
	testutil.Eventually(t, 10*time.Second, "edgegw listening", func() bool {
		c, err := net.Dial("tcp", local)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	testutil.Eventually(t, 10*time.Second, "bridge connected", func() bool { return strings.Contains(g.logs(), "connected") })
	pub := func(topic, msg string) {
		t.Helper()
		out, err := exec.CommandContext(ctx, "mosquitto_pub", "-h", lhost, "-p", lport, "-q", "1", "-t", topic, "-m", msg).CombinedOutput()
		if err != nil {
			t.Fatalf("mosquitto_pub: %v %s", err, out)
		}
	}
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
	g.cmd.Process.Signal(syscall.SIGKILL)
	<-g.done
	g.done <- nil

	// Both come back; every acknowledged message reaches the cloud.
	startMosquitto(t, cloud, cloudData)
	rest := subscribeUpstream(ctx, t, cloud, "site-a/#", 20)
	startEdgegw(t, bin, "--config", cfg)
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
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildEdgegw(t)
	local, cloud, maddr := freePort(t), freePort(t), freePort(t)
	cfg := filepath.Join(t.TempDir(), "edgegw.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`
listeners:
  - {name: lan, type: tcp, address: "%s"}
metrics: {address: "%s", bridge_down_after: 1s}
bridges:
  - name: cloud
    addresses: ["tcp://%s"]
    client_id: edge-health
    reconnect_min: 100ms
    reconnect_max: 300ms
    topics:
      - {pattern: "sensors/#", direction: out}
`, local, maddr, cloud)), 0o600)
	startEdgegw(t, bin, "--config", cfg)
	health := func() (int, string) {
		resp, err := http.Get("http://" + maddr + "/healthz")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	var body string
	testutil.Eventually(t, 15*time.Second, "/healthz 503 naming the bridge", func() bool {
		code, b := health()
		body = b
		return code == 503 && strings.Contains(b, "bridge cloud disconnected")
	})
	t.Logf("unhealthy: %s", strings.TrimSpace(body))
	startMosquitto(t, cloud, t.TempDir())
	testutil.Eventually(t, 15*time.Second, "/healthz 200 after the bridge connects", func() bool {
		code, _ := health()
		return code == 200
	})
}
