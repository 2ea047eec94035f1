package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgegw/edgegw/internal/testutil"
)

// oversizeEnv is the binary bridging to a Debian mosquitto with
// max_packet_size 200 (the cloud), a paho reader subscribed to site/# on
// it, and mosquitto_pub publishing locally at QoS 1. The probe that found
// the bug (branch probe-bridge, 44a9c48): over MQTT 3.1.1 one message over
// the cloud's limit made mosquitto close the connection every time the
// bridge sent it, the bridge reconnected about 10 times a second
// (reconnect_min 100ms: every CONNACK reset the backoff) and sent it first
// again, and every message acknowledged behind it stayed in the spool.
type oversizeEnv struct {
	g            *gatewayProc
	lhost, lport string
	metrics      string

	mu  sync.Mutex
	got map[string]bool // payloads the cloud reader received
}

func startOversizeEnv(t *testing.T, bridgeKeys string) *oversizeEnv {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildEdgegw(t)
	local, cloud, maddr := freePort(t), freePort(t), freePort(t)
	e := &oversizeEnv{metrics: maddr, got: map[string]bool{}}
	e.lhost, e.lport, _ = net.SplitHostPort(local)
	_, cport, _ := net.SplitHostPort(cloud)
	cp, _ := strconv.Atoi(cport)
	testutil.StartMosquitto(t, fmt.Sprintf("listener %d 127.0.0.1\nallow_anonymous true\nmax_packet_size 200\n", cp), cp)
	sub := mqtt.NewClient(mqtt.NewClientOptions().AddBroker("tcp://" + cloud).
		SetClientID("cloud-reader").SetAutoReconnect(false).
		SetDefaultPublishHandler(func(_ mqtt.Client, m mqtt.Message) {
			e.mu.Lock()
			e.got[string(m.Payload())] = true
			e.mu.Unlock()
		}))
	if tok := sub.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("cloud reader connect: %v", tok.Error())
	}
	t.Cleanup(func() { sub.Disconnect(0) })
	if tok := sub.Subscribe("site/#", 1, nil); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("cloud reader subscribe: %v", tok.Error())
	}
	cfg := writeConfig(t, fmt.Sprintf(`
listeners:
  - {name: lan, type: tcp, address: "%s"}
metrics: {address: "%s"}
persistence: {dir: "%s"}
bridges:
  - name: cloud
    addresses: ["tcp://%s"]
    client_id: edge-probe
%s    topics:
      - {pattern: "sensors/#", direction: out, qos: 1, remote_prefix: "site/"}
`, local, maddr, t.TempDir(), cloud, bridgeKeys))
	e.g = startEdgegw(t, bin, "--config", cfg)
	waitListening(t, local)
	testutil.Eventually(t, 10*time.Second, "bridge connected", func() bool { return strings.Contains(e.g.logs(), "uplink connected") })
	return e
}

func (e *oversizeEnv) pub(t *testing.T, msg string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "mosquitto_pub", "-h", e.lhost, "-p", e.lport, "-q", "1",
		"-t", "sensors/t1", "-m", msg).CombinedOutput()
	if err != nil {
		t.Fatalf("mosquitto_pub: %v %s", err, out)
	}
}

func (e *oversizeEnv) has(msg string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.got[msg]
}

// oversizeMsg is the probe's oversize message: a 426-byte PUBLISH to
// site/sensors/t1 over MQTT 3.1.1 (2 + 15 topic + 2 packet id + 404
// payload = 423 of remaining length, in 2 bytes, after the type byte).
var oversizeMsg = "big " + strings.Repeat("x", 400)

// TestBinaryMaxPacketSizeDropsOversize: with bridges[].max_packet_size
// set to the cloud's limit, the probe's message is dropped before it is
// sent, counted as packet_too_large and as refused in the ledger, and
// every message around it is delivered, on one connection. Over MQTT
// 3.1.1, where the broker cannot say its limit, and over MQTT 5.
func TestBinaryMaxPacketSizeDropsOversize(t *testing.T) {
	for _, proto := range []string{"3.1.1", "5"} {
		t.Run(proto, func(t *testing.T) {
			e := startOversizeEnv(t, fmt.Sprintf("    protocol: %q\n    max_packet_size: 200\n", proto))
			e.pub(t, "before")
			e.pub(t, oversizeMsg)
			const after = 50
			for i := range after {
				e.pub(t, fmt.Sprintf("after-%d", i))
			}
			testutil.Eventually(t, 15*time.Second, "every message after the large one at the cloud", func() bool {
				for i := range after {
					if !e.has(fmt.Sprintf("after-%d", i)) {
						return false
					}
				}
				return e.has("before")
			})
			m := func(series string) float64 { return metricValue(t, e.metrics, series) }
			testutil.Eventually(t, 5*time.Second, "the ledger settled", func() bool {
				return m(`edgegw_bridge_ledger_messages{bridge="cloud",term="queued"}`) == 0
			})
			if e.has(oversizeMsg) || m(`edgegw_bridge_upstream_dropped_total{bridge="cloud",reason="packet_too_large"}`) != 1 ||
				m(`edgegw_bridge_ledger_dropped_messages{bridge="cloud",reason="refused"}`) != 1 ||
				m(`edgegw_bridge_ledger_messages{bridge="cloud",term="delivered"}`) != after+1 ||
				m(`edgegw_bridge_connects_total{bridge="cloud"}`) != 1 {
				t.Fatalf("large one at the cloud %v, packet_too_large %v, ledger refused %v, delivered %v, connects %v; want false, 1, 1, %d, 1\n%s",
					e.has(oversizeMsg), m(`edgegw_bridge_upstream_dropped_total{bridge="cloud",reason="packet_too_large"}`),
					m(`edgegw_bridge_ledger_dropped_messages{bridge="cloud",reason="refused"}`),
					m(`edgegw_bridge_ledger_messages{bridge="cloud",term="delivered"}`), m(`edgegw_bridge_connects_total{bridge="cloud"}`), after+1, e.g.logs())
			}
		})
	}
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
// 3.1.1, the probe's message is not dropped (the bridge cannot tell it
// from a message a flaky link cut several times), but the bridge says
// what is wrong and stops hammering the broker:
//   - one ERROR line naming the bridge, the message's topic and size and
//     bridges[].max_packet_size; /status.json's last_error carries the
//     same hint and last_error_text explains it;
//   - the reconnects slow down: with reconnect_min 50ms and reconnect_max
//     1s, the backoff doubles after every connection that delivered
//     nothing, so the 8 connections after the message take at least
//     50+50+100+200+400+500+500 ms = 1.8 s (the timers' lower bounds).
//     Before, every CONNACK reset it: 8 connections in 0.4-0.5 s, for
//     ever. The test asserts at least 1.5 s, which a slow machine only
//     makes longer.
func TestBinaryOversizeWithoutLimitSaysSo(t *testing.T) {
	e := startOversizeEnv(t, "    reconnect_min: 50ms\n    reconnect_max: 1s\n")
	e.pub(t, "before")
	testutil.Eventually(t, 10*time.Second, "before at the cloud", func() bool { return e.has("before") })
	e.pub(t, oversizeMsg)
	e.pub(t, "after")

	testutil.Eventually(t, 15*time.Second, "8 connections", func() bool { return len(connectedAt(t, e.g.logs())) >= 8 })
	logs := e.g.logs()
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
		t.Errorf("the ERROR line does not name the bridge, the topic and the size (426):\n%s", logs)
	}
	if e.has("after") || e.has(oversizeMsg) {
		t.Errorf("at the cloud: after %v, large one %v; want neither (the large one blocks, and is not dropped)", e.has("after"), e.has(oversizeMsg))
	}

	resp, err := http.Get("http://" + e.metrics + "/status.json")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var doc struct {
		Bridges []struct {
			Name          string `json:"name"`
			LastError     string `json:"last_error"`
			LastErrorText string `json:"last_error_text"`
		} `json:"bridges"`
	}
	if err := json.Unmarshal(body, &doc); err != nil || len(doc.Bridges) != 1 {
		t.Fatalf("status.json: %v\n%s", err, body)
	}
	b := doc.Bridges[0]
	if !strings.Contains(b.LastError, "426 bytes, topic site/sensors/t1") || !strings.Contains(b.LastError, "set bridges[].max_packet_size") ||
		!strings.Contains(b.LastErrorText, "Set bridges[].max_packet_size") {
		t.Errorf("status.json bridge %s: last_error %q, last_error_text %q", b.Name, b.LastError, b.LastErrorText)
	}
	if m := metricValue(t, e.metrics, `edgegw_bridge_ledger_dropped_messages{bridge="cloud",reason="refused"}`); m != 0 {
		t.Errorf("ledger refused %v; want 0: nothing is dropped without the key", m)
	}
}
