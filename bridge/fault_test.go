package bridge_test

import (
	"strconv"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgegw/edgegw/bridge"
)

// ratePublisher is a local paho client publishing as fast as it can: QoS 1
// waits for each PUBACK, QoS 0 for each write.
type ratePublisher struct {
	name  string
	topic string
	qos   byte
	c     mqtt.Client
	seq   int
}

// run publishes until stop, then fences (a QoS 1 publish on the same
// connection, acked only after the gateway processed everything before it)
// and returns the rate from start to the fence's PUBACK.
func (p *ratePublisher) run(stop time.Time, phase string) (float64, error) {
	start := time.Now()
	n := 0
	for time.Now().Before(stop) {
		tok := p.c.Publish(p.topic, p.qos, false, phase+"-"+strconv.Itoa(p.seq))
		p.seq++
		if !tok.WaitTimeout(10 * time.Second) {
			return 0, errTimeout(p.name)
		}
		if err := tok.Error(); err != nil {
			return 0, err
		}
		n++
	}
	tok := p.c.Publish(p.topic, 1, false, phase+"-fence")
	if !tok.WaitTimeout(30 * time.Second) {
		return 0, errTimeout(p.name + " fence")
	}
	if err := tok.Error(); err != nil {
		return 0, err
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

type errTimeout string

func (e errTimeout) Error() string { return string(e) + ": no local ack in time" }

// TestBrokerNotBlockedByBlackhole: local publishers at QoS 1 and QoS 0, on
// a topic the bridge takes (an out rule) and on one it does not, keep their
// rate while the uplink is blackholed: each publisher's rate in the
// blackhole phase (from the freeze, through detection and the failing
// reconnects) is compared with its own rate in a baseline phase with a
// healthy uplink, in the same test.
func TestBrokerNotBlockedByBlackhole(t *testing.T) {
	const phase = 2 * time.Second
	up := startMosquitto(t)
	gw := startGateway(t)
	px := startProxy(t, up.addr())
	cfg := testConfig(t, "b1", px.url())
	cfg.SpoolMaxBytes = 256 << 20 // an outage of this test never reaches it
	b := runBridge(t, cfg, gw.srv)
	b.waitState(t, bridge.Connected)

	pubs := []*ratePublisher{
		{name: "qos1 bridged", topic: "sensors/q1", qos: 1},
		{name: "qos0 bridged", topic: "sensors/q0", qos: 0},
		{name: "qos1 local-only", topic: "local/q1", qos: 1},
		{name: "qos0 local-only", topic: "local/q0", qos: 0},
	}
	for i, p := range pubs {
		p.c = client(t, gw.addr, "pub-"+strconv.Itoa(i))
	}
	measure := func(name string) []float64 {
		t.Helper()
		rates := make([]float64, len(pubs))
		errs := make([]error, len(pubs))
		stop := time.Now().Add(phase)
		var wg sync.WaitGroup
		for i, p := range pubs {
			wg.Add(1)
			go func() { defer wg.Done(); rates[i], errs[i] = p.run(stop, name) }()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("%s phase, %s: %v (bridge %+v)", name, pubs[i].name, err, b.Stats())
			}
		}
		return rates
	}

	base := measure("base")
	sentBefore := b.Stats().Sent
	px.freeze()
	black := measure("black")
	st := b.Stats()
	px.unfreeze()
	// Any detector will do (the watchdog and paho's pinger race here).
	if st.State != bridge.Disconnected || st.Disconnects == 0 {
		t.Errorf("the blackhole was not detected during its phase: %+v", st)
	}
	for i, p := range pubs {
		ratio := black[i] / base[i]
		t.Logf("RATE publisher=%q baseline=%.0f msg/s blackhole=%.0f msg/s ratio=%.2f", p.name, base[i], black[i], ratio)
		if ratio < 1.0/3 {
			t.Errorf("%s: %.0f msg/s with the uplink blackholed, below a third of the baseline %.0f msg/s", p.name, black[i], base[i])
		}
	}
	t.Logf("blackhole phase: spool %d messages (%d bytes), sent meanwhile %d, dropped %d, accept failed %d; detected: %q",
		st.SpoolMessages, st.SpoolBytes, st.Sent-sentBefore, st.SpoolDropped, st.AcceptFailed, st.LastError)
	if st.SpoolDropped != 0 || st.AcceptFailed != 0 {
		t.Errorf("the spool lost messages: %+v", st)
	}
	b.waitState(t, bridge.Connected)
}

// TestQoS2AcrossOutage publishes QoS 2 messages locally before and during
// a blackhole (the freeze catches a full window in flight: PUBREC/PUBCOMP
// are delayed), and checks that every one arrives upstream, first copies
// in order, at QoS 2. The duplicates are counted and reported: QoS 2 is
// exactly once per connection, at least once across reconnects (doc.go),
// so at most one window per lost connection may arrive twice.
func TestQoS2AcrossOutage(t *testing.T) {
	const before, during = 200, 200
	up := startMosquitto(t)
	gw := startGateway(t)
	px := startProxy(t, up.addr())
	px.setAckDelay(10 * time.Millisecond)
	cfg := testConfig(t, "b1", px.url())
	cfg.Topics = []bridge.Rule{{Pattern: "q2/#", Direction: bridge.Out, QoS: 2, RemotePrefix: "site-a/"}}
	upSub := subscribe(t, up.addr(), "up-sub", "site-a/#", 2)
	b := runBridge(t, cfg, gw.srv)
	b.waitState(t, bridge.Connected)
	lc := client(t, gw.addr, "local-pub")

	pub := func(from, n int) {
		t.Helper()
		toks := make([]mqtt.Token, n)
		for i := range n {
			toks[i] = lc.Publish("q2/t", 2, false, "m"+strconv.Itoa(from+i))
		}
		for i, tok := range toks {
			if !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
				t.Fatalf("publish %d: %v", from+i, tok.Error())
			}
		}
	}
	pub(0, before)
	inFlight := b.Stats().InFlight
	px.freeze()
	pub(before, during)
	b.waitState(t, bridge.Disconnected)
	px.unfreeze()
	b.waitState(t, bridge.Connected)
	const n = before + during
	eventually(t, 30*time.Second, "all QoS 2 messages upstream", func() bool {
		return upSub.len() >= n && countDistinct(upSub.all(), "site-a/q2/t") == n
	})
	eventually(t, 5*time.Second, "spool empty", func() bool { return b.Stats().SpoolMessages == 0 })
	all := upSub.all()
	dups := inOrder(t, all, "site-a/q2/t", "m", n)
	for _, m := range all {
		if m.qos != 2 {
			t.Fatalf("%s %q arrived at QoS %d", m.topic, m.payload, m.qos)
		}
	}
	st := b.Stats()
	t.Logf("QOS2 published=%d (before=%d during=%d) delivered=%d distinct=%d duplicates=%d in-flight at freeze=%d disconnects=%d sent=%d acked=%d",
		n, before, during, len(all), n, dups, inFlight, st.Disconnects, st.Sent, st.Acked)
	if limit := int(st.Disconnects) * cfg.MaxInflight; dups > limit {
		t.Errorf("%d duplicates, more than one window (%d) per lost connection (%d)", dups, cfg.MaxInflight, st.Disconnects)
	}
}
