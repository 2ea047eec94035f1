package bridge_test

import (
	"strconv"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgegw/edgegw/bridge"
	"github.com/edgegw/edgegw/internal/testutil"
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
// healthy uplink, in the same test (loosely: see the bound).
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
	px.Freeze()
	black := measure("black")
	st := b.Stats()
	px.Thaw()
	// Any detector will do (the engine's ack watchdog and keepalive race here).
	if st.State != bridge.Disconnected || st.Disconnects == 0 {
		t.Errorf("the blackhole was not detected during its phase: %+v", st)
	}
	for i, p := range pubs {
		ratio := black[i] / base[i]
		t.Logf("RATE publisher=%q baseline=%.0f msg/s blackhole=%.0f msg/s ratio=%.2f", p.name, base[i], black[i], ratio)
		// Blocked publishers fail above (no ack within 10 s). The rate
		// bound is loose on purpose: on a shared 2-core machine under
		// -race the same publisher's rate swings 3x between phases with
		// nothing wrong (seen: 0.26); being blocked shows as ~0.
		if ratio < 1.0/10 {
			t.Errorf("%s: %.0f msg/s with the uplink blackholed, below a tenth of the baseline %.0f msg/s", p.name, black[i], base[i])
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
// blackholes (each freeze catches a full window in flight, with PUBREC and
// PUBCOMP delayed, so flows are cut in every phase), and checks that every
// one arrives upstream, first copies in order, at QoS 2. With a persistent
// upstream session it is exactly once: the engine re-sends the cut flows
// with their original packet ids (the PUBREL once a PUBREC came). With a clean
// session the broker forgets the ids, so at most one window per lost
// connection may arrive twice; the duplicates are reported.
func TestQoS2AcrossOutage(t *testing.T) {
	for _, tc := range []struct {
		name    string
		clean   bool
		outages int
	}{
		{"persistent", false, 3},
		{"clean", true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) { testQoS2AcrossOutage(t, tc.clean, tc.outages) })
	}
}

func testQoS2AcrossOutage(t *testing.T, clean bool, outages int) {
	const before, during = 200, 200
	up := startMosquitto(t)
	gw := startGateway(t)
	px := startProxy(t, up.addr())
	fl := watchFlows(px)
	px.SetDelay(testutil.Down, 10*time.Millisecond)
	cfg := testConfig(t, "b1", px.url())
	cfg.CleanSession = clean
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
	n := 0
	var inFlight []int64
	for range outages {
		pub(n, before)
		n += before
		inFlight = append(inFlight, b.Stats().InFlight)
		px.Freeze()
		pub(n, during)
		n += during
		b.waitState(t, bridge.Disconnected)
		px.Thaw()
		b.waitState(t, bridge.Connected)
	}
	testutil.Eventually(t, 30*time.Second, "all QoS 2 messages upstream", func() bool {
		return upSub.len() >= n && countDistinct(upSub.all(), "site-a/q2/t") == n
	})
	testutil.Eventually(t, 5*time.Second, "spool empty", func() bool { return b.Stats().SpoolMessages == 0 })
	all := upSub.all()
	dups := inOrder(t, all, "site-a/q2/t", "m", n)
	for _, m := range all {
		if m.qos != 2 {
			t.Fatalf("%s %q arrived at QoS %d", m.topic, m.payload, m.qos)
		}
	}
	st := b.Stats()
	_, dupPub, resentRel := fl.counts()
	t.Logf("QOS2 clean_session=%v published=%d outages=%d delivered=%d distinct=%d duplicates=%d in-flight at freezes=%v disconnects=%d sent=%d resumed=%d (DUP PUBLISH %d, re-sent PUBREL %d) acked=%d",
		clean, n, outages, len(all), n, dups, inFlight, st.Disconnects, st.Sent, st.Resumed, dupPub, resentRel, st.Acked)
	if !clean {
		if dups != 0 {
			t.Errorf("%d duplicates with a persistent upstream session; want exactly once", dups)
		}
		if st.Resumed == 0 {
			t.Errorf("no publish was re-sent from the store: the outages cut no flow, the test proves nothing")
		}
		return
	}
	if limit := int(st.Disconnects) * cfg.MaxInflight; dups > limit {
		t.Errorf("%d duplicates, more than one window (%d) per lost connection (%d)", dups, cfg.MaxInflight, st.Disconnects)
	}
}

// TestQoS2LostAck cuts QoS 2 flows at one phase each: the broker's PUBREC
// is lost (the broker has the message, the bridge must re-send the PUBLISH
// under the same packet id, which the broker recognises) or its PUBCOMP is
// lost (the broker has released the id, so a re-sent PUBLISH would be a
// new message: the bridge must re-send the PUBREL). Each message must
// arrive upstream exactly once.
func TestQoS2LostAck(t *testing.T) {
	for _, tc := range []struct {
		name string
		typ  byte
	}{
		{"pubrec", 5},
		{"pubcomp", 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 40
			up := startMosquitto(t)
			gw := startGateway(t)
			px := startProxy(t, up.addr())
			fl := watchFlows(px)
			cfg := testConfig(t, "b1", px.url())
			cfg.CleanSession = false
			cfg.AckTimeout = time.Minute // the test cuts the connection itself
			cfg.Topics = []bridge.Rule{{Pattern: "q2/#", Direction: bridge.Out, QoS: 2}}
			upSub := subscribe(t, up.addr(), "up-sub", "q2/#", 2)
			b := runBridge(t, cfg, gw.srv)
			b.waitState(t, bridge.Connected)
			lc := client(t, gw.addr, "local-pub")

			fl.swallow(tc.typ)
			toks := make([]mqtt.Token, n/2)
			for i := range toks {
				toks[i] = lc.Publish("q2/t", 2, false, "m"+strconv.Itoa(i))
			}
			for _, tok := range toks {
				if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
					t.Fatalf("local publish: %v", tok.Error())
				}
			}
			testutil.Eventually(t, 10*time.Second, "a full window of acks swallowed", func() bool {
				sw, _, _ := fl.counts()
				return sw >= cfg.MaxInflight
			})
			fl.swallow(0)
			px.Cut()
			b.waitState(t, bridge.Disconnected)
			b.waitState(t, bridge.Connected)
			for i := n / 2; i < n; i++ {
				publish(t, lc, "q2/t", 2, "m"+strconv.Itoa(i))
			}
			testutil.Eventually(t, 10*time.Second, "spool empty", func() bool { return b.Stats().SpoolMessages == 0 })
			testutil.Eventually(t, 10*time.Second, "all messages upstream", func() bool { return countDistinct(upSub.all(), "q2/t") == n })
			time.Sleep(200 * time.Millisecond) // a late duplicate would arrive now
			all := upSub.all()
			dups := inOrder(t, all, "q2/t", "m", n)
			sw, dupPub, resentRel := fl.counts()
			st := b.Stats()
			t.Logf("QOS2 lost=%s swallowed=%d resumed=%d DUP PUBLISH=%d re-sent PUBREL=%d delivered=%d duplicates=%d",
				tc.name, sw, st.Resumed, dupPub, resentRel, len(all), dups)
			if dups != 0 {
				t.Errorf("%d duplicates; want exactly once", dups)
			}
			switch tc.typ {
			case 5:
				if dupPub < cfg.MaxInflight || resentRel != 0 {
					t.Errorf("lost PUBREC: want %d PUBLISH re-sent with DUP and no PUBREL, got %d and %d", cfg.MaxInflight, dupPub, resentRel)
				}
			case 7:
				if resentRel < cfg.MaxInflight || dupPub != 0 {
					t.Errorf("lost PUBCOMP: want %d PUBREL re-sent and no PUBLISH, got %d and %d", cfg.MaxInflight, resentRel, dupPub)
				}
			}
		})
	}
}

// TestQoS2StopDrains stops a bridge while QoS 2 publishes are in flight
// (the broker's acks are slow) and starts a new one on the same spool: a
// stopping bridge waits for its in-flight flows to complete, so nothing
// arrives twice across the restart and nothing is lost.
func TestQoS2StopDrains(t *testing.T) { testQoS2Restart(t, false) }

// TestQoS2AfterCrash is the same with a stop that cannot wait (the uplink
// is frozen, as after a crash or a power cut): the cloud broker keeps the
// old process's QoS 2 flows in its session, and a new bridge on the same
// spool must send each unfinished record under the packet id the old one
// used: ids counted from 1 by each new client would collide with the old
// flows, and the broker would drop the new messages as duplicates.
func TestQoS2AfterCrash(t *testing.T) { testQoS2Restart(t, true) }

// testQoS2Restart runs a first batch through (so that the ids in flight at
// the stop are not the ones a fresh client starts with), stops the
// bridge with a full window of slow QoS 2 flows in flight (frozen first if
// crash), and checks that a new bridge on the same spool delivers every
// message exactly once.
func testQoS2Restart(t *testing.T, crash bool) {
	const n, first = 60, 20
	up := startMosquitto(t)
	gw := startGateway(t)
	px := startProxy(t, up.addr())
	cfg := testConfig(t, "b1", px.url())
	cfg.CleanSession = false
	cfg.Topics = []bridge.Rule{{Pattern: "q2/#", Direction: bridge.Out, QoS: 2}}
	upSub := subscribe(t, up.addr(), "up-sub", "q2/#", 2)
	b1 := runBridge(t, cfg, gw.srv)
	b1.waitState(t, bridge.Connected)
	lc := client(t, gw.addr, "local-pub")
	toks := make([]mqtt.Token, n)
	for i := range toks {
		if i == first {
			testutil.Eventually(t, 5*time.Second, "the first batch upstream", func() bool { return b1.Stats().Acked == first })
			px.SetDelay(testutil.Down, 200*time.Millisecond)
		}
		toks[i] = lc.Publish("q2/t", 2, false, "m"+strconv.Itoa(i))
	}
	for _, tok := range toks {
		if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("local publish: %v", tok.Error())
		}
	}
	testutil.Eventually(t, 5*time.Second, "a full window in flight", func() bool { return b1.Stats().InFlight == int64(cfg.MaxInflight) })
	if crash {
		px.Freeze() // the broker has the PUBLISHes; its PUBRECs never come back
	}
	b1.stop(t)
	st1 := b1.Stats()
	if crash {
		px.Thaw()
		px.Cut()
	}
	px.SetDelay(testutil.Down, 0)

	b2 := runBridge(t, cfg, gw.srv)
	testutil.Eventually(t, 20*time.Second, "all messages upstream", func() bool { return countDistinct(upSub.all(), "q2/t") == n })
	testutil.Eventually(t, 5*time.Second, "spool empty", func() bool { return b2.Stats().SpoolMessages == 0 })
	time.Sleep(300 * time.Millisecond) // a late duplicate would arrive now
	all := upSub.all()
	dups := inOrder(t, all, "q2/t", "m", n)
	t.Logf("QOS2 crash=%v with %d in flight: first bridge acked %d, spool left %d; delivered=%d duplicates=%d",
		crash, cfg.MaxInflight, st1.Acked, st1.SpoolMessages, len(all), dups)
	if dups != 0 {
		t.Errorf("%d duplicates across a stop and start; want exactly once", dups)
	}
}
