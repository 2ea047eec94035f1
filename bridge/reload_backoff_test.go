package bridge_test

import (
	"testing"
	"time"

	"github.com/edgegw/edgegw/internal/testutil"
)

// TestReloadReconnectsAtReconnectMin (review3): a reload that changes a
// connection setting ends the live connection (errReload), the bridge's
// own doing, and the bridge reconnects after reconnect_min, not after the
// backoff an outage before this connection grew. Before the fix the
// backoff was reset only by a connection that delivered something or
// stayed up 10 s, so a reload within 10 s of an idle connection waited
// between half and all of reconnect_max (here 2-4 s; 30-60 s with the
// default).
func TestReloadReconnectsAtReconnectMin(t *testing.T) {
	up := startMosquittoConf(t, "")
	gw := startGateway(t)
	cfg := testConfig(t, "b1", "tcp://127.0.0.1:1") // nothing listens: the backoff grows
	cfg.ReconnectMin, cfg.ReconnectMax = 20*time.Millisecond, 4*time.Second
	cfg.Topics = cfg.Topics[:1]
	b := runBridge(t, cfg, gw.srv)
	// 8 failures: the backoff's step is 2.56 s, the next 4 s.
	testutil.Eventually(t, 15*time.Second, "8 connect failures", func() bool { return b.Stats().ConnectFailures >= 8 })
	good := cfg
	good.Addresses = []string{up.url()}
	if _, err := b.Reload(good); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 15*time.Second, "connected", func() bool { return b.Stats().Connects == 1 })
	again := good
	again.ClientID = "edge-b1-renamed"
	start := time.Now()
	if _, err := b.Reload(again); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 15*time.Second, "reconnected", func() bool { return b.Stats().Connects == 2 })
	el := time.Since(start)
	t.Logf("REVIEW3 reconnected %s after the reload", el.Round(time.Millisecond))
	// Without the reset the wait alone is at least 2 s (half of 4 s).
	if el >= 2*time.Second {
		t.Fatalf("reconnected %s after the reload; want less than 2 s (the wait is reconnect_min, 20 ms)", el)
	}
}
