package packaging_test

import (
	"os"
	"path/filepath"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/edgegw/edgegw/internal/config"
)

// shippedConfig returns the repository path of the file nfpm.yaml installs
// as /etc/edgegw/edgegw.yaml.
func shippedConfig(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile("nfpm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var pkg struct {
		Contents []struct{ Src, Dst, Type string } `yaml:"contents"`
	}
	if err := yaml.Unmarshal(raw, &pkg); err != nil {
		t.Fatalf("nfpm.yaml: %v", err)
	}
	for _, c := range pkg.Contents {
		if c.Dst == "/etc/edgegw/edgegw.yaml" {
			if c.Type != "config" {
				t.Errorf("/etc/edgegw/edgegw.yaml is type %q, want config (a conffile)", c.Type)
			}
			return filepath.Join("..", c.Src)
		}
	}
	t.Fatal("nfpm.yaml installs no /etc/edgegw/edgegw.yaml")
	return ""
}

// TestShippedConfigSafe: the .deb starts the unit with the shipped config
// right after `apt install`, before anyone has read it, so that config
// must not put an anonymous broker on the network (issue 13, point 8):
// every tcp/websocket listener is on loopback or requires credentials.
func TestShippedConfigSafe(t *testing.T) {
	path := shippedConfig(t)
	// The unit's environment: only the state directory is set.
	cfg, err := config.Load(path, []string{"EDGEGW_PERSISTENCE_DIR=/var/lib/edgegw"})
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(cfg.Listeners) == 0 {
		t.Fatal("no listeners")
	}
	for _, l := range cfg.Listeners {
		if l.Type == config.ListenerSerial {
			continue
		}
		loop := config.LoopbackAddress(l.Address)
		authed := !cfg.Auth.AllowAnonymous || l.TLS.ClientCA != ""
		if !loop && !authed {
			t.Errorf("%s: listener %s on %s accepts anonymous clients from the network", path, l.Name, l.Address)
		}
	}
	if open := cfg.AnonymousNetworkListeners(); len(open) != 0 {
		t.Errorf("%s: AnonymousNetworkListeners = %v", path, open)
	}
	if cfg.Metrics.Address != "" && !config.LoopbackAddress(cfg.Metrics.Address) {
		t.Errorf("%s: metrics.address %s is reachable from the network", path, cfg.Metrics.Address)
	}
	for _, l := range cfg.Listeners {
		if l.Type == config.ListenerWebSocket && len(l.AllowedOrigins) != 0 {
			t.Errorf("%s: listener %s allows origins %v; the shipped config keeps same-origin", path, l.Name, l.AllowedOrigins)
		}
	}
}
