package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgegw/edgegw/internal/testutil"
)

// TestBinaryReloadKeepsWhatNeedsARestart holds docs/install.md's "Everything
// else needs a restart, and the reload names [it] at WARN (`reload: these
// changes need a restart changed=...`), keeping the running value:
// listeners, `limits`, `sessions`, `auth.allow_anonymous` and the auth file
// paths, `metrics`, `persistence`": after a SIGHUP with all of those
// changed, the line names each group, the old listener and metrics address
// still serve, the new ones are not bound, and the clients stay connected.
func TestBinaryReloadKeepsWhatNeedsARestart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildEdgegw(t)
	addr, maddr, addr2, maddr2 := freePort(t), freePort(t), freePort(t), freePort(t)
	dir := t.TempDir()
	acl := filepath.Join(dir, "acl")
	if err := os.WriteFile(acl, []byte("topic readwrite #\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "edgegw.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`
listeners: [{name: lan, address: %q}]
metrics: {address: %q}
limits: {max_inflight: 32}
sessions: {max_expiry: 24h}
`, addr, maddr)), 0o600); err != nil {
		t.Fatal(err)
	}
	g := startEdgegw(t, bin, "--config", cfg)
	testutil.Eventually(t, 10*time.Second, "metrics served", func() bool { return metricValue(t, maddr, "edgegw_connections") == 0 })
	sub := mqttClient(t, addr, "stays", false)
	defer sub.Disconnect(100)

	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`
listeners: [{name: lan, address: %q}]
metrics: {address: %q}
limits: {max_inflight: 8}
sessions: {max_expiry: 1h}
auth: {acl_file: %q}
persistence: {dir: %q}
`, addr2, maddr2, acl, filepath.Join(dir, "state"))), 0o600); err != nil {
		t.Fatal(err)
	}
	g.cmd.Process.Signal(syscall.SIGHUP)
	testutil.Eventually(t, 10*time.Second, "reload done", func() bool { return strings.Contains(g.logs(), "msg=reloaded") })
	want := `level=WARN msg="reload: these changes need a restart" changed="auth file paths, listeners, limits/sessions/allow_anonymous, metrics/persistence"`
	if !strings.Contains(g.logs(), want) {
		t.Errorf("log lacks\n%s", want)
	}

	// The running values stay.
	if !sub.IsConnected() {
		t.Error("the reload dropped a client")
	}
	if c, err := net.Dial("tcp", addr); err != nil {
		t.Errorf("the old listener stopped accepting: %v", err)
	} else {
		c.Close()
	}
	if metricValue(t, maddr, "edgegw_connections") < 1 {
		t.Error("the old metrics address stopped serving")
	}
	for _, a := range []string{addr2, maddr2} {
		if c, err := net.Dial("tcp", a); err == nil {
			c.Close()
			t.Errorf("%s is bound after a reload: the change needed a restart", a)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "state")); !os.IsNotExist(err) {
		t.Errorf("the reload started using the new persistence.dir: %v", err)
	}
}
