package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// writeFile writes a config file named edgegw.yaml in a temp dir.
func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "edgegw.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// problems returns err's problems rendered without their source.
func problems(t *testing.T, err error) []string {
	t.Helper()
	var es Errors
	if !errors.As(err, &es) {
		t.Fatalf("error %v (%T) is not config.Errors", err, err)
	}
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = (&FieldError{Key: e.Key, Msg: e.Msg}).Error()
	}
	return out
}

func TestDefault(t *testing.T) {
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatalf("Default().Validate() = %v", err)
	}
	if len(c.Listeners) != 1 || c.Listeners[0].Name != "default" || c.Listeners[0].Type != "tcp" || c.Listeners[0].Address != "127.0.0.1:1883" {
		t.Errorf("default listeners = %+v", c.Listeners)
	}
	want := Limits{MaxConnections: 1024, MaxPacketSize: 1 << 20, ConnectTimeout: 10 * time.Second,
		WriteTimeout: 10 * time.Second, SlowSubscriberAfter: 250 * time.Millisecond, MaxInflight: 32, MaxQueuedMessages: 1000,
		MaxQueuedBytes: 4 << 20, MemoryBudget: 64 << 20, GCPercent: 50, MaxTopicLevels: 64, MaxTopicLength: 65535, MaxSubscriptions: 500,
		MaxRetainedMessages: 100_000, MaxRetainedBytes: 64 << 20}
	if c.Limits != want {
		t.Errorf("default limits = %+v, want %+v", c.Limits, want)
	}
	if c.Sessions.MaxExpiry != 24*time.Hour || !c.Auth.AllowAnonymous || c.Persistence.Sync != "batch" ||
		c.Persistence.SyncInterval != 20*time.Millisecond || c.Metrics.Address != "127.0.0.1:18830" || len(c.Bridges) != 0 {
		t.Errorf("default = %+v", c)
	}
	// Default must hand out fresh slices.
	c.Listeners[0].Name = "changed"
	if Default().Listeners[0].Name != "default" {
		t.Error("Default shares its listeners slice")
	}
}

func TestLoadNoFile(t *testing.T) {
	c, err := Load("", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c, Default()) {
		t.Fatalf("Load(\"\") = %+v, want Default()", c)
	}
	c, err = Load(writeFile(t, "# nothing here\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c, Default()) {
		t.Fatalf("Load(empty file) = %+v, want Default()", c)
	}
}

const bridgeYAML = `
bridges:
  - name: cloud
    addresses: ["tls://cloud.example.com:8883", "tcp://127.0.0.1:1884"]
    client_id: edge-01
    username: edge
    password: s3cret
    keepalive: 45s
    tls: {ca: /etc/ssl/ca.pem}
    spool: {max_bytes: 1GiB}
    topics:
      - pattern: "sensors/#"
        remote_prefix: "site-a/"
      - pattern: "cmd/+/set"
        direction: in
        qos: 2
  - name: backup
    addresses: tcp://127.0.0.1:1885
    protocol: 5
    topics:
      - pattern: "#"
        qos: 0
`

func TestLoadFile(t *testing.T) {
	tests := []struct {
		name  string
		yaml  string
		env   []string
		check func(t *testing.T, c Config)
	}{
		{
			name: "sizes and durations",
			yaml: `
limits:
  max_packet_size: 512KiB
  max_queued_bytes: 1MB
  memory_budget: 67108864
  connect_timeout: 1m30s
  write_timeout: 500ms
  keepalive_max: 0
  server_keepalive: 60s
sessions: {max_expiry: 168h}
`,
			check: func(t *testing.T, c Config) {
				l := c.Limits
				if l.MaxPacketSize != 512<<10 || l.MaxQueuedBytes != 1000000 || l.MemoryBudget != 64<<20 {
					t.Errorf("sizes = %d %d %d", l.MaxPacketSize, l.MaxQueuedBytes, l.MemoryBudget)
				}
				if l.ConnectTimeout != 90*time.Second || l.WriteTimeout != 500*time.Millisecond || l.ServerKeepalive != time.Minute {
					t.Errorf("durations = %v %v %v", l.ConnectTimeout, l.WriteTimeout, l.ServerKeepalive)
				}
				if l.MaxInflight != 32 || l.MaxConnections != 1024 {
					t.Errorf("unset limits lost their defaults: %+v", l)
				}
				if c.Sessions.MaxExpiry != 168*time.Hour {
					t.Errorf("max_expiry = %v", c.Sessions.MaxExpiry)
				}
			},
		},
		{
			name: "listener defaults by type",
			yaml: `
listeners:
  - name: lan
    address: "0.0.0.0:1883"
  - name: web
    type: websocket
    allowed_origins: ["https://dash.example.com"]
  - type: serial
    device: /dev/ttyUSB0
  - name: uart1
    type: serial
    device: /dev/ttyAMA0
    baud: 9600
    framing: raw
    max_frame_size: 4k
  - name: tls
    address: ":8883"
    tls: {cert: c.pem, key: k.pem, client_ca: ca.pem, use_cn_as_username: true}
`,
			check: func(t *testing.T, c Config) {
				want := []Listener{
					{Name: "lan", Type: "tcp", Address: "0.0.0.0:1883"},
					{Name: "web", Type: "websocket", Address: "127.0.0.1:8083", Path: "/mqtt", AllowedOrigins: []string{"https://dash.example.com"}},
					{Name: "serial2", Type: "serial", Device: "/dev/ttyUSB0", Baud: 115200, Framing: "cobs-crc16", MaxFrameSize: 64 << 10},
					{Name: "uart1", Type: "serial", Device: "/dev/ttyAMA0", Baud: 9600, Framing: "raw", MaxFrameSize: 4 << 10},
					{Name: "tls", Type: "tcp", Address: ":8883", TLS: ListenerTLS{Cert: "c.pem", Key: "k.pem", ClientCA: "ca.pem", UseCNAsUsername: true}},
				}
				if !reflect.DeepEqual(c.Listeners, want) {
					t.Errorf("listeners =\n%+v\nwant\n%+v", c.Listeners, want)
				}
			},
		},
		{
			name: "bridge defaults per entry",
			yaml: bridgeYAML,
			check: func(t *testing.T, c Config) {
				if len(c.Bridges) != 2 {
					t.Fatalf("bridges = %+v", c.Bridges)
				}
				b := c.Bridges[0]
				if b.Keepalive != 45*time.Second || b.ConnectTimeout != 10*time.Second || b.WriteTimeout != 5*time.Second ||
					b.AckTimeout != 20*time.Second || b.MaxInflight != WindowAuto || b.MaxInflightQoS2 != 20 || b.ReconnectMin != time.Second ||
					b.ReconnectMax != time.Minute || b.Spool.MaxBytes != 1<<30 || b.Password != "s3cret" || b.TLS.CA != "/etc/ssl/ca.pem" ||
					b.Protocol != "3.1.1" {
					t.Errorf("bridge 0 = %+v", b)
				}
				if p := c.Bridges[1].Protocol; p != "5" { // a YAML number
					t.Errorf("bridge 1 protocol = %q, want 5", p)
				}
				wantTopics := []BridgeTopic{
					{Pattern: "sensors/#", Direction: "out", QoS: 1, RemotePrefix: "site-a/", Priority: "normal"},
					{Pattern: "cmd/+/set", Direction: "in", QoS: 2, Priority: "normal"},
				}
				if !reflect.DeepEqual(b.Topics, wantTopics) {
					t.Errorf("topics = %+v", b.Topics)
				}
				b = c.Bridges[1]
				if !reflect.DeepEqual(b.Addresses, []string{"tcp://127.0.0.1:1885"}) || b.Spool.MaxBytes != 256<<20 {
					t.Errorf("bridge 1 = %+v", b)
				}
				if !strings.HasPrefix(b.ClientID, "edgegw-") || !strings.HasSuffix(b.ClientID, "-backup") {
					t.Errorf("default client_id = %q", b.ClientID)
				}
				if b.Topics[0].Direction != "out" || b.Topics[0].QoS != 0 {
					t.Errorf("explicit qos 0 lost: %+v", b.Topics[0])
				}
			},
		},
		{
			name: "env overrides",
			yaml: "log: {level: warn}\nlimits: {max_inflight: 4}\n",
			env: []string{
				"PATH=/usr/bin",
				"EDGEGW_LIMITS_MAX_INFLIGHT=8",
				"EDGEGW_LOG_FORMAT=json",
				"EDGEGW_LIMITS_MAX_PACKET_SIZE=2MiB",
				"EDGEGW_LIMITS_CONNECT_TIMEOUT=1m30s",
				"EDGEGW_AUTH_ALLOW_ANONYMOUS=false",
				"EDGEGW_AUTH_PASSWORD_FILE=/etc/edgegw/passwd",
				"EDGEGW_PERSISTENCE_DIR=/var/lib/edgegw",
				"EDGEGW_METRICS_ADDRESS=",
				"EDGEGW_CONFIG=/somewhere/else.yaml", // names the file; not an override
				"EDGEGW_TEST_UPSTREAM=1",             // not a config section: ignored
			},
			check: func(t *testing.T, c Config) {
				if c.Log.Level != "warn" || c.Log.Format != "json" {
					t.Errorf("log = %+v", c.Log)
				}
				if c.Limits.MaxInflight != 8 || c.Limits.MaxPacketSize != 2<<20 || c.Limits.ConnectTimeout != 90*time.Second {
					t.Errorf("limits = %+v", c.Limits)
				}
				if c.Auth.AllowAnonymous || c.Auth.PasswordFile != "/etc/edgegw/passwd" || c.Persistence.Dir != "/var/lib/edgegw" || c.Metrics.Address != "" {
					t.Errorf("config = %+v", c)
				}
			},
		},
		{
			name: "keys in any case",
			yaml: "Log:\n  Level: debug\nlisteners:\n  - Name: a\n    Address: 127.0.0.1:0\n",
			check: func(t *testing.T, c Config) {
				if c.Log.Level != "debug" || c.Listeners[0].Name != "a" || c.Listeners[0].Address != "127.0.0.1:0" {
					t.Errorf("config = %+v", c)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(writeFile(t, tt.yaml), tt.env)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			tt.check(t, c)
		})
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		env  []string
		want []string // exact problems, without source, in order
	}{
		{
			name: "unknown top-level key",
			yaml: "logg: {level: info}\n",
			want: []string{`unknown top-level key "logg" (did you mean "log"?)`},
		},
		{
			name: "unknown key in section",
			yaml: "limits:\n  max_inflght: 3\n",
			want: []string{`limits: unknown key "max_inflght" (did you mean "max_inflight"?)`},
		},
		{
			name: "unknown key in list item",
			yaml: "listeners:\n  - name: lan\n    adress: 0.0.0.0:1883\n",
			want: []string{`listeners[0]: unknown key "adress" (did you mean "address"?)`},
		},
		{
			name: "unknown key in nested list item",
			yaml: "bridges:\n  - name: c\n    addresses: [tcp://h:1]\n    topics:\n      - pattern: a\n        qso: 1\n",
			want: []string{`bridges[0].topics[0]: unknown key "qso" (did you mean "qos"?)`},
		},
		{
			name: "unknown key in nested struct",
			yaml: "listeners:\n  - name: lan\n    tls: {cert: a, key: b, ca: c}\n",
			want: []string{`listeners[0].tls: unknown key "ca"`},
		},
		{
			name: "duration without unit",
			yaml: "limits: {connect_timeout: 10}\n",
			want: []string{`limits.connect_timeout: duration 10 has no unit (write e.g. 10s or 10ms)`},
		},
		{
			name: "bad duration",
			yaml: "sessions: {max_expiry: 1 day}\n",
			want: []string{`sessions.max_expiry: invalid duration "1 day" (want a number with a unit: 500ms, 10s, 1m30s, 24h)`},
		},
		{
			name: "bad size",
			yaml: "limits: {memory_budget: 64 megs}\n",
			want: []string{`limits.memory_budget: invalid size "64 megs" (want bytes or a number with a unit: 512KiB, 4MiB, 1GiB, 64k, 1MB)`},
		},
		{
			name: "list expected",
			yaml: "listeners:\n  name: lan\n",
			want: []string{`listeners: must be a list (each entry starting with "- ")`},
		},
		{
			name: "mapping expected",
			yaml: "limits: 5\n",
			want: []string{`limits: expected a mapping of keys (key: value), got a number 5`},
		},
		{
			name: "scalar expected",
			yaml: "log: {level: [debug]}\n",
			want: []string{`log.level: expected a single value, got a list`},
		},
		{
			name: "env unknown key and list",
			env:  []string{"EDGEGW_LIMITS_MAX_INFLIHGT=3", "EDGEGW_LISTENERS=x", "EDGEGW_LIMITS_MAX_INFLIGHT=lots"},
			want: []string{
				`limits: unknown key "max_inflihgt" (did you mean "max_inflight"?)`,
				`listeners: lists cannot be set from the environment; use the config file`,
				`limits.max_inflight: invalid number "lots" (want a whole number)`,
			},
		},
		{
			name: "env bad value validated",
			env:  []string{"EDGEGW_LOG_LEVEL=verbose"},
			want: []string{`log.level: invalid value "verbose" (want debug | info | warn | error)`},
		},
		{
			name: "several problems together",
			yaml: `
log: {level: loud}
listeners:
  - name: lan
    adress: 0.0.0.0:1883
  - name: lan
    type: tcpip
limits:
  max_inflight: 0
  write_timeout: 5
bridges:
  - name: cloud
    addresses: ["http://cloud:80"]
    reconnect_min: 2m
    reconnect_max: 1m
    topics:
      - {pattern: "a/#/b", qos: 3, direction: up}
`,
			want: []string{
				`listeners[0]: unknown key "adress" (did you mean "address"?)`,
				`limits.write_timeout: duration 5 has no unit (write e.g. 5s or 5ms)`,
				`log.level: invalid value "loud" (want debug | info | warn | error)`,
				`listeners[1].name: duplicate listener name "lan" (also listeners[0])`,
				`listeners[1].type: invalid value "tcpip" (want tcp | websocket | serial)`,
				`limits.max_inflight: must be in 1..65535 (got 0)`,
				`bridges[0].addresses[0]: unsupported scheme "http" in "http://cloud:80" (want scheme://host:port with scheme tcp, tls, ssl, ws or wss)`,
				`bridges[0].reconnect_min: 2m is greater than reconnect_max 1m`,
				`bridges[0].topics[0].pattern: invalid pattern "a/#/b": # must be a whole level and the last one`,
				`bridges[0].topics[0].direction: invalid value "up" (want out | in | both)`,
				`bridges[0].topics[0].qos: must be 0, 1 or 2 (got 3)`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := ""
			if tt.yaml != "" {
				path = writeFile(t, tt.yaml)
			}
			_, err := Load(path, tt.env)
			if err == nil {
				t.Fatal("Load succeeded, want errors")
			}
			got := problems(t, err)
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("problems:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tt.want, "\n  "))
			}
		})
	}
}

func TestLoadErrorSources(t *testing.T) {
	path := writeFile(t, "listeners:\n  - name: lan\n    adress: x\n")
	_, err := Load(path, []string{"EDGEGW_LIMITS_MAX_INFLIGHT=0"})
	want := path + `: listeners[0]: unknown key "adress" (did you mean "address"?)` + "\n" +
		`$EDGEGW_LIMITS_MAX_INFLIGHT: limits.max_inflight: must be in 1..65535 (got 0)`
	if err == nil || err.Error() != want {
		t.Fatalf("error =\n%v\nwant\n%s", err, want)
	}
	// The file name appears as given, as operators expect.
	_, err = Load(filepath.Join(t.TempDir(), "missing.yaml"), nil)
	if err == nil || !strings.Contains(err.Error(), "missing.yaml: cannot read config file") {
		t.Fatalf("missing file: %v", err)
	}
	_, err = Load(writeFile(t, "log:\n  level: info\n   format: json\n"), nil)
	if err == nil || !strings.Contains(err.Error(), "edgegw.yaml:3: invalid YAML: mapping values are not allowed") {
		t.Fatalf("bad yaml: %v", err)
	}
}
