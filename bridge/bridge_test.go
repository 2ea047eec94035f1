package bridge_test

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgegw/edgegw/bridge"
	"github.com/edgegw/edgegw/internal/testutil"
)

// testConfig is a bridge to addrs with fast timers for tests.
func testConfig(t testing.TB, name string, addrs ...string) bridge.Config {
	return bridge.Config{
		Name:              name,
		Addresses:         addrs,
		ClientID:          "edge-" + name,
		CleanSession:      true,
		KeepAlive:         time.Second,
		ConnectTimeout:    time.Second,
		WriteTimeout:      500 * time.Millisecond,
		AckTimeout:        time.Second,
		MaxInflight:       16,
		ReconnectMin:      20 * time.Millisecond,
		ReconnectMax:      200 * time.Millisecond,
		SpoolDir:          t.TempDir(),
		SpoolSync:         "batch",
		SpoolSyncInterval: 5 * time.Millisecond,
		Topics: []bridge.Rule{
			{Pattern: "sensors/#", Direction: bridge.Out, QoS: 1, RemotePrefix: "site-a/"},
			{Pattern: "cmd/#", Direction: bridge.In, QoS: 1, RemotePrefix: "site-a/"},
		},
	}
}

// running is a Bridge whose Run goroutine is stopped in cleanup (or by stop).
type running struct {
	*bridge.Bridge
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

func runBridge(t testing.TB, cfg bridge.Config, gw bridge.Gateway) *running {
	t.Helper()
	b, err := bridge.New(cfg, gw, testLog())
	if err != nil {
		t.Fatal(err)
	}
	r := &running{Bridge: b}
	r.start(t)
	return r
}

// start runs r.Bridge until stop or cleanup.
func (r *running) start(t testing.TB) {
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.done = cancel, make(chan error, 1)
	go func() { r.done <- r.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
}

func (r *running) stop(t testing.TB) {
	r.once.Do(func() {
		r.cancel()
		select {
		case err := <-r.done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("Run did not return")
		}
	})
}

func (r *running) waitState(t testing.TB, s bridge.State) {
	t.Helper()
	testutil.Eventually(t, 15*time.Second, "bridge "+s.String(), func() bool { return r.Stats().State == s })
}

func TestOutInBoth(t *testing.T) {
	up := startMosquitto(t)
	gw := startGateway(t)
	cfg := testConfig(t, "b1", up.url())
	cfg.Topics = append(cfg.Topics,
		bridge.Rule{Pattern: "both/#", Direction: bridge.Both, QoS: 1, RemotePrefix: "site-a/"},
		bridge.Rule{Pattern: "q2/#", Direction: bridge.Out, QoS: 2, LocalPrefix: "edge/", RemotePrefix: "site-a/"},
		bridge.Rule{Pattern: "q0/#", Direction: bridge.Out, QoS: 0, RemotePrefix: "site-a/"},
	)
	upSub := subscribe(t, up.addr(), "up-sub", "site-a/#", 2)
	localSub := subscribe(t, gw.addr, "local-sub", "#", 2)
	b := runBridge(t, cfg, gw.srv)
	b.waitState(t, bridge.Connected)

	lc := client(t, gw.addr, "local-pub")
	uc := client(t, up.addr(), "up-pub")

	// out, with prefix remap and QoS capped by the rule
	publish(t, lc, "sensors/t1", 1, "21.5")
	publish(t, lc, "edge/q2/a", 2, "exactly")
	publish(t, lc, "q0/a", 1, "capped")
	// in
	publish(t, uc, "site-a/cmd/x", 1, "reboot")
	// both, overlapping: each way exactly one copy
	publish(t, lc, "both/fromlocal", 1, "L")
	publish(t, uc, "site-a/both/fromcloud", 1, "C")

	testutil.Eventually(t, 10*time.Second, "out messages upstream", func() bool {
		return upSub.has("site-a/sensors/t1", "21.5") && upSub.has("site-a/q2/a", "exactly") &&
			upSub.has("site-a/q0/a", "capped") && upSub.has("site-a/both/fromlocal", "L")
	})
	testutil.Eventually(t, 10*time.Second, "in messages locally", func() bool {
		return localSub.has("cmd/x", "reboot") && localSub.has("both/fromcloud", "C")
	})
	// Sentinels through both ways: anything echoed would arrive before them.
	publish(t, lc, "both/sentinel-l", 1, "end")
	publish(t, uc, "site-a/both/sentinel-c", 1, "end")
	testutil.Eventually(t, 10*time.Second, "sentinels", func() bool {
		return upSub.has("site-a/both/sentinel-l", "end") && localSub.has("both/sentinel-c", "end") &&
			upSub.has("site-a/both/sentinel-c", "end") && localSub.has("both/sentinel-l", "end")
	})
	for topic, col := range map[string]*collector{
		"site-a/sensors/t1": upSub, "site-a/both/fromlocal": upSub, "site-a/both/fromcloud": upSub,
		"both/fromlocal": localSub, "both/fromcloud": localSub, "cmd/x": localSub,
	} {
		if n := col.count(topic); n != 1 {
			t.Errorf("%s: %d copies, want 1", topic, n)
		}
	}
	for _, m := range upSub.all() {
		switch m.topic {
		case "site-a/q2/a":
			if m.qos != 2 {
				t.Errorf("q2 arrived at qos %d", m.qos)
			}
		case "site-a/q0/a":
			if m.qos != 0 {
				t.Errorf("q0 rule: arrived at qos %d", m.qos)
			}
		}
	}
	if n := upSub.count("site-a/cmd/x"); n != 1 {
		t.Errorf("cmd/x upstream: %d", n)
	}
	st := b.Stats()
	if st.Received < 2 || st.Acked < 4 || st.Connects != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestOutageBacklog(t *testing.T) {
	up := startMosquitto(t)
	gw := startGateway(t)
	px := startProxy(t, up.addr()) // lets the test hold the bridge back until the subscriber is in
	states := subscribe(t, gw.addr, "state-sub", "$SYS/bridge/b1/state", 1)
	cfg := testConfig(t, "b1", px.url())
	n := 500 // EDGEGW_BRIDGE_BACKLOG=10000 measures a larger drain (run it without -race)
	if v, err := strconv.Atoi(os.Getenv("EDGEGW_BRIDGE_BACKLOG")); err == nil && v > 0 {
		n = v
	}
	b := runBridge(t, cfg, gw.srv)
	b.waitState(t, bridge.Connected)

	up.Kill()
	b.waitState(t, bridge.Disconnected)
	lc := client(t, gw.addr, "local-pub")
	publishMany(t, lc, "sensors/t1", n, "m") // every one acked locally: in the spool
	if st := b.Stats(); st.SpoolMessages != int64(n) {
		t.Fatalf("spool holds %d, want %d", st.SpoolMessages, n)
	}

	px.Refuse(true)
	up.Start()
	upSub := subscribe(t, up.addr(), "up-sub", "site-a/#", 1)
	start := time.Now()
	px.Refuse(false)
	b.waitState(t, bridge.Connected)
	connected := time.Now()
	testutil.Eventually(t, 60*time.Second, "backlog upstream", func() bool {
		return upSub.len() >= n && countDistinct(upSub.all(), "site-a/sensors/t1") == n
	})
	drain, elapsed := time.Since(connected), time.Since(start)
	dups := inOrder(t, upSub.all(), "site-a/sensors/t1", "m", n)
	st := b.Stats()
	t.Logf("DRAIN messages=%d window=%d: %.0f msg/s from connected (%s), %.0f msg/s incl. reconnect (%s); %d duplicates, sync %s",
		n, cfg.MaxInflight, float64(n)/drain.Seconds(), drain.Round(time.Millisecond),
		float64(n)/elapsed.Seconds(), elapsed.Round(time.Millisecond), dups, cfg.SpoolSync)
	if st.SpoolDropped != 0 {
		t.Errorf("spool dropped %d", st.SpoolDropped)
	}
	testutil.Eventually(t, 5*time.Second, "spool empty", func() bool { return b.Stats().SpoolMessages == 0 })

	var seq []string
	for _, m := range states.all() {
		if len(seq) == 0 || seq[len(seq)-1] != m.payload {
			seq = append(seq, m.payload)
		}
	}
	want := []string{"connected", "disconnected", "connected"}
	if len(seq) < 3 || seq[len(seq)-3] != want[0] || seq[len(seq)-2] != want[1] || seq[len(seq)-1] != want[2] {
		t.Errorf("state sequence %v, want it to end with %v", seq, want)
	}
}

// plainPahoCap bounds the wait for the plain paho client of
// TestHalfOpenUplink: paho's default PingTimeout (10s) after its keepalive,
// plus four keepalives of slack. Beyond it the client is reported "not
// detected within cap".
const plainPahoCap = 15 * time.Second

// plainKeepAlive is the plain paho client's keepalive: the bridge's own
// default in these tests, whatever a case sets for the bridge.
const plainKeepAlive = time.Second

// TestHalfOpenUplink freezes the proxy (both sockets stay open, nothing is
// forwarded) and checks that each detector finds the dead uplink in time,
// that the state says so at once, and that everything acked locally
// arrives after the link comes back.
//
// For comparison, a plain paho client (default options but the same
// keepalive and no auto-reconnect) connected to the same mosquitto through
// its own proxy, frozen at the same instant, publishes the same messages
// upstream; the time until its connection-lost callback is logged (or "not
// detected within cap"). Only the bridge's time is asserted.
func TestHalfOpenUplink(t *testing.T) {
	// The write-deadline case leaves only its own detector able to fire
	// (the others have periods far beyond it), so which one trips does not
	// depend on which timer wins on a busy machine (issue 15 point 10:
	// with a 1 s keepalive the pinger sometimes beat the write deadline). The
	// detection time is logged and bounded only loosely: the configured
	// bound plus noSoonerThanSlack, a check that detection happens, not a
	// benchmark.
	const otherDetectorsOff = time.Minute
	cases := []struct {
		name       string
		ackTimeout time.Duration
		keepAlive  time.Duration
		small, big int // messages published while frozen
		// bound is what the configuration promises for this detector;
		// the assertion adds detectSlack.
		bound func(bridge.Config) time.Duration
		check func(bridge.Stats) bool
	}{
		// small publishes in flight: the ack watchdog (ack_timeout 1s)
		// (keepalive 1s: its detector needs 1.75s, the watchdog 1s)
		{"watchdog", time.Second, time.Second, 20, 0,
			func(c bridge.Config) time.Duration { return c.AckTimeout },
			func(s bridge.Stats) bool { return s.WatchdogTrips > 0 }},
		// an 8 MiB publish fills the socket: the write deadline (500ms
		// without progress)
		{"write deadline", otherDetectorsOff, otherDetectorsOff, 0, 1,
			func(c bridge.Config) time.Duration { return c.WriteTimeout },
			func(s bridge.Stats) bool { return s.WriteTimeouts > 0 }},
		// nothing to send: paho's pinger (keepalive 1s, checked every
		// keepalive/4, + ping timeout = write_timeout 500ms)
		{"keepalive", otherDetectorsOff, time.Second, 0, 0,
			func(c bridge.Config) time.Duration { return c.KeepAlive + c.KeepAlive/4 + c.WriteTimeout },
			func(s bridge.Stats) bool { return s.WatchdogTrips == 0 && s.WriteTimeouts == 0 }},
	}
	// detectSlack covers filling the socket buffers before a detector's
	// clock starts and scheduling under -race on a loaded shared machine.
	const detectSlack = 10 * time.Second
	big := string(make([]byte, 8<<20))
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			up := startMosquitto(t)
			gw := startGateway(t)
			px := startProxy(t, up.addr())
			pxPlain := startProxy(t, up.addr())
			upSub := subscribe(t, up.addr(), "up-sub", "site-a/#", 1)
			cfg := testConfig(t, "b1", px.url())
			cfg.AckTimeout = tc.ackTimeout
			cfg.KeepAlive = tc.keepAlive
			b := runBridge(t, cfg, gw.srv)
			b.waitState(t, bridge.Connected)
			lc := client(t, gw.addr, "local-pub")

			var plainLost atomic.Int64 // unix nanos of the connection-lost callback
			var plainWhy atomic.Value
			po := mqtt.NewClientOptions().AddBroker(pxPlain.url()).SetClientID("plain-paho").
				SetKeepAlive(plainKeepAlive).SetAutoReconnect(false).
				SetConnectionLostHandler(func(_ mqtt.Client, err error) {
					plainWhy.Store(err.Error())
					plainLost.Store(time.Now().UnixNano())
				})
			plain := mqtt.NewClient(po)
			if tok := plain.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
				t.Fatalf("plain paho connect: %v", tok.Error())
			}
			t.Cleanup(func() { plain.Disconnect(50) })

			publishMany(t, lc, "sensors/t1", 20, "a")
			publishMany(t, plain, "plain/t1", 20, "a")
			testutil.Eventually(t, 10*time.Second, "first batch", func() bool { return countDistinct(upSub.all(), "site-a/sensors/t1") == 20 })
			// ... and acked to the bridge: a PUBACK still on its way when the
			// proxy freezes counts as "read from upstream" after the next
			// publishes were sent and postpones the watchdog by a period.
			testutil.Eventually(t, 10*time.Second, "first batch acked", func() bool { return b.Stats().SpoolMessages == 0 })

			px.Freeze()
			pxPlain.Freeze()
			frozen := time.Now()
			for i := range tc.small { // not waited for: they cannot be acked
				plain.Publish("plain/t1", 1, false, "b"+strconv.Itoa(i))
			}
			for range tc.big {
				plain.Publish("plain/big", 1, false, big)
			}
			publishMany(t, lc, "sensors/t1", tc.small, "b") // acked locally although the uplink is dead
			for range tc.big {
				publish(t, lc, "sensors/big", 1, big)
			}
			// No detector can start before the message reached the bridge.
			accepted := time.Since(frozen)
			b.waitState(t, bridge.Disconnected)
			detect := time.Since(frozen)
			st := b.Stats()
			bound := tc.bound(cfg)
			t.Logf("DETECTION case=%q bridge: configured=%s measured=%s (local publish %s; write_timeout=%s ack_timeout=%s keepalive=%s; watchdog trips %d, write timeouts %d) reason=%q",
				tc.name, bound, detect.Round(time.Millisecond), accepted.Round(time.Millisecond), cfg.WriteTimeout, cfg.AckTimeout, cfg.KeepAlive,
				st.WatchdogTrips, st.WriteTimeouts, st.LastError)
			if limit := accepted + bound + detectSlack; detect > limit {
				t.Errorf("detection took %s, want <= %s (local publish %s + configured %s + slack %s)", detect, limit, accepted, bound, detectSlack)
			}
			if !tc.check(st) {
				t.Errorf("wrong detector: %+v", st)
			}

			deadline := frozen.Add(plainPahoCap)
			for plainLost.Load() == 0 && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			if at := plainLost.Load(); at != 0 {
				t.Logf("DETECTION case=%q plain paho: keepalive=%s measured=%s reason=%q",
					tc.name, plainKeepAlive, time.Unix(0, at).Sub(frozen).Round(time.Millisecond), plainWhy.Load())
			} else {
				t.Logf("DETECTION case=%q plain paho: keepalive=%s measured=not detected within cap %s (IsConnectionOpen=%v)",
					tc.name, plainKeepAlive, plainPahoCap, plain.IsConnectionOpen())
			}

			px.Thaw()
			pxPlain.Thaw()
			b.waitState(t, bridge.Connected)
			testutil.Eventually(t, 20*time.Second, "everything after unfreeze", func() bool {
				all := upSub.all()
				return countDistinct(all, "site-a/sensors/t1") == 20+tc.small && countDistinct(all, "site-a/sensors/big") == tc.big
			})
			var rest []rx
			for _, m := range upSub.all() {
				if m.topic == "site-a/sensors/t1" && m.payload[0] == 'b' {
					rest = append(rest, m)
				}
			}
			inOrder(t, rest, "site-a/sensors/t1", "b", tc.small)
			testutil.Eventually(t, 5*time.Second, "spool empty", func() bool { return b.Stats().SpoolMessages == 0 })
		})
	}
}

func TestBoundedInflight(t *testing.T) {
	up := startMosquitto(t)
	gw := startGateway(t)
	px := startProxy(t, up.addr())
	px.SetDelay(testutil.Down, 20*time.Millisecond)
	fl := watchFlows(px)
	upSub := subscribe(t, up.addr(), "up-sub", "site-a/#", 1)
	cfg := testConfig(t, "b1", px.url())
	cfg.MaxInflight = 4
	b := runBridge(t, cfg, gw.srv)
	b.waitState(t, bridge.Connected)

	const n = 200
	var maxSeen int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			maxSeen = max(maxSeen, b.Stats().InFlight)
			time.Sleep(time.Millisecond)
		}
	}()
	lc := client(t, gw.addr, "local-pub")
	publishMany(t, lc, "sensors/t1", n, "m")
	testutil.Eventually(t, 30*time.Second, "all upstream", func() bool { return countDistinct(upSub.all(), "site-a/sensors/t1") == n })
	close(stop)
	wg.Wait()
	inOrder(t, upSub.all(), "site-a/sensors/t1", "m", n)
	t.Logf("max unacked at the proxy %d, max Stats.InFlight %d, window %d", fl.maxOutstanding(), maxSeen, cfg.MaxInflight)
	if got := fl.maxOutstanding(); got > cfg.MaxInflight || got < 2 {
		t.Errorf("unacked PUBLISH at the proxy peaked at %d, window %d", got, cfg.MaxInflight)
	}
	if maxSeen > int64(cfg.MaxInflight) {
		t.Errorf("Stats.InFlight peaked at %d, window %d", maxSeen, cfg.MaxInflight)
	}
}

func TestRestartDurability(t *testing.T) {
	up := startMosquitto(t)
	gw := startGateway(t)
	dir := t.TempDir()
	cfg := testConfig(t, "b1", "tcp://127.0.0.1:"+strconv.Itoa(freePort(t))) // nobody listens
	cfg.SpoolDir = dir
	b1 := runBridge(t, cfg, gw.srv)
	testutil.Eventually(t, 10*time.Second, "a failed connect", func() bool { return b1.Stats().ConnectFailures > 0 })
	lc := client(t, gw.addr, "local-pub")
	publishMany(t, lc, "sensors/t1", 50, "m")
	b1.stop(t)

	upSub := subscribe(t, up.addr(), "up-sub", "site-a/#", 1)
	cfg.Addresses = []string{"tcp://127.0.0.1:" + strconv.Itoa(freePort(t)), up.url()} // failover to the second
	b2 := runBridge(t, cfg, gw.srv)
	testutil.Eventually(t, 20*time.Second, "messages from the old spool", func() bool { return countDistinct(upSub.all(), "site-a/sensors/t1") == 50 })
	inOrder(t, upSub.all(), "site-a/sensors/t1", "m", 50)
	if st := b2.Stats(); st.Address != up.url() {
		t.Errorf("connected to %q, want failover to %q", st.Address, up.url())
	}
}

// An idle spool behind a flapping uplink holds one sender's wake-up
// channel, not one per reconnect: each connection's sender takes its own
// off the list when it ends (spool ForgetWake). Nothing is published, so
// no commit wakes (and clears) them meanwhile.
func TestFlappingUplinkKeepsOneSpoolWaiter(t *testing.T) {
	const rounds = 20
	up := startMosquitto(t)
	gw := startGateway(t)
	px := startProxy(t, up.addr())
	b := runBridge(t, testConfig(t, "b1", px.url()), gw.srv)
	b.waitState(t, bridge.Connected)
	for i := 1; i <= rounds; i++ {
		px.Cut()
		testutil.Eventually(t, 10*time.Second, "reconnect", func() bool {
			st := b.Stats()
			return st.Connects == uint64(i+1) && st.State == bridge.Connected
		})
	}
	testutil.Eventually(t, 5*time.Second, "one waiter", func() bool { return b.SpoolWaitersForTest() <= 1 })
	if n := b.SpoolWaitersForTest(); n > 1 {
		t.Fatalf("after %d reconnects the spool holds %d wake-up channels, want at most 1", rounds, n)
	}
}

// TestReconnectChurn drops the uplink 100 times (proxy resets) while
// messages flow: every message arrives at least once, Connects counts each
// reconnect, the goroutine count returns to what it was before the churn
// (polled), the live heap after GC returns to its baseline within a small
// margin, and (TestMain's goleak) no goroutine outlives the bridge.
func TestReconnectChurn(t *testing.T) {
	const rounds, per = 100, 20
	const heapMargin = 2 << 20
	up := startMosquitto(t)
	gw := startGateway(t)
	px := startProxy(t, up.addr())
	upSub := subscribe(t, up.addr(), "up-sub", "site-a/#", 1)
	b := runBridge(t, testConfig(t, "b1", px.url()), gw.srv)
	b.waitState(t, bridge.Connected)
	lc := client(t, gw.addr, "local-pub")
	round := func(i int) {
		t.Helper()
		publishMany(t, lc, "sensors/t1", per, "r"+strconv.Itoa(i)+"-")
		px.Cut()
		testutil.Eventually(t, 10*time.Second, "reconnect", func() bool {
			st := b.Stats()
			return st.Connects == uint64(i+2) && st.State == bridge.Connected
		})
	}
	settled := func(total int) {
		t.Helper()
		testutil.Eventually(t, 20*time.Second, "all messages", func() bool {
			return upSub.len() >= total && countDistinct(upSub.all(), "site-a/sensors/t1") == total
		})
		testutil.Eventually(t, 5*time.Second, "spool empty", func() bool { return b.Stats().SpoolMessages == 0 })
	}
	// A first round warms up whatever is allocated or started lazily, so
	// that the baseline is the steady state.
	round(0)
	settled(per)
	g0, h0 := runtime.NumGoroutine(), liveHeap()
	start := time.Now()
	for i := 1; i <= rounds; i++ {
		round(i)
	}
	settled((rounds + 1) * per)
	churn := time.Since(start)
	var g1 int
	deadline := time.Now().Add(10 * time.Second)
	for g1 = runtime.NumGoroutine(); g1 > g0 && time.Now().Before(deadline); g1 = runtime.NumGoroutine() {
		time.Sleep(5 * time.Millisecond)
	}
	h1 := liveHeap()
	st := b.Stats()
	t.Logf("CHURN reconnects=%d in %s, messages=%d sent=%d acked=%d (%d re-sent); goroutines before=%d after=%d; heap after GC before=%d after=%d (%+d bytes, margin %d)",
		rounds, churn.Round(time.Millisecond), (rounds+1)*per, st.Sent, st.Acked, st.Sent-uint64((rounds+1)*per),
		g0, g1, h0, h1, int64(h1)-int64(h0), heapMargin)
	if g1 > g0 {
		buf := make([]byte, 1<<20)
		t.Errorf("goroutines: %d before the churn, %d after\n%s", g0, g1, buf[:runtime.Stack(buf, true)])
	}
	if h1 > h0+heapMargin {
		t.Errorf("live heap after GC: %d before the churn, %d after (margin %d)", h0, h1, heapMargin)
	}
	if st.Connects != rounds+2 {
		t.Errorf("connects %d, want %d", st.Connects, rounds+2)
	}
}

// liveHeap is the heap in use after a full GC.
func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
