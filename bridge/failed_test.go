package bridge_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgegw/edgegw/bridge"
	"github.com/edgegw/edgegw/internal/testutil"
)

// unopenable makes cfg's spool directory a file, creates the bridge and
// returns it with the error of its Open.
func unopenable(t *testing.T, cfg *bridge.Config, gw *local) (*bridge.Bridge, error) {
	t.Helper()
	cfg.SpoolDir = filepath.Join(t.TempDir(), "spool")
	if err := os.WriteFile(cfg.SpoolDir, []byte("not a directory"), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := bridge.New(*cfg, gw.srv, testLog())
	if err != nil {
		t.Fatal(err)
	}
	return b, b.Open()
}

// TestSpoolCannotOpen: a bridge whose spool directory is a file is Failed,
// not fatal. Open returns the cause, the retained state topic says
// "failed", a local QoS 1 message for it is not acknowledged (its spool
// cannot keep it): the gateway closes the 3.1.1 publisher's connection,
// and a publisher with a persistent session re-sends the message after
// reconnecting (paho does: the refusals grow). Once the path is fixed the
// bridge opens its spool by itself, connects, and the re-sent message is
// acknowledged and delivered.
func TestSpoolCannotOpen(t *testing.T) {
	up := startMosquitto(t)
	gw := startGateway(t)
	upSub := subscribe(t, up.addr(), "up-sub", "site-a/#", 1)
	cfg := testConfig(t, "b1", up.url())
	b, err := unopenable(t, &cfg, gw)
	if err == nil || !strings.Contains(err.Error(), "open spool") {
		t.Fatalf("Open = %v; want the spool's error", err)
	}
	if st := b.Stats(); st.State != bridge.Failed || st.LastError == "" {
		t.Fatalf("state %v (%q); want failed with the cause", st.State, st.LastError)
	}
	states := subscribe(t, gw.addr, "state-sub", "$SYS/bridge/b1/state", 1)
	testutil.Eventually(t, 5*time.Second, "retained state failed", func() bool { return states.has("$SYS/bridge/b1/state", "failed") })

	// A local QoS 1 message for the failed bridge is not acknowledged: a
	// 3.1.1 publisher is disconnected without its PUBACK, reconnects and
	// sends it again.
	var lost atomic.Int64
	lc := mqtt.NewClient(mqtt.NewClientOptions().AddBroker("tcp://" + gw.addr).SetClientID("local-pub").
		SetCleanSession(false).SetAutoReconnect(true).SetMaxReconnectInterval(100 * time.Millisecond).
		SetConnectionLostHandler(func(mqtt.Client, error) { lost.Add(1) }))
	if tok := lc.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("connect: %v", tok.Error())
	}
	defer lc.Disconnect(50)
	// (paho's token is no witness here: its resume completes the token
	// with no error on the first reconnect, PUBACK or not.)
	lc.Publish("sensors/t1", 1, false, "retried")
	testutil.Eventually(t, 10*time.Second, "the message refused twice (sent again after a reconnect)", func() bool {
		return b.Stats().AcceptFailed >= 2 && lost.Load() >= 2
	})

	r := &running{Bridge: b}
	r.start(t)
	if err := os.Remove(cfg.SpoolDir); err != nil { // the operator fixes it
		t.Fatal(err)
	}
	r.waitState(t, bridge.Connected)
	testutil.Eventually(t, 10*time.Second, "delivered after the spool opened", func() bool { return upSub.has("site-a/sensors/t1", "retried") })
	t.Logf("refused %d times (%d disconnects) before the spool opened", b.Stats().AcceptFailed, lost.Load())
}

// TestFailedBridgesForwardEachOthersState: two bridges whose spools cannot
// open, each with an out rule for the bridges' $SYS state topics. A state
// change publishes the retained state locally while it holds the state's
// lock, and that message reaches the other bridge's sink, which refuses
// it with its own last error. When the sink read that error under its
// bridge's state lock, two bridges changing state at once waited for each
// other for ever.
func TestFailedBridgesForwardEachOthersState(t *testing.T) {
	gw := startGateway(t)
	var bs []*bridge.Bridge
	for _, name := range []string{"a", "b"} {
		cfg := testConfig(t, name, "tcp://127.0.0.1:1")
		cfg.Topics = []bridge.Rule{{Pattern: "$SYS/bridge/#", Direction: bridge.Out, QoS: 1, RemotePrefix: "site/"}}
		b, err := unopenable(t, &cfg, gw)
		if err == nil {
			t.Fatal("Open of an unopenable spool succeeded")
		}
		bs = append(bs, b)
	}
	const rounds = 300
	done := make(chan struct{})
	var wg sync.WaitGroup
	for _, b := range bs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				s := bridge.Failed
				if i%2 == 1 {
					s = bridge.Disconnected
				}
				b.SetStateForTest(s, errors.New("spool not a directory"))
			}
		}()
	}
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%d state changes of two bridges did not finish in 30 s: they wait for each other", 2*rounds)
	}
	if st := bs[0].Stats(); st.AcceptFailed == 0 {
		t.Fatalf("bridge a refused none of b's state messages: the test routes nothing between them")
	}
}
