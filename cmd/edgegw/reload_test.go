package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgegw/edgegw/internal/testutil"
)

// TestReloadACL: a changed ACL file takes effect on SIGHUP while connected
// clients stay connected.
func TestReloadACL(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildEdgegw(t)
	addr := freePort(t)
	dir := t.TempDir()
	acl := filepath.Join(dir, "acl")
	os.WriteFile(acl, []byte("topic read #\ntopic write a/#\n"), 0o600)
	cfg := filepath.Join(dir, "edgegw.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`
listeners:
  - {name: lan, type: tcp, address: "%s"}
metrics: {address: ""}
auth: {allow_anonymous: true, acl_file: "%s"}
`, addr, acl)), 0o600)
	g := startEdgegw(t, bin, "--config", cfg)
	waitListening(t, addr)

	var lost sync.Map
	connect := func(id string) mqtt.Client {
		o := mqtt.NewClientOptions().AddBroker("tcp://" + addr).SetClientID(id).SetAutoReconnect(false).
			SetConnectionLostHandler(func(mqtt.Client, error) { lost.Store(id, true) })
		c := mqtt.NewClient(o)
		if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("connect %s: %v", id, tok.Error())
		}
		t.Cleanup(func() { c.Disconnect(50) })
		return c
	}
	var mu sync.Mutex
	var got []string
	sub := connect("sub")
	if tok := sub.Subscribe("#", 1, func(_ mqtt.Client, m mqtt.Message) {
		mu.Lock()
		got = append(got, m.Topic())
		mu.Unlock()
	}); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	has := func(topic string) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, g := range got {
			if g == topic {
				return true
			}
		}
		return false
	}
	pub := connect("pub")
	publish := func(topic string) {
		if tok := pub.Publish(topic, 1, false, "x"); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("publish %s: %v", topic, tok.Error())
		}
	}

	publish("b/denied")
	publish("a/allowed") // arrives after b/denied would have
	testutil.Eventually(t, 10*time.Second, "a/allowed", func() bool { return has("a/allowed") })
	if has("b/denied") {
		t.Fatal("b/denied delivered although the ACL forbids writing b/#")
	}

	os.WriteFile(acl, []byte("topic read #\ntopic write a/#\ntopic write b/#\n"), 0o600)
	g.cmd.Process.Signal(syscall.SIGHUP)
	testutil.Eventually(t, 10*time.Second, "reload", func() bool { return strings.Contains(g.logs(), "msg=reloaded") })
	publish("b/now-allowed")
	testutil.Eventually(t, 10*time.Second, "b/now-allowed", func() bool { return has("b/now-allowed") })
	lost.Range(func(k, _ any) bool {
		t.Errorf("client %v lost its connection across the reload", k)
		return true
	})
}
