package bridge_test

import (
	"slices"
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

// TestUnansweredSubscribeDoesNotStopTheSender: a broker that never answers
// a SUBSCRIBE (against [MQTT-3.8.4-1]) keeps its packet id held on a live
// connection. A QoS 2 record whose own id it is waits for it, and with it
// the whole sender; the wait is bounded by ack_timeout, then the uplink is
// torn down, the next connection frees the id, and nothing is lost.
func TestUnansweredSubscribeDoesNotStopTheSender(t *testing.T) {
	up := bridge.StartRawUpstream(t, nil)
	gw := startGateway(t)
	cfg := testConfig(t, "b1", up.URL())
	cfg.AckTimeout = time.Second
	cfg.Topics = []bridge.Rule{
		{Pattern: "two/#", Direction: bridge.Out, QoS: 2},
		{Pattern: "cmd/#", Direction: bridge.In, QoS: 1},
	}
	b := runBridge(t, cfg, gw.srv)
	b.waitState(t, bridge.Connected)
	conns := b.Stats().Connects

	// The reload's SUBSCRIBE takes wire id 2 (the connect's took 1) and
	// is never answered; record 2's QoS 2 publish needs id 2.
	up.IgnoreSubscribeOnce("late/#")
	more := cfg
	more.Topics = append(slices.Clone(cfg.Topics), bridge.Rule{Pattern: "late/#", Direction: bridge.In, QoS: 1})
	if _, err := b.Reload(more); err != nil {
		t.Fatal(err)
	}
	var held uint16
	for _, r := range up.Requests() {
		held = r.ID
	}
	lc := client(t, gw.addr, "local-pub")
	const n = 3
	for i := 1; i <= n; i++ {
		publish(t, lc, "two/t", 2, "m"+strconv.Itoa(i))
	}
	testutil.Eventually(t, 20*time.Second, "every record delivered upstream", func() bool {
		_, _, _, distinct := up.Stats()
		return distinct == n && b.Stats().Acked == n
	})
	if got := b.Stats().Connects; got <= conns {
		t.Errorf("delivered on the same connection (%d connects): the unanswered SUBSCRIBE (id %d) held no record's id, so nothing was tested", got, held)
	}
}
