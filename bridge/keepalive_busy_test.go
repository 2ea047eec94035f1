package bridge_test

import (
	"strings"
	"testing"
	"time"

	"github.com/edgegw/edgegw/bridge"
	"github.com/edgegw/edgegw/internal/testutil"
)

// TestBusyUplinkNeedsNoPing: while publishes and their PUBACKs flow,
// the connection is in use and the keepalive has nothing to prove (3.1.1
// §3.1.2.10: any control packet counts). A PINGREQ sent then waits
// behind the window's bytes on a slow link and its PINGRESP behind their
// PUBACKs, longer than the ping timeout (write_timeout) on a link that
// answers an idle ping at once: the bridge would drop a healthy uplink in
// the middle of every long drain.
func TestBusyUplinkNeedsNoPing(t *testing.T) {
	const n = 240 // 1 KiB each: about 4 s at 64 KiB/s, four keepalive periods
	up := startMosquitto(t)
	gw := startGateway(t)
	px := startProxy(t, up.addr())
	px.setLink(0, 64<<10) // a window of 64 publishes is 1 s of link: twice the ping timeout
	cfg := testConfig(t, "b1", px.url())
	cfg.KeepAlive = time.Second
	cfg.WriteTimeout = 500 * time.Millisecond // the ping timeout too
	cfg.AckTimeout = 5 * time.Second
	cfg.MaxInflight = 64
	upSub := subscribe(t, up.addr(), "up-sub", "site-a/#", 1)
	b := runBridge(t, cfg, gw.srv)
	b.waitState(t, bridge.Connected)
	conns := b.Stats().Connects
	lc := client(t, gw.addr, "local-pub")
	publishBacklog(t, lc, "sensors/t", 1, strings.Repeat("r", 1000)+"-", n)
	testutil.Eventually(t, 30*time.Second, "everything upstream", func() bool {
		return countDistinct(upSub.all(), "site-a/sensors/t") == n
	})
	if st := b.Stats(); st.Connects != conns || st.Disconnects != 0 {
		t.Errorf("the busy uplink was dropped: %d connects (want %d), %d disconnects, last error %q", st.Connects, conns, st.Disconnects, st.LastError)
	}
}
