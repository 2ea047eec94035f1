package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgegw/edgegw/internal/metrics"
	"github.com/edgegw/edgegw/internal/testutil"
)

// payloadPrefix starts the payloads of the chaos test's topics.
func payloadPrefix(topic string) string {
	if strings.HasPrefix(topic, "stale/") {
		return "z"
	}
	return "m"
}

// fetchLedger reads the bridge's ledger from /ledger?format=json.
func fetchLedger(maddr, name string) (*metrics.Ledger, error) {
	resp, err := http.Get("http://" + maddr + "/ledger?format=json")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out map[string]*metrics.Ledger
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, err
	}
	if out[name] == nil {
		return nil, fmt.Errorf("no ledger for %s", name)
	}
	return out[name], nil
}

// TestBinaryLedgerChaos is issue 17's ledger proof with the real binary
// and Debian mosquitto as the cloud: QoS 1 traffic through an uplink that
// is blackholed (the ack watchdog tears it down), reset several times,
// with a spool small enough to overflow, readings kept past their
// max_age by the outage, and a kill -9 of edgegw in the
// middle of a burst followed by a restart. At the end, with nothing left
// to send, the ledger must add up with every term and agree with what
// the publisher and the cloud saw.
func TestBinaryLedgerChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildEdgegw(t)
	local, cloud, maddr := freePort(t), freePort(t), freePort(t)
	startMosquitto(t, cloud, t.TempDir())
	px := startDelayProxy(t, cloud, 0)
	state := t.TempDir()
	cfg := filepath.Join(t.TempDir(), "edgegw.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`
listeners:
  - {name: lan, type: tcp, address: "%s"}
metrics: {address: "%s"}
persistence: {dir: "%s", sync: batch, sync_interval: 20ms}
bridges:
  - name: cloud
    addresses: ["tcp://%s"]
    client_id: edge-ledger
    clean_session: false
    ack_timeout: 1s
    connect_timeout: 1s
    reconnect_min: 50ms
    reconnect_max: 200ms
    spool: {max_bytes: 64KiB}
    topics:
      - {pattern: "sensors/#", direction: out, qos: 1}
      - {pattern: "stale/#", direction: out, qos: 1, max_age: 300ms}
`, local, maddr, state, px.addr())), 0o600)

	// The cloud reader: distinct payloads seen upstream. mosquitto_sub, not
	// a Go client: a subscriber that falls 1,000 messages behind a fast
	// drain has messages dropped by mosquitto itself (seen under -race on
	// a loaded machine: 16 "lost" that the cloud had acknowledged).
	var (
		mu       sync.Mutex
		upstream = make(map[string]bool)
		probes   int
	)
	chost, cport, _ := net.SplitHostPort(cloud)
	reader := exec.Command("mosquitto_sub", "-h", chost, "-p", cport, "-i", "cloud-reader", "-q", "1",
		"-t", "sensors/#", "-t", "stale/#", "-t", "probe/#", "-v")
	readerOut, err := reader.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := reader.Start(); err != nil {
		t.Fatalf("mosquitto_sub: %v", err)
	}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		sc := bufio.NewScanner(readerOut)
		for sc.Scan() {
			topic, payload, _ := strings.Cut(sc.Text(), " ")
			mu.Lock()
			if strings.HasPrefix(topic, "probe/") {
				probes++
			} else {
				upstream[payload] = true
			}
			mu.Unlock()
		}
	}()
	defer func() { reader.Process.Kill(); <-readDone; reader.Wait() }()
	prober := mqttClient(t, cloud, "cloud-prober", false)
	testutil.Eventually(t, 10*time.Second, "the cloud reader subscribed", func() bool {
		mustToken(t, "probe", prober.Publish("probe/x", 1, false, "p"))
		mu.Lock()
		defer mu.Unlock()
		return probes > 0
	})

	// The local publisher: every message a distinct payload, 100 bytes.
	var (
		published int
		acked     = make(map[string]bool)
		lc        mqtt.Client
	)
	connectLocal := func() {
		testutil.Eventually(t, 10*time.Second, "edgegw listening", func() bool {
			lc = mqtt.NewClient(mqtt.NewClientOptions().AddBroker("tcp://" + local).SetClientID("local-pub").
				SetAutoReconnect(false).SetConnectTimeout(time.Second))
			tok := lc.Connect()
			return tok.WaitTimeout(2*time.Second) && tok.Error() == nil
		})
	}
	burstTo := func(topic string, n int) []mqtt.Token {
		toks := make([]mqtt.Token, n)
		for i := range toks {
			p := fmt.Sprintf("%s%06d-%s", payloadPrefix(topic), published, strings.Repeat("x", 92))
			published++
			tok := lc.Publish(topic, 1, false, p)
			toks[i] = tok
			go func() {
				if tok.WaitTimeout(30*time.Second) && tok.Error() == nil {
					mu.Lock()
					acked[p] = true
					mu.Unlock()
				}
			}()
		}
		return toks
	}
	burst := func(n int) []mqtt.Token { return burstTo("sensors/t", n) }
	waitAcked := func(toks []mqtt.Token) {
		for i, tok := range toks {
			if !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
				t.Fatalf("local publish %d: %v", i, tok.Error())
			}
		}
	}
	ledger := func() *metrics.Ledger {
		l, err := fetchLedger(maddr, "cloud")
		if err != nil {
			t.Fatalf("ledger: %v", err)
		}
		return l
	}

	g := startEdgegw(t, bin, "--config", cfg)
	connectLocal()
	// 1. Normal flow.
	waitAcked(burst(300))
	// 2. Blackhole: nothing comes back from the cloud; the watchdog tears
	// the uplink down, reconnects hang; the spool (64 KiB, ~500
	// messages) overflows and drops the oldest.
	px.delay.Store(int64(time.Hour))
	waitAcked(burst(800))
	testutil.Eventually(t, 10*time.Second, "spool overflow", func() bool { return ledger().Dropped["spool_full"] > 0 })
	// Readings with a max_age of 300 ms, kept past it by the outage.
	waitAcked(burstTo("stale/t", 50))
	staleBy := time.Now().Add(400 * time.Millisecond)
	testutil.Eventually(t, 5*time.Second, "the stale readings expired", func() bool { return time.Now().After(staleBy) })
	// 3. The uplink heals and the backlog drains (the stale readings are
	// dropped as the sender reaches them); then resets while traffic
	// flows.
	px.delay.Store(0)
	px.reset()
	testutil.Eventually(t, 30*time.Second, "the backlog drained", func() bool { l := ledger(); return l.Queued+l.InFlight == 0 })
	for range 3 {
		toks := burst(150)
		px.reset()
		waitAcked(toks)
	}
	// 4. kill -9 in the middle of a burst, with the uplink slow so that
	// messages are in flight and queued.
	px.delay.Store(int64(50 * time.Millisecond))
	toks := burst(400)
	testutil.Eventually(t, 10*time.Second, "half the burst acked", func() bool {
		n := 0
		for _, tok := range toks {
			if tok.WaitTimeout(0) {
				n++
			}
		}
		return n >= 200
	})
	before := ledger()
	g.cmd.Process.Signal(syscall.SIGKILL)
	<-g.done
	g.done <- nil
	lc.Disconnect(0)
	if before.InFlight+before.Queued == 0 {
		t.Errorf("nothing in flight or queued at the kill: %+v", before)
	}
	// 5. Restart, a last burst, heal the uplink and let everything drain.
	px.delay.Store(0)
	g = startEdgegw(t, bin, "--config", cfg)
	connectLocal()
	after := ledger()
	t.Logf("LEDGER-CHAOS just before kill -9: %+v; just after the restart: %+v", *before, *after)
	if !after.AddsUp || after.Accepted < before.Accepted || after.Delivered < before.Delivered-int64(200) {
		t.Errorf("the restart lost counts: before %+v, after %+v", before, after)
	}
	defer lc.Disconnect(0)
	waitAcked(burst(200))
	var l *metrics.Ledger
	testutil.Eventually(t, 60*time.Second, "the spool drained", func() bool {
		l = ledger()
		return l.Queued == 0 && l.InFlight == 0 && l.Accepted > 0
	})

	mu.Lock()
	nUp, nAcked := len(upstream), len(acked)
	ackedNotUp, staleUp := 0, 0
	for p := range acked {
		if !upstream[p] {
			ackedNotUp++
		}
	}
	for p := range upstream {
		if strings.HasPrefix(p, payloadPrefix("stale/t")) {
			staleUp++
		}
	}
	mu.Unlock()
	var dropped int64
	for _, n := range l.Dropped {
		dropped += n
	}
	t.Logf("LEDGER-CHAOS published %d, acked to the publisher %d, distinct upstream %d; ledger: accepted %d = delivered %d + in flight %d + queued %d + dropped %d %v + unknown %d (mismatch %d), rejected %v",
		published, nAcked, nUp, l.Accepted, l.Delivered, l.InFlight, l.Queued, dropped, l.Dropped, l.Unknown, l.Mismatch, l.Rejected)
	if !l.AddsUp || l.Accepted != l.Delivered+l.InFlight+l.Queued+dropped+l.Unknown-l.Mismatch {
		t.Fatalf("the ledger does not add up: %+v", l)
	}
	if l.Unknown != 0 || l.Mismatch != 0 || l.Dropped["lost"] != 0 || l.Dropped["corrupt"] != 0 {
		t.Errorf("kill -9 cost records or counts: %+v", l)
	}
	if l.Dropped["spool_full"] == 0 || l.Dropped["expired"] == 0 {
		t.Errorf("no overflow or no expiry: the test did not test them")
	}
	if staleUp != 0 {
		t.Errorf("%d readings past their max_age reached the cloud", staleUp)
	}
	// Against what the publisher and the cloud saw: every message acked
	// locally was accepted (and some unacked ones at the kill may have
	// been); each delivered record reached the cloud; what reached the
	// cloud was delivered or dropped while in flight; what was acked
	// locally and never reached the cloud was dropped.
	if int64(nAcked) > l.Accepted || l.Accepted > int64(published) {
		t.Errorf("accepted %d outside [acked %d, published %d]", l.Accepted, nAcked, published)
	}
	if l.Delivered > int64(nUp) || int64(nUp) > l.Delivered+l.Dropped["spool_full"] {
		t.Errorf("distinct upstream %d outside [delivered %d, delivered + spool_full %d]", nUp, l.Delivered, l.Delivered+l.Dropped["spool_full"])
	}
	if int64(ackedNotUp) > l.Dropped["spool_full"]+l.Dropped["expired"] {
		t.Errorf("%d messages acked locally never reached the cloud, but only %d were dropped", ackedNotUp, l.Dropped["spool_full"]+l.Dropped["expired"])
	}

	// The same on /metrics, on $SYS/bridge/cloud/ledger and from
	// `edgegw ledger`.
	resp, err := http.Get("http://" + maddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := fmt.Sprintf(`edgegw_bridge_ledger_messages{bridge="cloud",term="accepted"} %d`, l.Accepted)
	if !bytes.Contains(body, []byte(want)) {
		t.Errorf("/metrics lacks %q", want)
	}
	var sys metrics.Ledger
	sc := mqtt.NewClient(mqtt.NewClientOptions().AddBroker("tcp://" + local).SetClientID("sys-reader").
		SetAutoReconnect(false).SetConnectTimeout(time.Second))
	if tok := sc.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("sys reader: %v", tok.Error())
	}
	defer sc.Disconnect(0)
	sysCh := make(chan []byte, 16)
	sc.Subscribe("$SYS/bridge/cloud/ledger", 0, func(_ mqtt.Client, m mqtt.Message) { sysCh <- m.Payload() })
	deadline := time.After(25 * time.Second) // refreshed every 10 s while someone subscribes
	for sys.Accepted != l.Accepted || sys.Delivered != l.Delivered {
		select {
		case p := <-sysCh:
			if err := json.Unmarshal(p, &sys); err != nil {
				t.Fatalf("$SYS ledger %q: %v", p, err)
			}
		case <-deadline:
			t.Fatalf("$SYS/bridge/cloud/ledger says %+v, /ledger %+v", sys, l)
		}
	}
	if !sys.AddsUp {
		t.Errorf("$SYS ledger does not add up: %+v", sys)
	}
	out, err := exec.Command(bin, "ledger", "--config", cfg).CombinedOutput()
	if err != nil {
		t.Fatalf("edgegw ledger: %v\n%s", err, out)
	}
	t.Logf("edgegw ledger:\n%s", out)
	if !strings.Contains(string(out), "bridge cloud: adds up") ||
		!strings.Contains(string(out), "accepted "+strconv.FormatInt(l.Accepted, 10)+" = delivered "+strconv.FormatInt(l.Delivered, 10)) {
		t.Errorf("edgegw ledger output does not show the ledger %+v", l)
	}
}
