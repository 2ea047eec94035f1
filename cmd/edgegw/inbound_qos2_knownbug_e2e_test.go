//go:build knownbug

// A known failure, kept out of make test (go test -tags knownbug
// ./cmd/edgegw/ -run TestProbeInboundQoS2ExactlyOnceAcrossSIGTERM runs
// it): the bridge keeps the cloud's inbound QoS 2 packet ids in memory
// only (bridge/session311.go uplinkStore.in, bridge/session5.go), so a
// command routed locally but not yet PUBREC'd to the cloud when edgegw
// stops is sent again by the cloud and delivered twice. Exactly once
// across a restart needs those ids kept on disk with the local routing,
// as the broker keeps its own clients' (docs/bridge.md says so).

package main

import (
	"bufio"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgegw/edgegw/internal/testutil"
)

// TestProbeInboundQoS2ExactlyOnceAcrossSIGTERM: QoS 2 commands stream
// from the cloud through an `in` rule to a device with a persistent
// session; edgegw is stopped with SIGTERM mid-stream and started again on
// the same state. Every command must reach the device exactly once
// (docs/behaviour.md: state survives SIGTERM; an inbound QoS 2 packet id is
// remembered so a resend is not delivered twice). Seen on main: 0 lost,
// 29-104 of 300 delivered twice (5 runs), in two blocks: the commands in
// flight around the stop, and a block of about 30 after the restart.
func TestProbeInboundQoS2ExactlyOnceAcrossSIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildEdgegw(t)
	const n = 300
	local, cloud := freePort(t), freePort(t)
	_, cport, _ := net.SplitHostPort(cloud)
	cp, _ := strconv.Atoi(cport)
	testutil.StartMosquitto(t, fmt.Sprintf("listener %s 127.0.0.1\nallow_anonymous true\nmax_queued_messages 10000\n", cport), cp)
	cfg := writeConfig(t, fmt.Sprintf(`
listeners:
  - {name: lan, type: tcp, address: "%s"}
metrics: {address: ""}
persistence: {dir: "%s", sync: batch, sync_interval: 10ms}
bridges:
  - name: cloud
    addresses: ["tcp://%s"]
    client_id: edge-probe-q2
    keepalive: 2s
    ack_timeout: 2s
    reconnect_min: 100ms
    reconnect_max: 500ms
    topics:
      - {pattern: "cmd/#", direction: in, qos: 2, remote_prefix: "site-a/"}
`, local, t.TempDir(), cloud))
	g := startEdgegw(t, bin, "-config", cfg)
	waitListening(t, local)

	// The device is mosquitto_sub (libmosquitto hands a QoS 2 message over
	// at its PUBREL, once per flow) on a persistent session; it reconnects
	// by itself when edgegw restarts.
	var mu sync.Mutex
	copies := map[string]int{}
	pinged := false
	seen := map[string]bool{}
	lhost, lport, _ := net.SplitHostPort(local)
	dev := exec.Command("stdbuf", "-oL", "mosquitto_sub", "-h", lhost, "-p", lport, "-t", "cmd/#", "-q", "2", "-c", "-i", "probe-device") // a line per message, not a block
	out, err := dev.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := dev.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Process.Kill(); dev.Wait() })
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			mu.Lock()
			if sc.Text() == "ping" { // the bridge's subscription is in place
				pinged = true
				mu.Unlock()
				continue
			}
			seen[sc.Text()] = true
			copies[sc.Text()]++
			mu.Unlock()
		}
	}()
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(seen) }

	pub := mqtt.NewClient(mqtt.NewClientOptions().AddBroker("tcp://" + cloud).SetClientID("probe-cloud-pub").
		SetCleanSession(false))
	if tok := pub.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("cloud publisher connect: %v", tok.Error())
	}
	defer pub.Disconnect(100)
	// The bridge's subscription is in place once a first command crosses.
	testutil.Eventually(t, 10*time.Second, "first command crosses", func() bool {
		pub.Publish("site-a/cmd/ping", 2, false, "ping").WaitTimeout(time.Second)
		mu.Lock()
		defer mu.Unlock()
		return pinged
	})
	// One publish in flight at a time: mosquitto 2.0.11 silently drops
	// QoS 2 messages over its max_inflight_messages (20) from a publisher
	// that does not wait, which would be counted here as lost.
	pubDone := make(chan error, 1)
	go func() {
		for i := range n {
			tok := pub.Publish("site-a/cmd/x", 2, false, strconv.Itoa(i))
			if !tok.WaitTimeout(20*time.Second) || tok.Error() != nil {
				pubDone <- fmt.Errorf("cloud publish %d not completed: %v", i, tok.Error())
				return
			}
		}
		pubDone <- nil
	}()
	testutil.Eventually(t, 20*time.Second, "50 commands delivered", func() bool { return count() >= 50 })
	g.cmd.Process.Signal(syscall.SIGTERM)
	<-g.done
	g.done <- nil
	startEdgegw(t, bin, "-config", cfg)
	if err := <-pubDone; err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); count() < n && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond) // poll: the deadline above bounds it
	}
	mu.Lock()
	defer mu.Unlock()
	var missing []int
	for i := range n {
		if !seen[strconv.Itoa(i)] {
			missing = append(missing, i)
		}
	}
	if len(missing) > 0 {
		t.Errorf("%d of %d QoS 2 commands acknowledged to the cloud never reached the device: %v", len(missing), n, missing)
	}
	var dups []string
	for p, c := range copies {
		if c > 1 {
			dups = append(dups, p)
		}
	}
	if len(dups) > 0 {
		t.Errorf("%d of %d QoS 2 commands reached the device twice across a SIGTERM restart: %v", len(dups), n, dups)
	}
}
