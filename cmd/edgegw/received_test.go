package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgegw/edgegw/internal/testutil"
)

// TestBinaryReceivedCountsClientsOnly: edgegw_messages_received_total and
// the page's "received" count the messages clients sent, not the bridge's
// own reports: 2,000 sent while a bridge connects, loses its cloud and
// comes back (each a $SYS/bridge/<name>/state publish), and a $SYS reader
// gets the bridges' counters, give 2,000 received.
func TestBinaryReceivedCountsClientsOnly(t *testing.T) {
	const n = 2000
	cl := startCloud(t, false)
	g := newHarness(t)
	g.Bridge("cloud", cl.Addr).FastReconnect().Out("sensors/#", 1)
	g.Start()
	g.WaitLog(`msg="uplink connected"`)
	sys := g.Client("sys-reader", false)
	mustToken(t, "subscribe $SYS", sys.Subscribe("$SYS/#", 0, func(mqtt.Client, mqtt.Message) {}))

	pub := g.Client("pub", false)
	toks := make([]mqtt.Token, 0, n)
	for i := range n {
		toks = append(toks, pub.Publish(fmt.Sprintf("sensors/%d", i%50), 1, false, "x"))
		if i == n/2 {
			cl.Kill() // the bridge reports disconnected...
			g.WaitLog(`msg="uplink disconnected"`)
			cl.Start() // ... and connected again
		}
	}
	for i, tok := range toks {
		mustToken(t, fmt.Sprint("publish ", i), tok)
	}
	testutil.Eventually(t, 20*time.Second, "reconnected", func() bool {
		return strings.Count(g.Logs(), `msg="uplink connected"`) >= 2
	})
	if got := g.Metric("edgegw_messages_received_total"); got != n {
		t.Errorf("edgegw_messages_received_total = %v after %d sent", got, n)
	}
	var st struct {
		Broker struct {
			MessagesReceived int64 `json:"messages_received"`
		} `json:"broker"`
	}
	if err := g.Status(&st); err != nil || st.Broker.MessagesReceived != n {
		t.Errorf("status.json broker.messages_received = %d (%v) after %d sent", st.Broker.MessagesReceived, err, n)
	}
}
