package bridge_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/edgegw/edgegw/bridge"
	"github.com/edgegw/edgegw/internal/testutil"
)

// TestResubscribeAvoidsOpenPublishIDs is the case that broke
// [MQTT-2.3.1-2](3.1.1) before the bridge rewrote request ids
// (requestid.go): ten messages acknowledged, ten more left unanswered,
// then the connection drops. On the next one (the session resumed) paho
// re-sends the ten under its ids 1-10 (wire ids 11-20), and the bridge's
// SUBSCRIBE for its in rule came next under paho's 11, the id of a
// publish still open (checked: the test fails so without the rewrite).
// Now every SUBSCRIBE's id is one no open publish has, and the bridge
// gets its SUBACK (it is connected only after it).
func TestResubscribeAvoidsOpenPublishIDs(t *testing.T) {
	const n = 10
	withheld := map[string]bridge.Withhold{}
	for i := n; i < 2*n; i++ {
		withheld["m"+strconv.Itoa(i)] = bridge.NoPuback
	}
	up := bridge.StartRawUpstream(t, withheld)
	gw := startGateway(t)
	cfg := testConfig(t, "b1", up.URL())
	cfg.CleanSession = false
	cfg.Topics = []bridge.Rule{
		{Pattern: "one/#", Direction: bridge.Out, QoS: 1},
		{Pattern: "cmd/#", Direction: bridge.In, QoS: 1},
	}
	b := runBridge(t, cfg, gw.srv)
	b.waitState(t, bridge.Connected)
	lc := client(t, gw.addr, "local-pub")
	for i := range 2 * n {
		publish(t, lc, "one/t", 1, "m"+strconv.Itoa(i))
		if i == n-1 {
			testutil.Eventually(t, 10*time.Second, "the first ten acked", func() bool { return b.Stats().Acked == n })
		}
	}
	testutil.Eventually(t, 10*time.Second, "all twenty sent", func() bool {
		_, _, _, distinct := up.Stats()
		return distinct == 2*n
	})

	conns := b.Stats().Connects
	up.Drop()
	testutil.Eventually(t, 10*time.Second, "the reconnect, subscribed", func() bool {
		st := b.Stats()
		return st.Connects > conns && st.State == bridge.Connected
	})
	var subs int
	for _, r := range up.Requests() {
		if r.Type != "SUBSCRIBE" {
			continue
		}
		subs++
		if r.Clash {
			t.Errorf("SUBSCRIBE on connection %d under packet id %d, the id of a publish still open", r.Conn, r.ID)
		}
	}
	if subs < 2 {
		t.Fatalf("%d SUBSCRIBE read, want one per connection", subs)
	}
}
