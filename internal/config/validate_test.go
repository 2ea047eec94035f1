package config

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"
)

// validBridge is a bridge that passes Validate.
func validBridge() Bridge {
	b := DefaultBridge()
	b.Name = "cloud"
	b.ClientID = "edge-01"
	b.Addresses = []string{"tcp://127.0.0.1:1884"}
	b.Topics = []BridgeTopic{DefaultBridgeTopic()}
	b.Topics[0].Pattern = "sensors/#"
	return b
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		modify func(c *Config)
		keys   []string // keys of the expected problems, in order; nil = valid
	}{
		{"default", func(c *Config) {}, nil},
		{"valid full", func(c *Config) {
			ws := DefaultListener(ListenerWebSocket)
			ws.Name, ws.AllowedOrigins = "web", []string{"https://dash.example.com:8443", "*"}
			ser := DefaultListener(ListenerSerial)
			ser.Name, ser.Device = "uart0", "/dev/ttyUSB0"
			tls := DefaultListener(ListenerTCP)
			tls.Name, tls.Address = "tls", "[::]:8883"
			tls.TLS = ListenerTLS{Cert: "c", Key: "k", ClientCA: "ca", UseCNAsUsername: true}
			c.Listeners = append(c.Listeners, ws, ser, tls)
			b := validBridge()
			b.Addresses = append(b.Addresses, "tls://cloud.example.com:8883", "wss://cloud.example.com:443/mqtt")
			b.TLS.CA = "ca.pem"
			b.Username, b.Password = "u", "p"
			c.Bridges = []Bridge{b}
			c.Auth = Auth{PasswordFile: "/etc/edgegw/passwd"}
			c.Persistence.Sync = SyncNone
			c.Persistence.SyncInterval = 0
		}, nil},
		{"enums", func(c *Config) {
			c.Log.Level, c.Log.Format = "trace", "xml"
			c.Persistence.Sync = "sometimes"
		}, []string{"log.level", "log.format", "persistence.sync"}},
		{"addresses", func(c *Config) {
			c.Listeners[0].Address = "1883"
			c.Metrics.Address = "localhost:http"
		}, []string{"listeners[0].address", "metrics.address"}},
		{"port range", func(c *Config) { c.Listeners[0].Address = "0.0.0.0:70000" }, []string{"listeners[0].address"}},
		{"runtime knobs valid", func(c *Config) {
			c.Limits.MemoryLimit, c.Limits.GCPercent = 96*MiB, -1
		}, nil},
		{"runtime knobs", func(c *Config) {
			c.Limits.MemoryLimit, c.Limits.GCPercent = 32*MiB, 0 // below the 64 MiB budget; 0 is not "off"
		}, []string{"limits.memory_limit", "limits.gc_percent"}},
		{"runtime knobs range", func(c *Config) {
			c.Limits.MemoryLimit, c.Limits.GCPercent = -1, 5000
		}, []string{"limits.memory_limit", "limits.gc_percent"}},
		{"no listeners", func(c *Config) { c.Listeners = nil }, []string{"listeners"}},
		{"duplicate listeners", func(c *Config) {
			l := c.Listeners[0]
			c.Listeners = append(c.Listeners, l)
		}, []string{"listeners[1].name", "listeners[1].address"}},
		{"port 0 may repeat", func(c *Config) {
			c.Listeners[0].Address = "127.0.0.1:0"
			l := c.Listeners[0]
			l.Name = "other"
			c.Listeners = append(c.Listeners, l)
		}, nil},
		{"listener on metrics address", func(c *Config) { c.Listeners[0].Address = "127.0.0.1:18830" }, []string{"listeners[0].address"}},
		{"listener tls", func(c *Config) {
			c.Listeners[0].TLS = ListenerTLS{Cert: "c.pem", UseCNAsUsername: true}
		}, []string{"listeners[0].tls.key", "listeners[0].tls.use_cn_as_username"}},
		{"listener tls key only", func(c *Config) {
			c.Listeners[0].TLS = ListenerTLS{Key: "k.pem", ClientCA: "ca.pem"}
		}, []string{"listeners[0].tls.cert", "listeners[0].tls.client_ca"}},
		{"serial", func(c *Config) {
			l := DefaultListener(ListenerSerial)
			l.Name, l.Baud, l.Framing, l.MaxFrameSize = "uart", 0, "slip", 0
			l.Address = "0.0.0.0:1"
			c.Listeners = append(c.Listeners, l)
		}, []string{"listeners[1].device", "listeners[1].baud", "listeners[1].framing", "listeners[1].max_frame_size", "listeners[1].address"}},
		{"websocket", func(c *Config) {
			l := DefaultListener(ListenerWebSocket)
			l.Name, l.Path, l.AllowedOrigins = "web", "mqtt", []string{"dash.example.com"}
			c.Listeners = append(c.Listeners, l)
		}, []string{"listeners[1].path", "listeners[1].allowed_origins[0]"}},
		{"keys of other types", func(c *Config) {
			c.Listeners[0].Path = "/mqtt"
			c.Listeners[0].Device = "/dev/ttyS0"
			c.Listeners[0].Baud = 9600
		}, []string{"listeners[0].path", "listeners[0].device", "listeners[0]"}},
		{"limits", func(c *Config) {
			c.Limits = Limits{MaxPacketSize: 300 << 20, ConnectTimeout: 10, WriteTimeout: -time.Second,
				KeepaliveMax: 70000 * time.Second, ServerKeepalive: 1500 * time.Millisecond, MaxInflight: 70000,
				GCPercent: DefaultGCPercent, MaxTopicLength: 65536}
		}, []string{"limits.max_connections", "limits.max_packet_size", "limits.connect_timeout", "limits.write_timeout",
			"limits.slow_subscriber_after", "limits.keepalive_max", "limits.server_keepalive", "limits.max_inflight",
			"limits.max_topic_levels", "limits.max_topic_length", "limits.max_subscriptions",
			"limits.max_retained_messages", "limits.max_retained_bytes", "limits.max_queued_messages",
			"limits.max_queued_bytes", "limits.memory_budget"}},
		{"sessions", func(c *Config) { c.Sessions.MaxExpiry = -time.Hour }, []string{"sessions.max_expiry"}},
		{"no way in", func(c *Config) { c.Auth.AllowAnonymous = false }, []string{"auth.allow_anonymous"}},
		{"cn is a way in", func(c *Config) {
			c.Auth.AllowAnonymous = false
			c.Listeners[0].TLS = ListenerTLS{Cert: "c", Key: "k", ClientCA: "ca", UseCNAsUsername: true}
		}, nil},
		{"sync interval", func(c *Config) { c.Persistence.SyncInterval = 0 }, []string{"persistence.sync_interval"}},
		{"bridge basics", func(c *Config) {
			b := validBridge()
			b.Name, b.ClientID, b.Addresses, b.Topics = "", "", nil, nil
			c.Bridges = []Bridge{b}
		}, []string{"bridges[0].name", "bridges[0].addresses", "bridges[0].client_id", "bridges[0].topics"}},
		{"bridge names", func(c *Config) {
			a, b, d := validBridge(), validBridge(), validBridge()
			d.Name = "a/b"
			c.Bridges = []Bridge{a, b, d}
		}, []string{"bridges[1].name", "bridges[2].name"}},
		{"bridge addresses", func(c *Config) {
			b := validBridge()
			b.Addresses = []string{"cloud.example.com:1883", "tcp://cloud.example.com", "mqtt://h:1883", "tcp://:1883", "tcp://h:1883/x", "ws://h:80/mqtt", "tcp://[::1]:1883"}
			c.Bridges = []Bridge{b}
		}, []string{"bridges[0].addresses[0]", "bridges[0].addresses[1]", "bridges[0].addresses[2]", "bridges[0].addresses[3]", "bridges[0].addresses[4]"}},
		{"bridge timing", func(c *Config) {
			b := validBridge()
			b.Keepalive, b.ConnectTimeout, b.WriteTimeout, b.AckTimeout = 0, 0, 0, 0
			b.MaxInflight, b.MaxInflightQoS2 = -1, 0
			b.ReconnectMin, b.ReconnectMax = 2*time.Minute, time.Minute
			b.Spool.MaxBytes = 0
			c.Bridges = []Bridge{b}
		}, []string{"bridges[0].keepalive", "bridges[0].connect_timeout", "bridges[0].write_timeout", "bridges[0].ack_timeout",
			"bridges[0].max_inflight", "bridges[0].max_inflight_qos2", "bridges[0].reconnect_min", "bridges[0].spool.max_bytes"}},
		{"bridge protocol", func(c *Config) {
			a, b := validBridge(), validBridge()
			a.Protocol, b.Protocol = "4", ""
			b.Name = "b"
			c.Bridges = []Bridge{a, b}
		}, []string{"bridges[0].protocol", "bridges[1].protocol"}},
		{"bridge engine", func(c *Config) {
			a, b, p := validBridge(), validBridge(), validBridge()
			a.Engine, b.Engine, p.Engine = "pah0", "session", "paho" // paho: preflight's warning, not an error
			b.Name, p.Name = "b", "p"
			c.Bridges = []Bridge{a, b, p}
		}, []string{"bridges[0].engine"}},
		{"bridge auth and tls", func(c *Config) {
			b := validBridge()
			b.Password = "p"
			b.TLS = BridgeTLS{Cert: "c.pem"}
			c.Bridges = []Bridge{b}
		}, []string{"bridges[0].password", "bridges[0].tls.key", "bridges[0].tls"}},
		{"clean session needs no client id", func(c *Config) {
			b := validBridge()
			b.ClientID, b.CleanSession = "", true
			c.Bridges = []Bridge{b}
		}, nil},
		{"topics", func(c *Config) {
			b := validBridge()
			b.Topics = []BridgeTopic{
				{Pattern: "", Direction: "out", QoS: 1},
				{Pattern: "a/b#", Direction: "in", QoS: -1},
				{Pattern: "a/+b/c", Direction: "both", QoS: 0},
				{Pattern: "+/+/#", Direction: "sideways", QoS: 2, LocalPrefix: "x/#/", RemotePrefix: "+"},
				{Pattern: "$SYS/broker/#", Direction: "out", QoS: 0},
				{Pattern: "#", Direction: "both", QoS: 2},
			}
			c.Bridges = []Bridge{b}
		}, []string{"bridges[0].topics[0].pattern", "bridges[0].topics[1].pattern", "bridges[0].topics[1].qos",
			"bridges[0].topics[2].pattern", "bridges[0].topics[3].direction", "bridges[0].topics[3].local_prefix",
			"bridges[0].topics[3].remote_prefix"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			tt.modify(&c)
			err := c.Validate()
			var got []string
			if err != nil {
				var es Errors
				if !errors.As(err, &es) {
					t.Fatalf("error %T is not Errors", err)
				}
				for _, e := range es {
					got = append(got, e.Key)
					if e.Msg == "" {
						t.Errorf("problem with key %s has no message", e.Key)
					}
				}
			}
			if !reflect.DeepEqual(got, tt.keys) {
				t.Fatalf("problem keys = %q, want %q\n%v", got, tt.keys, err)
			}
		})
	}
}

// referencePath is the shipped reference config.
const referencePath = "../../configs/edgegw.yaml"

// uncommentExamples enables the commented-out example blocks of the
// reference config (between "# ---8<---" and "# --->8---", one leading "#"
// per line) the way an operator would.
func uncommentExamples(t *testing.T, text string) string {
	t.Helper()
	var out []string
	in, blocks := false, 0
	for _, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, "# ---8<---"):
			in = true
			blocks++
			continue
		case strings.HasPrefix(line, "# --->8---"):
			in = false
			continue
		case line == "bridges: []":
			continue
		case in && strings.HasPrefix(line, "#"):
			if !strings.HasPrefix(line, "# ") || strings.HasPrefix(line, "#  ") {
				line = line[1:]
			}
		}
		out = append(out, line)
	}
	if blocks != 2 {
		t.Fatalf("found %d example blocks in %s, want 2", blocks, referencePath)
	}
	return strings.Join(out, "\n")
}

func TestReferenceConfig(t *testing.T) {
	c, err := Load(referencePath, nil)
	if err != nil {
		t.Fatalf("%s does not load:\n%v", referencePath, err)
	}
	if len(c.Listeners) < 2 || len(c.Bridges) != 0 {
		t.Errorf("reference config: listeners %d, bridges %d", len(c.Listeners), len(c.Bridges))
	}
	text, err := os.ReadFile(referencePath)
	if err != nil {
		t.Fatal(err)
	}

	// With the examples enabled it must still validate, and show every key.
	p := filepath.Join(t.TempDir(), "edgegw.yaml")
	if err := os.WriteFile(p, []byte(uncommentExamples(t, string(text))), 0o600); err != nil {
		t.Fatal(err)
	}
	full, err := Load(p, nil)
	if err != nil {
		t.Fatalf("reference config with examples enabled does not load:\n%v", err)
	}
	if len(full.Bridges) != 1 || full.Listeners[len(full.Listeners)-1].Type != ListenerSerial {
		t.Fatalf("examples not enabled: %+v", full)
	}

	// Every key of the schema appears in the file (as "key:").
	var missing []string
	for _, k := range schemaKeys(reflectTypeOfConfig(), "") {
		leaf := k[strings.LastIndex(k, ".")+1:]
		if !strings.Contains(string(text), leaf+":") {
			missing = append(missing, k)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("keys missing from %s: %s", referencePath, strings.Join(missing, ", "))
	}
}

func TestWriteYAMLRoundTrip(t *testing.T) {
	c := Default()
	ws := DefaultListener(ListenerWebSocket)
	ws.Name, ws.AllowedOrigins = "web", []string{"https://a.example.com"}
	ser := DefaultListener(ListenerSerial)
	ser.Name, ser.Device = "uart0", "/dev/ttyUSB0"
	c.Listeners = append(c.Listeners, ws, ser)
	b := validBridge()
	b.Username, b.Password = "edge", "hunter2"
	b.Spool.MaxBytes = 1000
	b.Topics = append(b.Topics, BridgeTopic{Pattern: "cmd/#", Direction: "in", QoS: 0, LocalPrefix: "1883"})
	c.Bridges = []Bridge{b}
	c.Limits.ConnectTimeout = 90 * time.Second
	c.Auth.PasswordFile = "yes" // a string that YAML could take for a bool
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}

	var buf bytes.Buffer
	if err := c.WriteYAML(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if strings.Contains(out, "hunter2") || !strings.Contains(out, "password: <redacted>") {
		t.Fatalf("password not redacted:\n%s", out)
	}
	for _, want := range []string{"max_packet_size: 1MiB", "connect_timeout: 1m30s", "max_expiry: 24h", "max_bytes: 1000\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if c.Bridges[0].Password != "hunter2" {
		t.Fatal("WriteYAML modified the config")
	}

	back, err := Load(writeFile(t, out), nil)
	if err != nil {
		t.Fatalf("rendered config does not load:\n%v\n%s", err, out)
	}
	back.Bridges[0].Password = "hunter2"
	if !reflect.DeepEqual(back, c) {
		t.Fatalf("round trip differs:\n got %+v\nwant %+v", back, c)
	}
}

// TestRuntimeKnobs: limits.memory_limit and limits.gc_percent load from the
// file and the environment, and the memory limit is derived from the
// memory budget when 0.
func TestRuntimeKnobs(t *testing.T) {
	d := Default()
	if d.Limits.GCPercent != DefaultGCPercent || d.Limits.MemoryLimit != 0 {
		t.Fatalf("defaults: gc_percent %d, memory_limit %d", d.Limits.GCPercent, d.Limits.MemoryLimit)
	}
	if got := d.Limits.DerivedMemoryLimit(); got != 160*MiB {
		t.Fatalf("derived memory limit with the defaults = %d, want 160 MiB", got)
	}
	c, err := Load(writeFile(t, "limits:\n  memory_budget: 16MiB\n  gc_percent: 80\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Limits.GCPercent != 80 || c.Limits.DerivedMemoryLimit() != 64*MiB {
		t.Fatalf("file: gc_percent %d, derived limit %d", c.Limits.GCPercent, c.Limits.DerivedMemoryLimit())
	}
	c, err = Load("", []string{"EDGEGW_LIMITS_MEMORY_LIMIT=100MiB", "EDGEGW_LIMITS_GC_PERCENT=-1"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Limits.MemoryLimit != 100*MiB || c.Limits.DerivedMemoryLimit() != 100*MiB || c.Limits.GCPercent != -1 {
		t.Fatalf("env: %+v", c.Limits)
	}
	_, err = Load("", []string{"EDGEGW_LIMITS_GC_PERCENT=5"})
	if err == nil || !strings.Contains(err.Error(), "$EDGEGW_LIMITS_GC_PERCENT") || !strings.Contains(err.Error(), "limits.gc_percent") {
		t.Fatalf("gc_percent 5 from env: %v", err)
	}
}

// TestLaneKeys: priority, drain, backlog_share and max_age are checked,
// each error naming its key.
func TestLaneKeys(t *testing.T) {
	c := Default()
	b := validBridge()
	b.Drain, b.BacklogShare, b.RateLimit, b.Budget = "lifo", "25", -1, "500MiB each month"
	b.Topics = append(b.Topics,
		BridgeTopic{Pattern: "a/#", Direction: "out", QoS: 1, Priority: "urgent"},
		BridgeTopic{Pattern: "b/#", Direction: "in", QoS: 1, Priority: "high", MaxAge: time.Second},
		BridgeTopic{Pattern: "c/#", Direction: "out", QoS: 1, MaxAge: -time.Second})
	c.Bridges = []Bridge{b}
	err := c.Validate()
	for _, want := range []string{"bridges[0].drain", "bridges[0].backlog_share", "bridges[0].rate_limit", "bridges[0].budget", "bridges[0].topics[1].priority",
		"bridges[0].topics[2].priority", "bridges[0].topics[2].max_age", "bridges[0].topics[3].max_age"} {
		if err == nil || !strings.Contains(err.Error(), want+":") {
			t.Errorf("no error for %s in %v", want, err)
		}
	}
	if n, p, err := ParseBudget("500MiB per 30d"); err != nil || n != 500<<20 || p != 30*24*time.Hour {
		t.Errorf("ParseBudget = %d %s %v", n, p, err)
	}
	if v, err := ParsePercent("25%"); err != nil || v != 0.25 {
		t.Errorf("ParsePercent(25%%) = %v, %v", v, err)
	}
}

// TestBridgeMaxPacketSize: bridges[].max_packet_size takes a size (units
// included), 0 (the default) is no limit, and a value outside 64 bytes to
// the largest MQTT packet (256 MiB - 1 of remaining length + 5) is an
// error naming the key.
func TestBridgeMaxPacketSize(t *testing.T) {
	p := writeFile(t, `
bridges:
  - name: cloud
    addresses: ["tcp://127.0.0.1:1883"]
    client_id: edge
    max_packet_size: 128KiB
    topics: [{pattern: "sensors/#"}]
  - name: other
    addresses: ["tcp://127.0.0.1:1883"]
    client_id: edge2
    topics: [{pattern: "sensors/#"}]
`)
	c, err := Load(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Bridges[0].MaxPacketSize != 128<<10 || c.Bridges[1].MaxPacketSize != 0 {
		t.Fatalf("max_packet_size %d and %d (default); want 131072 and 0", c.Bridges[0].MaxPacketSize, c.Bridges[1].MaxPacketSize)
	}
	for _, tc := range []struct {
		v  int64
		ok bool
	}{{0, true}, {63, false}, {64, true}, {268435460, true}, {268435461, false}, {-1, false}} {
		c := Default()
		b := validBridge()
		b.MaxPacketSize = tc.v
		c.Bridges = []Bridge{b}
		err := c.Validate()
		if tc.ok != (err == nil) || (err != nil && !strings.Contains(err.Error(), "bridges[0].max_packet_size:")) {
			t.Errorf("max_packet_size %d: %v (want ok %v)", tc.v, err, tc.ok)
		}
	}
}
