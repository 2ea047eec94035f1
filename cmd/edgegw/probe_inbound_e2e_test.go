package main

import (
	"bufio"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgegw/edgegw/internal/testutil"
)

// TestProbeInboundRetainedCommandStaysRetained: a command the cloud
// publishes retained while the bridge is connected must be retained
// locally too ("The retain flag is kept", docs/bridge.md), so a device
// that subscribes later gets it. Over 3.1.1 the bridge flag makes
// mosquitto forward the retain flag; over MQTT 5 the bridge's SUBSCRIBE
// must ask for Retain As Published, or the broker clears the flag on live
// messages and the command is delivered but never retained locally.
func TestProbeInboundRetainedCommandStaysRetained(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildEdgegw(t)
	for _, proto := range []string{"3.1.1", "5"} {
		t.Run("protocol="+proto, func(t *testing.T) {
			local, cloud := freePort(t), freePort(t)
			lhost, lport, _ := net.SplitHostPort(local)
			chost, cport, _ := net.SplitHostPort(cloud)
			cp, _ := strconv.Atoi(cport)
			testutil.StartMosquitto(t, fmt.Sprintf("listener %s 127.0.0.1\nallow_anonymous true\n", cport), cp)
			cfg := writeConfig(t, fmt.Sprintf(`
listeners:
  - {name: lan, type: tcp, address: "%s"}
metrics: {address: ""}
persistence: {dir: "%s", sync: batch, sync_interval: 10ms}
bridges:
  - name: cloud
    addresses: ["tcp://%s"]
    client_id: edge-probe-retain
    protocol: "%s"
    reconnect_min: 100ms
    reconnect_max: 500ms
    topics:
      - {pattern: "cmd/#", direction: in, qos: 1, remote_prefix: "site-a/"}
`, local, t.TempDir(), cloud, proto))
			startEdgegw(t, bin, "-config", cfg)
			waitListening(t, local)

			// A live local subscriber sees every command that crosses.
			live := exec.Command("mosquitto_sub", "-h", lhost, "-p", lport, "-t", "cmd/#", "-v", "-q", "1")
			out, err := live.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := live.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { live.Process.Kill(); live.Wait() })
			lines := make(chan string, 100)
			go func() {
				sc := bufio.NewScanner(out)
				for sc.Scan() {
					lines <- sc.Text()
				}
				close(lines)
			}()
			cloudPub := func(args ...string) {
				a := append([]string{"-h", chost, "-p", cport, "-q", "1"}, args...)
				if b, err := exec.Command("mosquitto_pub", a...).CombinedOutput(); err != nil {
					t.Fatalf("mosquitto_pub %v: %v %s", a, err, b)
				}
			}
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
			b, _ := exec.Command("mosquitto_sub", "-h", lhost, "-p", lport, "-t", "cmd/valve", "-v",
				"-C", "1", "-W", "2", "--retained-only").Output()
			if got := strings.TrimSpace(string(b)); got != "cmd/valve open" {
				t.Errorf("protocol %s: a device subscribing after the cloud's retained command got %q, want the retained %q",
					proto, got, "cmd/valve open")
			}
		})
	}
}
