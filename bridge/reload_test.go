package bridge_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/edgegw/edgegw/bridge"
)

// TestReloadClassifiesKeys: Reload applies topic rules in place, names the
// connection settings that make the bridge reconnect (a TLS file rewritten
// in place with new contents included), names the keys that need a restart
// and keeps an invalid or renamed config out. The live behaviour, with the
// real binary and mosquitto, is cmd/edgegw TestReloadBridgeRules.
func TestReloadClassifiesKeys(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, dir, "ca")
	base := bridge.Config{
		Name: "cloud", Addresses: []string{"tls://127.0.0.1:1"}, ClientID: "edge",
		TLS:    bridge.TLSConfig{CA: ca.file},
		Topics: []bridge.Rule{{Pattern: "sensors/#", Direction: bridge.Out, QoS: 1}},
	}
	b, err := bridge.New(base, nopGateway{}, testLog())
	if err != nil {
		t.Fatal(err)
	}
	reload := func(c bridge.Config) bridge.Reloaded {
		t.Helper()
		r, err := b.Reload(c)
		if err != nil {
			t.Fatalf("Reload: %v", err)
		}
		return r
	}

	if r := reload(base); r.Rules || r.Reconnect != nil || r.Restart != nil {
		t.Errorf("unchanged config: %+v", r)
	}
	c := base
	c.Topics = append(slices.Clone(base.Topics), bridge.Rule{Pattern: "cmd/#", Direction: bridge.In, QoS: 1})
	if r := reload(c); !r.Rules || r.Reconnect != nil || r.Restart != nil || !strings.HasPrefix(r.Subscriptions, "not connected") {
		t.Errorf("added in rule: %+v", r)
	}
	c.Username, c.KeepAlive = "u", 7e9
	if r := reload(c); r.Rules || !slices.Equal(r.Reconnect, []string{"username", "keepalive"}) || r.Restart != nil {
		t.Errorf("username, keepalive: %+v", r)
	}
	newTestCA(t, dir, "ca") // the same path, another CA
	if r := reload(c); !slices.Equal(r.Reconnect, []string{"tls"}) {
		t.Errorf("CA file rewritten in place: %+v", r)
	}
	c.WriteTimeout, c.MaxInflight, c.SpoolMaxBytes = 9e9, 7, 1<<20
	if r := reload(c); r.Reconnect != nil || !slices.Equal(r.Restart, []string{"spool", "write_timeout", "max_inflight"}) {
		t.Errorf("restart keys: %+v", r)
	}
	// Restart keys are compared with the running values: still named.
	if r := reload(c); !slices.Equal(r.Restart, []string{"spool", "write_timeout", "max_inflight"}) {
		t.Errorf("restart keys on a second reload: %+v", r)
	}
	// max_packet_size is read by the sender for every message: a restart.
	mp := c
	mp.MaxPacketSize = 1 << 10
	if r := reload(mp); r.Reconnect != nil || !slices.Equal(r.Restart, []string{"spool", "write_timeout", "max_inflight", "max_packet_size"}) {
		t.Errorf("max_packet_size: %+v", r)
	}

	bad := c
	bad.Topics = []bridge.Rule{{Pattern: "a/#", Direction: "sideways"}}
	if _, err := b.Reload(bad); err == nil || !strings.Contains(err.Error(), "topics[0].direction") {
		t.Errorf("invalid config: %v", err)
	}
	if r := reload(c); r.Rules { // the invalid reload changed nothing
		t.Errorf("rules changed by an invalid reload: %+v", r)
	}
	renamed := c
	renamed.Name = "other"
	if _, err := b.Reload(renamed); err == nil {
		t.Error("a renamed bridge was reloaded")
	}
}
