package bridge_test

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgegw/edgegw/bridge"
	"github.com/edgegw/edgegw/internal/testutil"
)

// pahoClient connects a paho MQTT 3.1.1 client with the given keepalive and
// ping timeout; lost records why the connection was lost, if it was.
func pahoClient(t *testing.T, addr, id string, keepalive, pingTimeout time.Duration, lost *atomic.Value) mqtt.Client {
	t.Helper()
	o := mqtt.NewClientOptions().AddBroker("tcp://" + addr).SetClientID(id).
		SetAutoReconnect(false).SetProtocolVersion(4).SetConnectTimeout(5 * time.Second).
		SetKeepAlive(keepalive).SetPingTimeout(pingTimeout).
		SetConnectionLostHandler(func(_ mqtt.Client, err error) { lost.Store(err.Error()) })
	c := mqtt.NewClient(o)
	tok := c.Connect()
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect %s to %s: %v", id, addr, tok.Error())
	}
	t.Cleanup(func() { c.Disconnect(50) })
	return c
}

// asyncRig is a bridge with spool sync_interval interval between
// mosquitto and the gateway, a subscriber upstream, and a paho client of
// the gateway with keepalive and ping timeout; lost records why its
// connection was lost, if it was.
type asyncRig struct {
	b     *running
	upSub *collector
	c     mqtt.Client
	lost  atomic.Value
}

func startAsyncRig(t *testing.T, name string, interval, keepalive, pingTimeout time.Duration) *asyncRig {
	t.Helper()
	up := startMosquitto(t)
	gw := startGateway(t)
	cfg := testConfig(t, name, up.url())
	cfg.SpoolSyncInterval = interval
	r := &asyncRig{upSub: subscribe(t, up.addr(), "up-sub", "site-a/sensors/#", 1)}
	r.b = runBridge(t, cfg, gw.srv)
	r.b.waitState(t, bridge.Connected)
	r.c = pahoClient(t, gw.addr, name, keepalive, pingTimeout, &r.lost)
	return r
}

// publishQoS1 pipelines n QoS 1 messages m0, m1, ... to topic and waits
// for every PUBACK; it returns how long they took.
func (r *asyncRig) publishQoS1(t *testing.T, topic string, n int) time.Duration {
	t.Helper()
	start := time.Now()
	toks := make([]mqtt.Token, n)
	for i := range n {
		toks[i] = r.c.Publish(topic, 1, false, "m"+strconv.Itoa(i))
	}
	for i, tok := range toks {
		if !tok.WaitTimeout(time.Minute) || tok.Error() != nil {
			t.Fatalf("publish %d: %v (connection lost: %v)", i, tok.Error(), r.lost.Load())
		}
	}
	return time.Since(start)
}

// upstreamInOrder waits for the n messages of topic upstream, in order
// (duplicates allowed), and checks that no message failed to be accepted.
func (r *asyncRig) upstreamInOrder(t *testing.T, topic string, n int) (dups int) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, "all messages upstream", func() bool {
		return countDistinct(r.upSub.all(), topic) == n
	})
	dups = inOrder(t, r.upSub.all(), topic, "m", n)
	if st := r.b.Stats(); st.AcceptFailed != 0 {
		t.Fatalf("stats %+v", st)
	}
	return dups
}

// One local publisher pipelining QoS 1 messages is not held to one message
// per commit window: with the bridge's sink asynchronous, 2000 PUBACKs come
// back in a few group commits, and all 2000 reach the cloud in order.
func TestPipelinedPublisherThroughput(t *testing.T) {
	const n = 2000
	const interval = 20 * time.Millisecond // the default sync_interval
	r := startAsyncRig(t, "fast", interval, 30*time.Second, 10*time.Second)
	elapsed := r.publishQoS1(t, "sensors/burst", n)
	windows := float64(elapsed) / float64(interval)
	t.Logf("%d PUBACKs in %s = %.1f commit windows of %s", n, elapsed, windows, interval)
	if limit := float64(n) / 10; windows > limit {
		t.Fatalf("%d PUBACKs took %.0f commit windows, want < %.0f (one message per window is %d)", n, windows, limit, n)
	}
	dups := r.upstreamInOrder(t, "site-a/sensors/burst", n)
	t.Logf("upstream: %d in order, %d duplicates", n, dups)
}

// While a publisher's messages wait for a (long) group commit, its
// connection keeps working: paho, keepalive 1s and ping timeout 1s, sends a
// PINGREQ once nothing was received for a second, and the PINGRESP must
// not wait behind the pending publishes, or paho drops the connection with
// "pingresp not received".
func TestPingAnsweredWhilePublishesPending(t *testing.T) {
	const n = 200
	const interval = 3 * time.Second // far longer than keepalive + ping timeout
	const keepalive, pingTimeout = time.Second, time.Second
	r := startAsyncRig(t, "slowdisk", interval, keepalive, pingTimeout)
	elapsed := r.publishQoS1(t, "sensors/burst", n)
	if v := r.lost.Load(); v != nil {
		t.Fatalf("connection lost while publishes were pending: %v", v)
	}
	// paho pings once nothing was received for keepalive (checked every
	// keepalive/4) and gives up pingTimeout later: publishes pending longer
	// than that prove a PINGRESP came back meanwhile.
	if min := keepalive + keepalive/4 + pingTimeout; elapsed < min {
		t.Fatalf("PUBACKs after %s: the test needs them pending for at least %s", elapsed, min)
	}
	if !r.c.IsConnectionOpen() {
		t.Fatal("client disconnected")
	}
	t.Logf("%d PUBACKs after %s (one group commit of %s); connection kept", n, elapsed, interval)
	r.upstreamInOrder(t, "site-a/sensors/burst", n)
}

// A local QoS 0 publisher on a bridged topic is not held to one message per
// commit window either: nobody waits for an acknowledgement of QoS 0, so
// the gateway's reader must not wait for the spool's fsync. 2000 QoS 0
// messages and a QoS 1 fence (acked only after the gateway processed
// everything before it on the connection) take a few commit windows, and
// all 2000 reach the cloud in order.
func TestQoS0PublisherNotHeldToCommitWindow(t *testing.T) {
	const n = 2000
	const interval = 20 * time.Millisecond // the default sync_interval
	r := startAsyncRig(t, "fast0", interval, 30*time.Second, 10*time.Second)
	start := time.Now()
	for i := range n {
		r.c.Publish("sensors/q0", 0, false, "m"+strconv.Itoa(i))
	}
	fence := r.c.Publish("sensors/q0", 1, false, "m"+strconv.Itoa(n))
	if !fence.WaitTimeout(time.Minute) || fence.Error() != nil {
		t.Fatalf("fence: %v (lost: %v)", fence.Error(), r.lost.Load())
	}
	elapsed := time.Since(start)
	windows := float64(elapsed) / float64(interval)
	t.Logf("%d QoS 0 messages + fence processed in %s = %.1f commit windows of %s", n, elapsed, windows, interval)
	if limit := float64(n) / 10; windows > limit {
		t.Errorf("%d QoS 0 messages took %.0f commit windows, want < %.0f (one message per window is %d)", n, windows, limit, n)
	}
	r.upstreamInOrder(t, "site-a/sensors/q0", n+1)
}
