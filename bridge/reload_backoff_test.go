package bridge_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/edgegw/edgegw/internal/testutil"
)

// TestReloadReconnectsAtOnce: a reload that changes a
// connection setting ends the live connection (errReload), the bridge's
// own doing, and the bridge reconnects at once, not after the backoff an
// outage before this connection grew. The backoff is reset only by a
// connection the broker acknowledged something on or that stayed up 10 s,
// so without the reload's wake-up a reload within 10 s of an idle
// connection waited between half and all of reconnect_max (here 2-4 s;
// 30-60 s with the default).
func TestReloadReconnectsAtOnce(t *testing.T) {
	port := freePort(t)
	gw := startGateway(t)
	cfg := testConfig(t, "b1", fmt.Sprintf("tcp://127.0.0.1:%d", port)) // nothing listens yet: the backoff grows
	cfg.ReconnectMin, cfg.ReconnectMax = 20*time.Millisecond, 4*time.Second
	cfg.Topics = cfg.Topics[:1]
	b := runBridge(t, cfg, gw.srv)
	// 8 failures: the backoff's step is 2.56 s, then 4 s.
	testutil.Eventually(t, 15*time.Second, "8 connect failures", func() bool { return b.Stats().ConnectFailures >= 8 })
	startMosquittoConf(t, fmt.Sprintf("listener %d 127.0.0.1\n", port), port)
	testutil.Eventually(t, 15*time.Second, "connected", func() bool { return b.Stats().Connects == 1 })
	again := cfg
	again.ClientID = "edge-b1-renamed"
	start := time.Now()
	if _, err := b.Reload(again); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 15*time.Second, "reconnected", func() bool { return b.Stats().Connects == 2 })
	el := time.Since(start)
	// Without the wake the wait alone is at least 2 s (half of the 4 s
	// step); with it a reconnect takes milliseconds on loopback. The bound
	// sits just under the wait, so a loaded machine has ~2 s of slack.
	if el >= 1900*time.Millisecond {
		t.Fatalf("reconnected %s after the reload; want it before the backoff's wait (at least 2 s) ends", el)
	}
}

// TestReloadDuringBackoffConnectsAtOnce: a reload that fixes a
// connection setting while the bridge waits between failed attempts is
// tried at once, not after the wait the failures grew (up to
// reconnect_max: with the backoff reset only by a healthy connection, a
// client id taken over by another client now grows it too).
func TestReloadDuringBackoffConnectsAtOnce(t *testing.T) {
	up := startMosquittoConf(t, "")
	gw := startGateway(t)
	cfg := testConfig(t, "b1", "tcp://127.0.0.1:1") // nothing listens: the backoff grows
	cfg.ReconnectMin, cfg.ReconnectMax = 20*time.Millisecond, 4*time.Second
	cfg.Topics = cfg.Topics[:1]
	b := runBridge(t, cfg, gw.srv)
	// After the 9th failure the step is 4 s: the wait is 2-4 s.
	testutil.Eventually(t, 15*time.Second, "9 connect failures", func() bool { return b.Stats().ConnectFailures >= 9 })
	good := cfg
	good.Addresses = []string{up.url()}
	start := time.Now()
	if _, err := b.Reload(good); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 15*time.Second, "connected", func() bool { return b.Stats().Connects == 1 })
	el := time.Since(start)
	if el >= 1900*time.Millisecond { // the wait it cuts short is 2-4 s
		t.Fatalf("connected %s after the reload; want it before the backoff's wait (2-4 s) ends", el)
	}
}
