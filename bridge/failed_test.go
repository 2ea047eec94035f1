package bridge_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgegw/edgegw/bridge"
)

// TestSpoolCannotOpen: a bridge whose spool directory is a file is Failed,
// not fatal. Open returns the cause, the retained state topic says
// "failed", a local QoS 1 message for it is not acknowledged (its spool
// cannot keep it), and once the path is fixed the bridge opens its spool
// by itself, connects and delivers.
func TestSpoolCannotOpen(t *testing.T) {
	up := startMosquitto(t)
	gw := startGateway(t)
	upSub := subscribe(t, up.addr(), "up-sub", "site-a/#", 1)
	cfg := testConfig(t, "b1", up.url())
	cfg.SpoolDir = filepath.Join(t.TempDir(), "spool")
	if err := os.WriteFile(cfg.SpoolDir, []byte("not a directory"), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := bridge.New(cfg, gw.srv, testLog())
	if err != nil {
		t.Fatal(err)
	}
	err = b.Open()
	if err == nil || !strings.Contains(err.Error(), "open spool") {
		t.Fatalf("Open = %v; want the spool's error", err)
	}
	if st := b.Stats(); st.State != bridge.Failed || st.LastError == "" {
		t.Fatalf("state %v (%q); want failed with the cause", st.State, st.LastError)
	}
	states := subscribe(t, gw.addr, "state-sub", "$SYS/bridge/b1/state", 1)
	eventually(t, 5*time.Second, "retained state failed", func() bool { return states.has("$SYS/bridge/b1/state", "failed") })

	// A local QoS 1 message for the failed bridge is not acknowledged: a
	// 3.1.1 publisher is disconnected without its PUBACK.
	lc := client(t, gw.addr, "local-pub")
	tok := lc.Publish("sensors/t1", 1, false, "refused")
	if tok.WaitTimeout(5*time.Second) && tok.Error() == nil {
		t.Fatal("a message the failed bridge could not keep was acknowledged")
	}
	eventually(t, 5*time.Second, "publisher disconnected", func() bool { return !lc.IsConnectionOpen() })

	r := &running{Bridge: b}
	r.start(t)
	if err := os.Remove(cfg.SpoolDir); err != nil { // the operator fixes it
		t.Fatal(err)
	}
	r.waitState(t, bridge.Connected)
	lc2 := client(t, gw.addr, "local-pub2")
	publish(t, lc2, "sensors/t1", 1, "kept")
	eventually(t, 10*time.Second, "delivered after the spool opened", func() bool { return upSub.has("site-a/sensors/t1", "kept") })
	if upSub.has("site-a/sensors/t1", "refused") {
		t.Error("the refused message went upstream")
	}
}
