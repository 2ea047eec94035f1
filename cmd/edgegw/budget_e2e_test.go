package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgegw/edgegw/cmd/edgegw/internal/metrics"
	"github.com/edgegw/edgegw/internal/testutil"
)

// publishWireSize is the size on the wire of an MQTT 3.1.1 PUBLISH at
// QoS 1 (fixed header, topic, packet id, payload).
func publishWireSize(topic, payload string) int64 {
	rem := 2 + len(topic) + 2 + len(payload)
	n := 1 + 1 + rem
	for r := rem >> 7; r > 0; r >>= 7 {
		n++ // one more remaining-length byte
	}
	return int64(n)
}

// TestBinaryBudgetHeld is issue 17's byte budget through the binary: a
// bridge with `budget: 20000 per 1h` is offered three times that in bulk
// readings, then a few alarms on a high rule. Counted by a proxy on the
// uplink (not by the bridge), the bytes spent on everything but the
// alarms stay within 5 % of the budget; every alarm reaches the cloud;
// the bulk readings held back are still in the spool, and the ledger
// adds up with them queued, none dropped.
func TestBinaryBudgetHeld(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	const (
		budget = 20000
		bulkN  = 600 // ~100 bytes each on the wire: 3x the budget
		alarmN = 5
	)
	bin := buildEdgegw(t)
	local, cloud, maddr := freePort(t), freePort(t), freePort(t)
	startMosquitto(t, cloud, t.TempDir())
	px := startDelayProxy(t, cloud, 0) // counts the uplink's bytes
	cfg := filepath.Join(t.TempDir(), "edgegw.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`
listeners:
  - {name: lan, type: tcp, address: "%s"}
metrics: {address: "%s"}
persistence: {dir: "%s", sync: batch, sync_interval: 20ms}
bridges:
  - name: cloud
    addresses: ["tcp://%s"]
    client_id: edge-budget
    clean_session: false
    keepalive: 60s
    budget: %d per 1h
    topics:
      - {pattern: "alarms/#", direction: out, qos: 1, remote_prefix: "site/", priority: high}
      - {pattern: "bulk/#", direction: out, qos: 1, remote_prefix: "site/", priority: bulk}
`, local, maddr, t.TempDir(), px.addr(), budget)), 0o600)

	// The cloud reader: every message that reached the upstream broker.
	var (
		mu     sync.Mutex
		seen   = make(map[string]bool) // topic + " " + payload
		probes int
	)
	chost, cport, _ := net.SplitHostPort(cloud)
	reader := exec.Command("mosquitto_sub", "-h", chost, "-p", cport, "-i", "cloud-reader", "-q", "1",
		"-t", "site/#", "-t", "probe/#", "-v")
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
			mu.Lock()
			if strings.HasPrefix(sc.Text(), "probe/") {
				probes++
			} else {
				seen[sc.Text()] = true
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
	upCount := func(prefix string) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for k := range seen {
			if strings.HasPrefix(k, prefix) {
				n++
			}
		}
		return n
	}

	startEdgegw(t, bin, "--config", cfg)
	var lc mqtt.Client
	testutil.Eventually(t, 10*time.Second, "edgegw listening", func() bool {
		lc = mqtt.NewClient(mqtt.NewClientOptions().AddBroker("tcp://" + local).SetClientID("local-pub").
			SetAutoReconnect(false).SetConnectTimeout(time.Second))
		tok := lc.Connect()
		return tok.WaitTimeout(2*time.Second) && tok.Error() == nil
	})
	defer lc.Disconnect(0)

	// 3x the budget in bulk readings, each acknowledged (in the spool).
	payload := strings.Repeat("x", 80)
	toks := make([]mqtt.Token, bulkN)
	for i := range toks {
		toks[i] = lc.Publish("bulk/t", 1, false, fmt.Sprintf("%04d-%s", i, payload))
	}
	for _, tok := range toks {
		mustToken(t, "bulk publish", tok)
	}
	testutil.Eventually(t, 20*time.Second, "95 % of the budget written upstream", func() bool { return px.up.Load() >= budget*95/100 })

	// The alarms, after the budget ran out (or nearly): each must go.
	var alarmBytes int64
	for i := range alarmN {
		p := fmt.Sprintf("alarm%d", i)
		alarmBytes += publishWireSize("site/alarms/a", p)
		mustToken(t, "alarm publish", lc.Publish("alarms/a", 1, false, p))
	}
	testutil.Eventually(t, 10*time.Second, "every alarm upstream", func() bool { return upCount("site/alarms/a ") == alarmN })
	// The alarms were written after every bulk reading the budget let
	// out, and TCP keeps order: what the proxy counted now is all of it.
	// The ledger settles once the upstream's acks are in.
	var l *metrics.Ledger
	testutil.Eventually(t, 10*time.Second, "nothing in flight", func() bool {
		if l, err = fetchLedger(maddr, "cloud"); err != nil {
			t.Fatalf("ledger: %v", err)
		}
		return l.InFlight == 0 && l.Delivered == int64(upCount("site/bulk/t ")+alarmN)
	})
	written := px.up.Load()
	bulkUp := upCount("site/bulk/t ")
	// Everything the bridge wrote but the alarms: CONNECT, the bulk
	// PUBLISHes (no in rules: no SUBSCRIBE; keepalive 60 s: no PINGREQ).
	limited := written - alarmBytes
	t.Logf("BUDGET-E2E budget %d B per 1h; offered %d bulk readings (%d B on the wire) + %d alarms (%d B): "+
		"upstream %d B through the proxy, %d B without the alarms (%.1f%% of the budget); %d bulk and %d alarms upstream; "+
		"ledger accepted %d = delivered %d + in flight %d + queued %d + dropped %v + unknown %d",
		budget, bulkN, int64(bulkN)*publishWireSize("site/bulk/t", fmt.Sprintf("%04d-%s", 0, payload)), alarmN, alarmBytes,
		written, limited, 100*float64(limited)/budget, bulkUp, upCount("site/alarms/a "),
		l.Accepted, l.Delivered, l.InFlight, l.Queued, l.Dropped, l.Unknown)
	if limited > budget*105/100 || limited < budget*95/100 {
		t.Errorf("%d bytes written upstream for the budget-limited lanes: not within 5%% of the %d budget", limited, budget)
	}
	if bulkUp == 0 || bulkUp >= bulkN/2 {
		t.Errorf("%d of %d bulk readings upstream: the budget did not hold them", bulkUp, bulkN)
	}

	// Nothing held back is lost: it waits in the spool, and the ledger's
	// terms add up with it.
	var dropped int64
	for _, n := range l.Dropped {
		dropped += n
	}
	if !l.AddsUp || l.Accepted != l.Delivered+l.InFlight+l.Queued+dropped+l.Unknown-l.Mismatch {
		t.Fatalf("the ledger does not add up: %+v", l)
	}
	if l.Accepted != bulkN+alarmN || dropped != 0 || l.Unknown != 0 {
		t.Errorf("ledger: accepted %d (want %d), dropped %d, unknown %d", l.Accepted, bulkN+alarmN, dropped, l.Unknown)
	}
	if want := int64(bulkN - bulkUp); l.Queued != want {
		t.Errorf("%d queued, want the %d bulk readings the budget held back", l.Queued, want)
	}
	if bl, ok := l.Lanes["bulk"]; !ok || bl.Accepted != bulkN || bl.Delivered != int64(bulkUp) {
		t.Errorf("bulk lane: %+v, want accepted %d, delivered %d", bl, bulkN, bulkUp)
	}
	if hl, ok := l.Lanes["high"]; !ok || hl.Accepted != alarmN || hl.Delivered != alarmN {
		t.Errorf("high lane: %+v, want %d accepted and delivered", hl, alarmN)
	}
}
