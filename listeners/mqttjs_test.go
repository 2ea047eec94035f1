package listeners_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgegw/edgegw/gateway"
)

// TestWebSocketMQTTJS runs MQTT.js (npm package "mqtt", pinned in
// testdata/mqttjs/package-lock.json) against the WebSocket listener. Node
// and npm are part of the test environment: their absence is a failure.
func TestWebSocketMQTTJS(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is required for this test (install Node.js): %v", err)
	}
	dir, err := filepath.Abs(filepath.Join("testdata", "mqttjs"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "mqtt")); err != nil {
		npm, err := exec.LookPath("npm")
		if err != nil {
			t.Fatalf("npm is required to install MQTT.js: %v", err)
		}
		cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
		}
	}

	h := newHarness(t, gateway.Options{AllowAnonymous: true})
	addr := h.ws(nil)
	rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
	defer rcancel()
	cmd := exec.CommandContext(rctx, node, "pubsub.js", "ws://"+addr+"/mqtt")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node pubsub.js: %v\n%s", err, out)
	}
	for _, want := range []string{"received mqttjs/v4 hello from mqtt.js v4", "received mqttjs/v5 hello from mqtt.js v5"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
