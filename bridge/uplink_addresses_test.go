package bridge_test

import (
	"fmt"
	"testing"
	"time"

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
func TestFailoverReturnsToFirstAddress(t *testing.T) {
	// A third broker, up all along, tells "start again with the first"
	// from "go on with the next" (which would pick it after the backup).
	primary, backup, third := startMosquitto(t), startMosquitto(t), startMosquitto(t)
	primary.Kill()
	gw := startGateway(t)
	b := runBridge(t, testConfig(t, "fo", primary.url(), backup.url(), third.url()), gw.srv)
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
