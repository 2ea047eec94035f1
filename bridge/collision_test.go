package bridge_test

import (
	"bytes"
	"log/slog"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgegw/edgegw/bridge"
	"github.com/edgegw/edgegw/internal/testutil"
)

// lockedLog is a log a slog handler writes and a test reads.
type lockedLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestClientIDCollisionNamed: two bridges with one client id into a real
// mosquitto end each other's connection at every reconnect; within 10 s,
// with the default reconnect_min, each logs one ERROR line naming the
// client id, and its last error (the status page, /status.json) says
// another client probably uses it. Debian's mosquitto (2.0.11) just
// closes the socket over both protocols: the streak names it
// (TestTakenOverNamedAtOnce: an upstream that says 0x8E).
func TestClientIDCollisionNamed(t *testing.T) {
	for _, proto := range []string{bridge.Protocol311, bridge.Protocol5} {
		t.Run("mqtt"+proto, func(t *testing.T) {
			up := startMosquitto(t)
			gw := startGateway(t)
			var logs [2]*lockedLog
			var bs [2]*running
			for i := range bs {
				cfg := testConfig(t, "b"+string(rune('1'+i)), up.url())
				cfg.ClientID = "edge-shared"
				cfg.Protocol = proto
				cfg.ReconnectMin, cfg.ReconnectMax = bridge.DefaultReconnectMin, bridge.DefaultReconnectMax
				cfg.KeepAlive = 30 * time.Second
				logs[i] = &lockedLog{}
				b, err := bridge.New(cfg, gw.srv, slog.New(slog.NewTextHandler(logs[i], nil)))
				if err != nil {
					t.Fatal(err)
				}
				bs[i] = &running{Bridge: b}
				bs[i].start(t)
			}
			start := time.Now()
			for i, b := range bs {
				testutil.Eventually(t, 10*time.Second-time.Since(start), "collision named", func() bool {
					return strings.Contains(b.Stats().LastError, `another client is probably using client id "edge-shared"`)
				})
				lines := 0
				for _, l := range strings.Split(logs[i].String(), "\n") {
					if strings.Contains(l, "level=ERROR") && strings.Contains(l, "another client is probably using this bridge's client id") {
						lines++
						if !strings.Contains(l, "lower max_inflight_qos2") {
							t.Errorf("bridge %d: the ERROR line does not name the other cause, a QoS 2 quota below max_inflight_qos2: %s", i, l)
						}
						if !strings.Contains(l, "client_id=edge-shared") {
							t.Errorf("bridge %d: the ERROR line does not name the client id: %s", i, l)
						}
					}
				}
				if lines != 1 {
					t.Errorf("bridge %d: %d ERROR lines naming the collision, want 1:\n%s", i, lines, logs[i].String())
				}
			}
			t.Logf("both named after %v", time.Since(start).Round(time.Millisecond))
		})
	}
}

// TestNoCollisionForOneBridge: a lone bridge whose upstream restarts twice
// right after it connected is not said to share its client id: while the
// upstream is down, an attempt fails before its CONNACK, which two
// clients with one id never cause.
func TestNoCollisionForOneBridge(t *testing.T) {
	up := startMosquitto(t)
	gw := startGateway(t)
	b := runBridge(t, testConfig(t, "lone", up.url()), gw.srv)
	restart := func() {
		b.waitState(t, bridge.Connected)
		failed := b.Stats().ConnectFailures
		up.Kill()
		testutil.Eventually(t, 10*time.Second, "a failed attempt", func() bool { return b.Stats().ConnectFailures > failed })
		up.Start()
	}
	restart()
	restart()
	b.waitState(t, bridge.Connected)
	if e := b.Stats().LastError; strings.Contains(e, "another client") {
		t.Errorf("last error %q names a collision", e)
	}
}

// TestTakenOverNamedAtOnce: over MQTT 5 an upstream that says why it
// ended the connection, DISCONNECT 0x8E session taken over (the gateway's
// own broker does; Debian's mosquitto 2.0.11 just closes the socket),
// names the collision at the first such end, without a streak: one other
// client (mosquitto_pub) connecting once with the bridge's client id is
// enough.
func TestTakenOverNamedAtOnce(t *testing.T) {
	up := startGateway(t) // the upstream
	gw := startGateway(t)
	cfg := testConfig(t, "taken", "tcp://"+up.addr)
	cfg.Protocol = bridge.Protocol5
	b := runBridge(t, cfg, gw.srv)
	b.waitState(t, bridge.Connected)
	host, port, _ := strings.Cut(up.addr, ":")
	out, err := exec.Command("mosquitto_pub", "-V", "5", "-h", host, "-p", port, "-i", cfg.ClientID, "-t", "x", "-m", "y").CombinedOutput()
	if err != nil {
		t.Fatalf("mosquitto_pub (mosquitto-clients, scripts/install-test-deps.sh): %v: %s", err, out)
	}
	testutil.Eventually(t, 10*time.Second, "collision named", func() bool {
		return strings.Contains(b.Stats().LastError, `another client is probably using client id "edge-taken"`)
	})
	if e := b.Stats().LastError; !strings.Contains(e, "0x8e") {
		t.Errorf("last error %q does not say the upstream's DISCONNECT 0x8e", e)
	}
}
