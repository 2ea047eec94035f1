package bridge

import (
	"strings"
	"testing"
	"time"
)

func TestRuleMapping(t *testing.T) {
	cfg := Config{Name: "b", Addresses: []string{"tcp://h"}, CleanSession: true, Topics: []Rule{
		{Pattern: "sensors/#", Direction: Out, QoS: 1, RemotePrefix: "site-a/"},
		{Pattern: "cmd/#", Direction: In, QoS: 2, LocalPrefix: "local/", RemotePrefix: "site-a/"},
		{Pattern: "x/+/y", Direction: Both, QoS: 0, LocalPrefix: "l/", RemotePrefix: "r/"},
		{Pattern: "#", Direction: Out, QoS: 2, LocalPrefix: "all/"},
	}}
	cfg.setDefaults()
	c, err := cfg.compile()
	if err != nil {
		t.Fatal(err)
	}
	out := []struct {
		local  string
		qos    byte
		remote string
		rqos   byte
		ok     bool
	}{
		{"sensors/t1", 2, "site-a/sensors/t1", 1, true},
		{"sensors", 1, "site-a/sensors", 1, true}, // '#' matches the parent level
		{"l/x/1/y", 1, "r/x/1/y", 0, true},
		{"all/a/b", 2, "a/b", 2, true},
		{"cmd/x", 1, "", 0, false}, // in only
		{"x/1/y", 1, "", 0, false}, // lacks the local prefix
	}
	for _, tc := range out {
		r, q, ok := c.outTopic(tc.local, tc.qos)
		if r != tc.remote || q != tc.rqos || ok != tc.ok {
			t.Errorf("out %q: got %q q%d %v, want %q q%d %v", tc.local, r, q, ok, tc.remote, tc.rqos, tc.ok)
		}
	}
	in := []struct{ remote, local string }{
		{"site-a/cmd/reboot", "local/cmd/reboot"},
		{"r/x/2/y", "l/x/2/y"},
		{"site-a/sensors/t1", ""}, // out only
	}
	for _, tc := range in {
		l, ok := c.inTopic(tc.remote)
		if l != tc.local || ok != (tc.local != "") {
			t.Errorf("in %q: got %q %v, want %q", tc.remote, l, ok, tc.local)
		}
	}
	subs := c.subscriptions()
	if len(subs) != 2 || subs["site-a/cmd/#"] != 2 || subs["r/x/+/y"] != 0 {
		t.Errorf("subscriptions %v", subs)
	}
}

// validate is what New does with a Config before it starts: defaults, then
// compile, which reports every problem together, each naming its key.
func validate(c Config) error {
	c.setDefaults()
	_, err := c.compile()
	return err
}

func TestValidate(t *testing.T) {
	good := Config{Name: "b", Addresses: []string{"tls://h", "ws://h:8080/mqtt"}, ClientID: "c",
		Topics: []Rule{{Pattern: "a/#", Direction: Out, QoS: 1}}}
	if err := validate(good); err != nil {
		t.Fatalf("good config: %v", err)
	}
	cases := []struct {
		name string
		edit func(*Config)
		keys []string
	}{
		{"bad url", func(c *Config) { c.Addresses = []string{"http://h", "tcp://"} }, []string{"addresses[0]", "addresses[1]"}},
		{"no addresses", func(c *Config) { c.Addresses = nil }, []string{"addresses"}},
		{"direction", func(c *Config) { c.Topics[0].Direction = "sideways" }, []string{"topics[0].direction"}},
		{"qos 3", func(c *Config) { c.Topics[0].QoS = 3 }, []string{"topics[0].qos"}},
		{"bad pattern", func(c *Config) { c.Topics[0].Pattern = "a/#/b" }, []string{"topics[0].pattern"}},
		{"wildcard prefix", func(c *Config) { c.Topics[0].LocalPrefix = "+/" }, []string{"topics[0].local_prefix"}},
		{"persistent without id", func(c *Config) { c.ClientID = "" }, []string{"client_id"}},
		{"name", func(c *Config) { c.Name = "a/b" }, []string{"name"}},
		{"inflight", func(c *Config) { c.MaxInflight = -1 }, []string{"max_inflight"}},
		{"inflight qos2", func(c *Config) { c.MaxInflightQoS2 = 70000 }, []string{"max_inflight_qos2"}},
		{"max packet size", func(c *Config) { c.MaxPacketSize = 10 }, []string{"max_packet_size"}},
		{"max packet size above MQTT's", func(c *Config) { c.MaxPacketSize = MaxPacketSizeMQTT + 1 }, []string{"max_packet_size"}},
		{"backoff", func(c *Config) { c.ReconnectMin, c.ReconnectMax = time.Minute, time.Second }, []string{"reconnect_max"}},
		{"sync", func(c *Config) { c.SpoolSync = "sometimes" }, []string{"spool.sync"}},
		{"tls files", func(c *Config) { c.TLS.CA = "/nonexistent/ca.pem" }, []string{"tls"}},
		{"several at once", func(c *Config) { c.Topics[0].QoS = 3; c.ClientID = "" }, []string{"topics[0].qos", "client_id"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			c.Topics = append([]Rule(nil), good.Topics...)
			tc.edit(&c)
			err := validate(c)
			if err == nil {
				t.Fatal("no error")
			}
			for _, k := range tc.keys {
				if !strings.Contains(err.Error(), k+":") {
					t.Errorf("error %q does not name %s", err, k)
				}
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	bo := backoff{min: 100 * time.Millisecond, max: time.Second}
	for i := range 20 {
		d := bo.next()
		if d < bo.min || d > bo.max {
			t.Fatalf("step %d: %s outside [%s, %s]", i, d, bo.min, bo.max)
		}
	}
	if bo.cur != bo.max {
		t.Errorf("cur %s, want capped at %s", bo.cur, bo.max)
	}
	bo.reset()
	if d := bo.next(); d > bo.min {
		t.Errorf("after reset: %s", d)
	}
}
