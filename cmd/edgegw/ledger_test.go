package main

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgegw/edgegw/cmd/edgegw/internal/metrics"
	"github.com/edgegw/edgegw/internal/testutil"
)

// Tests of the bridge's ledger through the binary: it adds up, with every
// term, against what the publisher and the cloud saw.

// ledger reads a bridge's ledger from /ledger?format=json.
func (g *harness) ledger(name string) (*metrics.Ledger, error) {
	code, _, body := g.Get("/ledger?format=json")
	if code != 200 {
		return nil, fmt.Errorf("/ledger: %d %s", code, body)
	}
	var out map[string]*metrics.Ledger
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		return nil, err
	}
	if out[name] == nil {
		return nil, fmt.Errorf("no ledger for %s", name)
	}
	return out[name], nil
}

// payloadPrefix starts the payloads of the chaos test's topics.
func payloadPrefix(topic string) string {
	if strings.HasPrefix(topic, "stale/") {
		return "z"
	}
	return "m"
}

// TestBinaryLedgerChaos is the ledger's proof with the real binary and
// Debian mosquitto as the cloud: QoS 1 traffic through an uplink that is
// blackholed (the ack watchdog tears it down), reset several times, with
// a spool small enough to overflow, readings kept past their max_age by
// the outage, and a kill -9 of edgegw in the middle of a burst followed
// by a restart. At the end, with nothing left to send, the ledger must add
// up with every term and agree with what the publisher and the cloud saw.
func TestBinaryLedgerChaos(t *testing.T) {
	up := startCloud(t, false)
	px := testutil.StartProxy(t, up.Addr)
	g := newHarness(t)
	g.Persist("batch", "20ms")
	g.Bridge("cloud", px.Addr()).With("clean_session", false).With("ack_timeout", "1s").With("connect_timeout", "1s").
		With("reconnect_min", "50ms").With("reconnect_max", "200ms").With("spool", map[string]any{"max_bytes": "64KiB"}).
		Out("sensors/#", 1).
		Topic(topicConf{Pattern: "stale/#", Direction: "out", QoS: 1, MaxAge: "300ms"})
	reader := up.Reader(t, "sensors/#", "stale/#")

	// The local publisher: every message a distinct payload, 100 bytes.
	var (
		mu        sync.Mutex
		published int
		acked     = make(map[string]bool)
		lc        mqtt.Client
	)
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
		l, err := g.ledger("cloud")
		if err != nil {
			t.Fatalf("ledger: %v", err)
		}
		return l
	}

	g.Start()
	lc = g.Client("local-pub", false)
	// 1. Normal flow.
	waitAcked(burst(300))
	// 2. Blackhole: nothing comes back from the cloud; the watchdog tears
	// the uplink down, reconnects hang; the spool (64 KiB, ~500
	// messages) overflows and drops the oldest.
	px.SetDelay(testutil.Down, time.Hour)
	waitAcked(burst(800))
	testutil.Eventually(t, 10*time.Second, "spool overflow", func() bool { return ledger().Dropped["spool_full"] > 0 })
	// Readings with a max_age of 300 ms, kept past it by the outage.
	waitAcked(burstTo("stale/t", 50))
	staleBy := time.Now().Add(400 * time.Millisecond)
	testutil.Eventually(t, 5*time.Second, "the stale readings expired", func() bool { return time.Now().After(staleBy) })
	// 3. The uplink heals and the backlog drains (the stale readings are
	// dropped as the sender reaches them); then resets while traffic
	// flows.
	px.SetDelay(testutil.Down, 0)
	px.Cut()
	testutil.Eventually(t, 30*time.Second, "the backlog drained", func() bool { l := ledger(); return l.Queued+l.InFlight == 0 })
	for range 3 {
		toks := burst(150)
		px.Cut()
		waitAcked(toks)
	}
	// 4. kill -9 in the middle of a burst, with the uplink slow so that
	// messages are in flight and queued.
	px.SetDelay(testutil.Down, 50*time.Millisecond)
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
	g.Kill()
	lc.Disconnect(0)
	if before.InFlight+before.Queued == 0 {
		t.Errorf("nothing in flight or queued at the kill: %+v", before)
	}
	// 5. Restart, a last burst, heal the uplink and let everything drain.
	px.SetDelay(testutil.Down, 0)
	g.Start()
	lc = g.Client("local-pub", false)
	after := ledger()
	t.Logf("LEDGER-CHAOS just before kill -9: %+v; just after the restart: %+v", *before, *after)
	if !after.AddsUp || after.Accepted < before.Accepted || after.Delivered < before.Delivered-int64(200) {
		t.Errorf("the restart lost counts: before %+v, after %+v", before, after)
	}
	waitAcked(burst(200))
	var l *metrics.Ledger
	testutil.Eventually(t, 60*time.Second, "the spool drained", func() bool {
		l = ledger()
		return l.Queued == 0 && l.InFlight == 0 && l.Accepted > 0
	})

	upstream := reader.Payloads()
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
	series := `edgegw_bridge_ledger_messages{bridge="cloud",term="accepted"}`
	if v := g.Metric(series); v != float64(l.Accepted) {
		t.Errorf("/metrics %s %v, want %d", series, v, l.Accepted)
	}
	var sys metrics.Ledger
	sysCh := make(chan []byte, 16)
	g.Client("sys-reader", false).Subscribe("$SYS/bridge/cloud/ledger", 0, func(_ mqtt.Client, m mqtt.Message) { sysCh <- m.Payload() })
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
	out, err := exec.Command(edgegwBinary(t), "ledger", "--config", g.ConfigPath).CombinedOutput()
	if err != nil {
		t.Fatalf("edgegw ledger: %v\n%s", err, out)
	}
	t.Logf("edgegw ledger:\n%s", out)
	if !strings.Contains(string(out), "bridge cloud: adds up") ||
		!strings.Contains(string(out), "accepted "+strconv.FormatInt(l.Accepted, 10)+" = delivered "+strconv.FormatInt(l.Delivered, 10)) {
		t.Errorf("edgegw ledger output does not show the ledger %+v", l)
	}
}

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

// TestBinaryBudgetHeld is the bridge's byte budget through the binary: a
// bridge with `budget: 20000 per 1h` is offered three times that in bulk
// readings, then a few alarms on a high rule. Counted by a proxy on the
// uplink (not by the bridge), the bytes spent on everything but the
// alarms stay within 5 % of the budget; every alarm reaches the cloud;
// the bulk readings held back are still in the spool, and the ledger
// adds up with them queued, none dropped.
func TestBinaryBudgetHeld(t *testing.T) {
	const (
		budget = 20000
		bulkN  = 600 // ~100 bytes each on the wire: 3x the budget
		alarmN = 5
	)
	up := startCloud(t, false)
	px := testutil.StartProxy(t, up.Addr) // counts the uplink's bytes
	g := newHarness(t)
	g.Persist("batch", "20ms")
	g.Bridge("cloud", px.Addr()).With("clean_session", false).With("keepalive", "60s").
		With("budget", fmt.Sprintf("%d per 1h", budget)).
		Topic(topicConf{Pattern: "alarms/#", Direction: "out", QoS: 1, RemotePrefix: "site/", Priority: "high"}).
		Topic(topicConf{Pattern: "bulk/#", Direction: "out", QoS: 1, RemotePrefix: "site/", Priority: "bulk"})
	reader := up.Reader(t, "site/#")

	g.Start()
	lc := g.Client("local-pub", false)

	// 3x the budget in bulk readings, each acknowledged (in the spool).
	payload := strings.Repeat("x", 80)
	toks := make([]mqtt.Token, bulkN)
	for i := range toks {
		toks[i] = lc.Publish("bulk/t", 1, false, fmt.Sprintf("%04d-%s", i, payload))
	}
	for _, tok := range toks {
		mustToken(t, "bulk publish", tok)
	}
	testutil.Eventually(t, 20*time.Second, "95 % of the budget written upstream", func() bool { return px.Bytes(testutil.Up) >= budget*95/100 })

	// The alarms, after the budget ran out (or nearly): each must go.
	var alarmBytes int64
	for i := range alarmN {
		p := fmt.Sprintf("alarm%d", i)
		alarmBytes += publishWireSize("site/alarms/a", p)
		mustToken(t, "alarm publish", lc.Publish("alarms/a", 1, false, p))
	}
	testutil.Eventually(t, 10*time.Second, "every alarm upstream", func() bool { return reader.Count("site/alarms/a ") == alarmN })
	// The alarms were written after every bulk reading the budget let
	// out, and TCP keeps order: what the proxy counted now is all of it.
	// The ledger settles once the upstream's acks are in.
	var l *metrics.Ledger
	testutil.Eventually(t, 10*time.Second, "nothing in flight", func() bool {
		var err error
		if l, err = g.ledger("cloud"); err != nil {
			t.Fatalf("ledger: %v", err)
		}
		return l.InFlight == 0 && l.Delivered == int64(reader.Count("site/bulk/t ")+alarmN)
	})
	written := px.Bytes(testutil.Up)
	bulkUp := reader.Count("site/bulk/t ")
	// Everything the bridge wrote but the alarms: CONNECT, the bulk
	// PUBLISHes (no in rules: no SUBSCRIBE; keepalive 60 s: no PINGREQ).
	limited := written - alarmBytes
	t.Logf("BUDGET-E2E budget %d B per 1h; offered %d bulk readings (%d B on the wire) + %d alarms (%d B): "+
		"upstream %d B through the proxy, %d B without the alarms (%.1f%% of the budget); %d bulk and %d alarms upstream; "+
		"ledger accepted %d = delivered %d + in flight %d + queued %d + dropped %v + unknown %d",
		budget, bulkN, int64(bulkN)*publishWireSize("site/bulk/t", fmt.Sprintf("%04d-%s", 0, payload)), alarmN, alarmBytes,
		written, limited, 100*float64(limited)/budget, bulkUp, reader.Count("site/alarms/a "),
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
