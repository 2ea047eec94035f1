package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgegw/edgegw/internal/testutil"
)

// TestReloadACL: a changed ACL file takes effect on SIGHUP while connected
// clients stay connected.
func TestReloadACL(t *testing.T) {
	acl := filepath.Join(t.TempDir(), "acl")
	os.WriteFile(acl, []byte("topic read #\ntopic write a/#\n"), 0o600)
	g := newHarness(t).NoMetrics()
	g.Auth(true, "", acl)
	g.Start()

	var lost sync.Map
	connect := func(id string) mqtt.Client {
		o := mqtt.NewClientOptions().AddBroker("tcp://" + g.Addr).SetClientID(id).SetAutoReconnect(false).
			SetConnectionLostHandler(func(mqtt.Client, error) { lost.Store(id, true) })
		c := mqtt.NewClient(o)
		if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("connect %s: %v", id, tok.Error())
		}
		t.Cleanup(func() { c.Disconnect(50) })
		return c
	}
	var got seen
	mustToken(t, "subscribe", connect("sub").Subscribe("#", 1, got.handler))
	pub := connect("pub")
	publish := func(topic string) { mustToken(t, "publish "+topic, pub.Publish(topic, 1, false, "x")) }

	publish("b/denied")
	publish("a/allowed") // arrives after b/denied would have
	testutil.Eventually(t, 10*time.Second, "a/allowed", func() bool { return got.has("a/allowed") })
	if got.has("b/denied") {
		t.Fatal("b/denied delivered although the ACL forbids writing b/#")
	}

	os.WriteFile(acl, []byte("topic read #\ntopic write a/#\ntopic write b/#\n"), 0o600)
	g.Reload()
	publish("b/now-allowed")
	testutil.Eventually(t, 10*time.Second, "b/now-allowed", func() bool { return got.has("b/now-allowed") })
	lost.Range(func(k, _ any) bool {
		t.Errorf("client %v lost its connection across the reload", k)
		return true
	})
}

// TestBinaryReloadKeepsWhatNeedsARestart holds docs/install.md's "Everything
// else needs a restart, and the reload names [it] at WARN (`reload: these
// changes need a restart changed=...`), keeping the running value:
// listeners, `limits`, `sessions`, `auth.allow_anonymous` and the auth file
// paths, `metrics`, `persistence`": after a SIGHUP with all of those
// changed, the line names each group, the old listener and metrics address
// still serve, the new ones are not bound, and the clients stay connected.
func TestBinaryReloadKeepsWhatNeedsARestart(t *testing.T) {
	dir := t.TempDir()
	acl := filepath.Join(dir, "acl")
	if err := os.WriteFile(acl, []byte("topic readwrite #\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	g := newHarness(t)
	g.Cfg.Limits = map[string]any{"max_inflight": 32}
	g.Cfg.Sessions = map[string]any{"max_expiry": "24h"}
	g.Start()
	sub := g.Client("stays", false)

	addr2, maddr2 := freePort(t), freePort(t)
	g.Cfg.Listeners[0].Address = addr2
	g.Cfg.Metrics.Address = maddr2
	g.Cfg.Limits["max_inflight"] = 8
	g.Cfg.Sessions["max_expiry"] = "1h"
	g.Cfg.Auth = &authConf{ACLFile: acl}
	g.Cfg.Persistence = &persistenceConf{Dir: filepath.Join(dir, "state")}
	g.Reload()
	want := `level=WARN msg="reload: these changes need a restart" changed="auth file paths, listeners, limits/sessions/allow_anonymous, metrics/persistence"`
	if !strings.Contains(g.Logs(), want) {
		t.Errorf("log lacks\n%s", want)
	}

	// The running values stay.
	if !sub.IsConnected() {
		t.Error("the reload dropped a client")
	}
	if c, err := net.Dial("tcp", g.Addr); err != nil {
		t.Errorf("the old listener stopped accepting: %v", err)
	} else {
		c.Close()
	}
	if g.Metric("edgegw_connections") < 1 {
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
