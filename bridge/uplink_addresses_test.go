package bridge_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/edgegw/edgegw/bridge"
	"github.com/edgegw/edgegw/internal/testutil"
)

// TestWebSocketUplink holds docs/bridge.md's and docs/config.md's
// `ws://host:port/mqtt` bridge addresses: a bridge to mosquitto's
// websockets listener sends its out messages upstream in order and
// receives its in rule's messages.
func TestWebSocketUplink(t *testing.T) {
	wsPort := freePort(t)
	up := startMosquittoConf(t, fmt.Sprintf("listener %d 127.0.0.1\nprotocol websockets\n", wsPort), wsPort)
	gw := startGateway(t)
	url := fmt.Sprintf("ws://127.0.0.1:%d/mqtt", wsPort)
	b := runBridge(t, testConfig(t, "ws", url), gw.srv)
	testutil.Eventually(t, 10*time.Second, "bridge connected over ws://", func() bool {
		st := b.Stats()
		return st.Connects > 0 && st.Address == url
	})

	upSub := subscribe(t, up.addr(), "up-sub", "site-a/#", 1)
	localSub := subscribe(t, gw.addr, "local-sub", "cmd/#", 1)
	publishMany(t, client(t, gw.addr, "local-pub"), "sensors/t1", 20, "m")
	testutil.Eventually(t, 20*time.Second, "all upstream", func() bool { return countDistinct(upSub.all(), "site-a/sensors/t1") == 20 })
	inOrder(t, upSub.all(), "site-a/sensors/t1", "m", 20)

	cloud := client(t, up.addr(), "cloud-pub")
	testutil.Eventually(t, 10*time.Second, "a command comes down over ws://", func() bool {
		publish(t, cloud, "site-a/cmd/valve", 1, "open")
		return localSub.has("cmd/valve", "open")
	})
}

// TestFailoverReturnsToFirstAddress holds docs/bridge.md's "Addresses are
// tried in order; the first that connects is used. When the connection is
// lost the next round starts again with the first address, so a bridge
// returns to the preferred broker."
// TestFailoverReturnsToFirstAddress: with address_order strict, a lost
// connection starts the next round with the first address.
func TestFailoverReturnsToFirstAddress(t *testing.T) {
	// A third broker, up all along, tells "start again with the first"
	// from "go on with the next" (which would pick it after the backup).
	primary, backup, third := startMosquitto(t), startMosquitto(t), startMosquitto(t)
	primary.Kill()
	gw := startGateway(t)
	cfg := testConfig(t, "fo", primary.url(), backup.url(), third.url())
	cfg.AddressOrder = bridge.AddressOrderStrict
	b := runBridge(t, cfg, gw.srv)
	testutil.Eventually(t, 10*time.Second, "connected to the backup while the primary is down", func() bool {
		st := b.Stats()
		return st.Connects == 1 && st.Address == backup.url()
	})

	primary.Start()
	backup.Kill() // the connection is lost: the next round starts with the primary
	testutil.Eventually(t, 20*time.Second, "back on the primary", func() bool {
		st := b.Stats()
		return st.Connects == 2 && st.Address == primary.url()
	})
	upSub := subscribe(t, primary.addr(), "up-sub", "site-a/#", 1)
	publishMany(t, client(t, gw.addr, "local-pub"), "sensors/t1", 5, "m")
	testutil.Eventually(t, 20*time.Second, "messages at the primary", func() bool { return countDistinct(upSub.all(), "site-a/sensors/t1") == 5 })
}

// TestSpreadOverNodes: with the default address_order spread, bridges with
// one address list and their own client ids each connect to the first
// address of their own order (Addresses), so they spread over the nodes.
// One whose node dies moves to its next address and stays there when the
// node comes back; when that connection ends, it starts again from its
// first address.
func TestSpreadOverNodes(t *testing.T) {
	nodes := []*mosquitto{startMosquitto(t), startMosquitto(t), startMosquitto(t)}
	byURL := map[string]*mosquitto{}
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.url())
		byURL[n.url()] = n
	}
	gw := startGateway(t)
	var bs []*running
	used := map[string]int{}
	for i := range 6 {
		b := runBridge(t, testConfig(t, fmt.Sprintf("gw%d", i), addrs...), gw.srv)
		bs = append(bs, b)
		b.waitState(t, bridge.Connected)
		if st := b.Stats(); st.Address != b.Addresses()[0] {
			t.Errorf("gw%d connected to %s, want the first of its order %v", i, st.Address, b.Addresses())
		}
		used[b.Stats().Address]++
	}
	if len(used) < 2 {
		t.Errorf("6 bridges on %d node(s): %v", len(used), used)
	}
	t.Logf("spread: %v", used)

	b := bs[0]
	order := b.Addresses()
	first, second := byURL[order[0]], byURL[order[1]]
	first.Kill()
	testutil.Eventually(t, 15*time.Second, "moved to its second address", func() bool {
		st := b.Stats()
		return st.State == bridge.Connected && st.Address == order[1]
	})
	first.Start()
	connects := b.Stats().Connects
	// The node is back; the bridge stays where it is while that
	// connection lasts (it has no reason to drop a working connection).
	c := client(t, gw.addr, "local-pub")
	up := subscribe(t, second.addr(), "up-sub", "site-a/#", 1)
	publishMany(t, c, "sensors/t1", 5, "m")
	testutil.Eventually(t, 10*time.Second, "messages through the second node", func() bool {
		return countDistinct(up.all(), "site-a/sensors/t1") == 5
	})
	if st := b.Stats(); st.Address != order[1] || st.Connects != connects {
		t.Errorf("after the first node came back: on %s after %d connects, want still %s after %d", st.Address, st.Connects, order[1], connects)
	}
	second.Kill()
	testutil.Eventually(t, 15*time.Second, "back on its first address", func() bool {
		st := b.Stats()
		return st.State == bridge.Connected && st.Address == order[0]
	})
}
