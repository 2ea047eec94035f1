package bridge_test

import (
	"strings"
	"testing"
	"time"

	"github.com/edgegw/edgegw/bridge"
	"github.com/edgegw/edgegw/internal/testutil"
)

// TestOversizeBackoffWithQoS0Stream: over MQTT 3.1.1 without
// max_packet_size, a QoS 1 message larger than mosquitto's limit blocks
// the uplink while a sensor keeps publishing at QoS 0 behind it. Each new
// connection sends the oversize PUBLISH first and then the QoS 0 ones
// queued since; mosquitto closes the connection at the first and never
// reads the others, but the bridge counts them delivered when written
// (b.acked), so backoff.lost resets the backoff after every connection:
// the reconnect loop the branch set out to end (every CONNACK a reset)
// is back whenever QoS 0 traffic flows. The QoS 0 messages themselves
// are lost (docs/bridge.md).
func TestOversizeBackoffWithQoS0Stream(t *testing.T) {
	const topic = "site-a/sensors/t"
	up := startMosquittoConf(t, "max_packet_size 200\n")
	cloud := subscribe(t, up.addr(), "cloud-reader", "site-a/sensors/#", 1)
	gw := startGateway(t)
	cfg := testConfig(t, "b1", up.url())
	cfg.ReconnectMin, cfg.ReconnectMax = 20*time.Millisecond, 2*time.Second
	cfg.Topics = cfg.Topics[:1] // sensors/# out, QoS cap 1
	b, h := runTimedBridge(t, cfg, gw.srv)
	b.waitState(t, bridge.Connected)
	lc := client(t, gw.addr, "local-pub")
	publish(t, lc, "sensors/t", 1, "before")
	testutil.Eventually(t, 10*time.Second, "before upstream", func() bool { return cloud.has(topic, "before") })
	publish(t, lc, "sensors/t", 1, strings.Repeat("y", 400)) // a 423-byte PUBLISH

	// A QoS 0 stream behind it, one message every 20 ms for 3 s.
	start := time.Now()
	for i := 0; time.Since(start) < 3*time.Second; i++ {
		publish(t, lc, "sensors/t", 0, "q0")
		time.Sleep(20 * time.Millisecond) // the sensor's rate, not a wait for a state
	}
	n := len(h.find("uplink connected"))
	st := b.Stats()
	t.Logf("%d connections in 3 s of QoS 0 traffic; acked %d; upstream got a QoS 0 message: %v", n, st.Acked, cloud.has(topic, "q0"))
	// With the backoff growing from 20 ms (doubling, jitter in [cur/2, cur])
	// and reset only by the first connection, 3 s hold at most
	// 1 + 1 + 20+20+40+80+160+320+640+1000 ms -> 10 connections.
	if n > 12 {
		t.Errorf("%d connections in 3 s: the backoff was reset by connections that delivered nothing (QoS 0 writes after the oversize PUBLISH count as delivered)", n)
	}
	// docs/bridge.md: the QoS 0 messages behind it are lost, counted as
	// delivered once written ("before" is the one acknowledged).
	if st.Acked < 2 || cloud.has(topic, "q0") {
		t.Errorf("acked %d, a QoS 0 message upstream %v; want more than 1 (QoS 0 writes), false (mosquitto closed the connection before them)",
			st.Acked, cloud.has(topic, "q0"))
	}
}
