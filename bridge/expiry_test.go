package bridge_test

import (
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/edgegw/edgegw/bridge"
	"github.com/edgegw/edgegw/internal/testutil"
)

// TestStaleNeverSent: messages spooled during an outage whose rule's
// max_age or MQTT 5 message expiry passed before the uplink came back are
// dropped (counted as expired in the ledger) and never reach the cloud;
// fresh ones, and a max_age message sent while the uplink is up, do.
func TestStaleNeverSent(t *testing.T) {
	up := startMosquitto(t)
	gw := startGateway(t)
	px := startProxy(t, up.addr())
	cfg := testConfig(t, "b1", px.url())
	cfg.Topics = []bridge.Rule{
		{Pattern: "stale/#", Direction: bridge.Out, QoS: 1, RemotePrefix: "site/", MaxAge: 300 * time.Millisecond},
		{Pattern: "#", Direction: bridge.Out, QoS: 1, RemotePrefix: "site/"},
	}
	upSub := subscribe(t, up.addr(), "up-sub", "site/#", 1)
	b := runBridge(t, cfg, gw.srv)
	b.waitState(t, bridge.Connected)
	lc := client(t, gw.addr, "local-pub")

	// While the uplink is up a max_age message goes at once.
	publish(t, lc, "stale/live", 1, "live")
	testutil.Eventually(t, 10*time.Second, "the live max_age message upstream", func() bool { return upSub.has("site/stale/live", "live") })

	px.Refuse(true)
	px.Cut()
	b.waitState(t, bridge.Disconnected)
	for i := range 5 {
		publish(t, lc, "stale/t", 1, "s"+strconv.Itoa(i))
		publish(t, lc, "fresh/t", 1, "f"+strconv.Itoa(i))
	}
	// MQTT 5 message expiry, 1 s, from a v5 publisher.
	host, port, _ := net.SplitHostPort(gw.addr)
	for i := range 3 {
		out, err := exec.Command("mosquitto_pub", "-h", host, "-p", port, "-V", "5", "-q", "1", "-t", "v5/t",
			"-D", "publish", "message-expiry-interval", "1", "-m", "e"+strconv.Itoa(i)).CombinedOutput()
		if err != nil {
			t.Fatalf("mosquitto_pub: %v %s", err, out)
		}
	}
	expired := time.Now().Add(1100 * time.Millisecond) // every expiry above has passed by then
	testutil.Eventually(t, 5*time.Second, "the expiries passed", func() bool { return time.Now().After(expired) })
	px.Refuse(false)
	b.waitState(t, bridge.Connected)
	publish(t, lc, "fresh/end", 1, "end")
	testutil.Eventually(t, 10*time.Second, "the end marker upstream", func() bool { return upSub.has("site/fresh/end", "end") })

	if n := upSub.count("site/fresh/t"); n != 5 {
		t.Errorf("%d of 5 fresh messages upstream", n)
	}
	if n := upSub.count("site/stale/t") + upSub.count("site/v5/t"); n != 0 {
		t.Errorf("%d expired messages reached the cloud", n)
	}
	var l bridge.Ledger
	testutil.Eventually(t, 5*time.Second, "the spool empty", func() bool {
		l, _ = b.Ledger()
		return l.InFlight+l.Queued == 0
	})
	if !l.AddsUp || l.Dropped["expired"] != 8 || l.Accepted != 15 || l.Delivered != 7 {
		t.Errorf("ledger %+v: want accepted 15 = delivered 7 + expired 8", l)
	}
}
