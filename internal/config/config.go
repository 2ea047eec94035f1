// Package config is edgegw's typed configuration: the schema, its defaults,
// loading from a YAML file plus EDGEGW_* environment overrides, validation
// that reports every problem together (each naming its key), and rendering
// of the effective configuration for `edgegw check-config`.
//
// The structs hold plain Go values (strings, ints, time.Duration, sizes as
// int64 bytes) so that the gateway, listeners and bridge packages can take
// them without knowing about viper, which is used only in this package (and
// cmd/). The mapstructure tags are the YAML key names; they are the contract
// with operators (see docs/config.md) and must not change lightly.
//
// Convention used by the loader: fields of type int64 are sizes in bytes
// (they accept "4MiB", "64k", ...); counts are int. Keep it that way when
// adding keys.
package config

import "time"

// Listener types (Listener.Type).
const (
	ListenerTCP       = "tcp"
	ListenerWebSocket = "websocket"
	ListenerSerial    = "serial"
)

// Serial framings (Listener.Framing).
const (
	// FramingCOBSCRC16 frames each packet as COBS(packet || CRC-16/CCITT-FALSE)
	// followed by 0x00. See docs/serial-framing.md.
	FramingCOBSCRC16 = "cobs-crc16"
	// FramingRaw is a plain MQTT byte stream.
	FramingRaw = "raw"
)

// Bridge topic directions (BridgeTopic.Direction).
const (
	DirectionOut  = "out"  // local -> cloud
	DirectionIn   = "in"   // cloud -> local
	DirectionBoth = "both" // both ways
)

// Bridge topic priorities (BridgeTopic.Priority): the spool lanes.
const (
	PriorityHigh   = "high"   // always sent first
	PriorityNormal = "normal" // the default
	PriorityBulk   = "bulk"   // sent last, dropped first when the spool is full
)

// Bridge drain policies (Bridge.Drain).
const (
	DrainFIFO      = "fifo"       // each lane oldest first
	DrainLiveFirst = "live-first" // new messages first, the backlog with backlog_share of the window
)

// Bridge address orders (Bridge.AddressOrder).
const (
	AddressOrderSpread = "spread" // an order of the bridge's own, by client id: a fleet spreads over the nodes
	AddressOrderStrict = "strict" // as listed: the first is the primary
)

// Bridge flag settings (Bridge.BridgeFlag) and what happens to a message
// above the upstream's QoS (Bridge.QoSNotGranted).
const (
	BridgeFlagAuto   = "auto"
	BridgeFlagAlways = "always"
	BridgeFlagNever  = "never"
	QoSDowngrade     = "downgrade"
	QoSHold          = "hold"
)

// Persistence sync modes (Persistence.Sync).
const (
	SyncAlways = "always" // fsync after every write
	SyncBatch  = "batch"  // group commit every Persistence.SyncInterval
	SyncNone   = "none"   // leave it to the kernel
)

// Log levels and formats (Log.Level, Log.Format).
const (
	LevelDebug = "debug"
	LevelInfo  = "info"
	LevelWarn  = "warn"
	LevelError = "error"

	FormatText = "text"
	FormatJSON = "json"
)

// Size units, for readability of defaults.
const (
	KiB int64 = 1 << 10
	MiB int64 = 1 << 20
	GiB int64 = 1 << 30
)

// Config is the whole edgegw configuration.
type Config struct {
	Log         Log         `mapstructure:"log"`
	Listeners   []Listener  `mapstructure:"listeners"`
	Limits      Limits      `mapstructure:"limits"`
	Sessions    Sessions    `mapstructure:"sessions"`
	Auth        Auth        `mapstructure:"auth"`
	Persistence Persistence `mapstructure:"persistence"`
	Bridges     []Bridge    `mapstructure:"bridges"`
	Metrics     Metrics     `mapstructure:"metrics"`
}

// Log configures the process logger (log/slog, to stderr).
type Log struct {
	Level  string `mapstructure:"level"`  // debug | info | warn | error
	Format string `mapstructure:"format"` // text | json
}

// Listener is one place clients connect: a TCP port (optionally TLS), a
// WebSocket endpoint (optionally TLS) or a serial device.
type Listener struct {
	Name string `mapstructure:"name"` // unique; used in logs and metrics
	Type string `mapstructure:"type"` // tcp | websocket | serial

	// Address is host:port to bind (tcp, websocket).
	Address string `mapstructure:"address"`
	// TLS enables TLS when TLS.Cert is set (tcp, websocket).
	TLS ListenerTLS `mapstructure:"tls"`

	// Path is the HTTP path of the WebSocket endpoint (websocket).
	Path string `mapstructure:"path"`
	// AllowedOrigins lists accepted Origin headers; empty accepts any
	// (websocket). "*" also accepts any.
	AllowedOrigins []string `mapstructure:"allowed_origins"`

	// Device is the serial device path, e.g. /dev/ttyUSB0 (serial).
	Device string `mapstructure:"device"`
	// Baud is the serial line speed (serial).
	Baud int `mapstructure:"baud"`
	// Framing is cobs-crc16 or raw (serial).
	Framing string `mapstructure:"framing"`
	// MaxFrameSize caps one decoded frame, in bytes (serial).
	MaxFrameSize int64 `mapstructure:"max_frame_size"`
}

// ListenerTLS is a listener's server-side TLS. TLS is on when Cert is set;
// ClientCA set means clients must present a certificate signed by it (mTLS).
type ListenerTLS struct {
	Cert     string `mapstructure:"cert"`      // PEM certificate chain file
	Key      string `mapstructure:"key"`       // PEM private key file
	ClientCA string `mapstructure:"client_ca"` // PEM CA bundle for client certs
	// UseCNAsUsername makes the client certificate's subject CN the MQTT
	// username (needs ClientCA).
	UseCNAsUsername bool `mapstructure:"use_cn_as_username"`
}

// Enabled reports whether TLS is configured.
func (t ListenerTLS) Enabled() bool { return t.Cert != "" }

// Limits bound what clients can make the broker hold. Sizes are bytes.
type Limits struct {
	MaxConnections int   `mapstructure:"max_connections"`
	MaxPacketSize  int64 `mapstructure:"max_packet_size"`
	// ConnectTimeout closes connections that send no CONNECT in time.
	ConnectTimeout time.Duration `mapstructure:"connect_timeout"`
	// WriteTimeout is the deadline of every write to a client.
	WriteTimeout time.Duration `mapstructure:"write_timeout"`
	// SlowSubscriberAfter: a subscriber whose oldest unacknowledged
	// message went out longer ago no longer holds publishers' acks (flow
	// control, docs/behaviour.md); at most WriteTimeout takes effect.
	SlowSubscriberAfter time.Duration `mapstructure:"slow_subscriber_after"`
	// KeepaliveMax caps the keepalive a client may ask for; 0 = no cap.
	// (v5: announced as server keepalive when the client asks for more.)
	KeepaliveMax time.Duration `mapstructure:"keepalive_max"`
	// ServerKeepalive, when > 0, is imposed on v5 clients as Server Keep
	// Alive; 0 = use the client's.
	ServerKeepalive time.Duration `mapstructure:"server_keepalive"`
	// MaxInflight is the outgoing QoS 1/2 window per session (v5: the
	// minimum of this and the client's receive maximum).
	MaxInflight       int   `mapstructure:"max_inflight"`
	MaxQueuedMessages int   `mapstructure:"max_queued_messages"` // per session
	MaxQueuedBytes    int64 `mapstructure:"max_queued_bytes"`    // per session
	MemoryBudget      int64 `mapstructure:"memory_budget"`       // all queued payloads
	// MemoryLimit is the Go runtime's soft memory limit (heap, stacks and
	// runtime metadata; not the mapped binary): the garbage collector works
	// harder as the process nears it. 0 = derived, see
	// DerivedMemoryLimit. The GOMEMLIMIT environment variable overrides it.
	MemoryLimit int64 `mapstructure:"memory_limit"`
	// GCPercent is the garbage collector's target (GOGC): the heap may grow
	// this many percent over the live data between collections; -1 turns
	// the proportional target off (the memory limit alone triggers GC).
	// The GOGC environment variable overrides it.
	GCPercent int `mapstructure:"gc_percent"`
	// MaxTopicLevels and MaxTopicLength bound every topic name and
	// subscription filter a client sends (a filter's levels are topic
	// tree nodes); over either, it is refused (docs/security.md).
	MaxTopicLevels int `mapstructure:"max_topic_levels"`
	MaxTopicLength int `mapstructure:"max_topic_length"`
	// MaxSubscriptions bounds the subscriptions one session holds.
	MaxSubscriptions int `mapstructure:"max_subscriptions"`
	// MaxRetainedMessages and MaxRetainedBytes (topic and payload bytes)
	// bound the retained store: a retained message for a new topic past
	// either is delivered but not retained (docs/config.md).
	MaxRetainedMessages int   `mapstructure:"max_retained_messages"`
	MaxRetainedBytes    int64 `mapstructure:"max_retained_bytes"`
}

// DerivedMemoryLimit is the memory limit used when MemoryLimit is 0: twice
// the memory budget plus 32 MiB. The budget bounds the queued payloads; the
// rest of the process (message headers, connections and their buffers,
// bridges, the GC's own headroom) gets as much again plus a fixed 32 MiB.
// With the defaults, 160 MiB: below the MemoryHigh=192M the systemd unit
// suggests for a 512 MiB board.
func (l Limits) DerivedMemoryLimit() int64 {
	if l.MemoryLimit > 0 {
		return l.MemoryLimit
	}
	return 2*l.MemoryBudget + 32*MiB
}

// Sessions configures persistent sessions.
type Sessions struct {
	// MaxExpiry caps the session expiry a v5 client may ask for and is the
	// expiry of v3.1.1 clean_session=false sessions.
	MaxExpiry time.Duration `mapstructure:"max_expiry"`
}

// Auth configures client authentication and authorization.
type Auth struct {
	AllowAnonymous bool   `mapstructure:"allow_anonymous"`
	PasswordFile   string `mapstructure:"password_file"` // lines "user:bcrypt-hash"; "" = none
	ACLFile        string `mapstructure:"acl_file"`      // "" = everything allowed
}

// Persistence configures durable state (retained messages, sessions, bridge
// spools).
type Persistence struct {
	// Dir holds durable state; "" = memory only (nothing survives a restart).
	Dir string `mapstructure:"dir"`
	// Sync is always | batch | none.
	Sync string `mapstructure:"sync"`
	// SyncInterval is the group-commit interval when Sync is batch.
	SyncInterval time.Duration `mapstructure:"sync_interval"`
}

// Bridge is one uplink to an upstream (cloud) broker.
type Bridge struct {
	// Name is unique; used in $SYS/bridge/<name>/state, logs and the spool
	// directory name, so it must stay stable.
	Name string `mapstructure:"name"`
	// Addresses are tried in AddressOrder (failover): tcp://, tls://
	// (= ssl://), ws://, wss:// URLs with host:port.
	Addresses []string `mapstructure:"addresses"`
	// AddressOrder is spread (an order of this client id's own, so a
	// fleet with one address list spreads over the nodes) or strict (as
	// listed: the first is the primary).
	AddressOrder string `mapstructure:"address_order"`
	ClientID     string `mapstructure:"client_id"` // default DefaultClientID
	Username     string `mapstructure:"username"`
	Password     string `mapstructure:"password"` // secret: redacted when printed
	CleanSession bool   `mapstructure:"clean_session"`
	// Protocol is the uplink's MQTT version: 3.1.1, 5, or auto (5, and
	// 3.1.1 once the upstream refuses 5).
	Protocol string `mapstructure:"protocol"`
	// BridgeFlag (3.1.1): auto (the bridge flag, dropped for an address
	// that refuses it), always, or never.
	BridgeFlag string `mapstructure:"bridge_flag"`
	// UpstreamMaxQoS is the highest QoS sent upstream (1 or 2; over MQTT
	// 5 at most the broker's Maximum QoS); QoSNotGranted is what happens
	// to a message a rule sends higher: downgrade or hold.
	UpstreamMaxQoS int    `mapstructure:"upstream_max_qos"`
	QoSNotGranted  string `mapstructure:"qos_not_granted"`
	// Engine names the code that runs the uplink's MQTT session: session,
	// the bridge's own engine and its only one. paho, the engine it
	// replaced, is taken with a warning (cmd/edgegw preflight) and runs
	// the session engine: a config written for it keeps its gateway up.
	Engine string `mapstructure:"engine"`

	Keepalive      time.Duration `mapstructure:"keepalive"`
	ConnectTimeout time.Duration `mapstructure:"connect_timeout"`
	WriteTimeout   time.Duration `mapstructure:"write_timeout"` // deadline of every uplink write
	// AckTimeout: oldest unacked publish older than this with nothing heard
	// from upstream tears the uplink down.
	AckTimeout time.Duration `mapstructure:"ack_timeout"`
	// MaxInflight bounds the unacked upstream publishes: auto (the
	// default) sizes them by the link, a number is a fixed cap.
	MaxInflight Window `mapstructure:"max_inflight"`
	// MaxInflightQoS2 bounds the QoS 2 flows among them (the upstream's
	// receive quota; mosquitto's default is 20); at most MaxInflight.
	MaxInflightQoS2 int           `mapstructure:"max_inflight_qos2"`
	ReconnectMin    time.Duration `mapstructure:"reconnect_min"`
	ReconnectMax    time.Duration `mapstructure:"reconnect_max"`
	// Drain is how the spool drains after an outage: fifo | live-first;
	// BacklogShare ("25%") is the backlog's share of max_inflight with
	// live-first.
	Drain        string `mapstructure:"drain"`
	BacklogShare string `mapstructure:"backlog_share"`
	// RateLimit caps the bytes written to the uplink per second (0: none);
	// Budget ("500MiB per 30d", "": none) caps them per period, after
	// which only high-priority rules are sent until the next period.
	RateLimit int64  `mapstructure:"rate_limit"`
	Budget    string `mapstructure:"budget"`
	// MaxPacketSize is the largest MQTT packet the cloud broker takes
	// (0: no limit known): a message whose PUBLISH would be larger is
	// dropped as packet too large instead of sent; over MQTT 5 the smaller
	// of it and the broker's announced Maximum Packet Size applies.
	MaxPacketSize int64 `mapstructure:"max_packet_size"`

	TLS    BridgeTLS     `mapstructure:"tls"`
	Spool  Spool         `mapstructure:"spool"`
	Topics []BridgeTopic `mapstructure:"topics"`
}

// BridgeTLS is a bridge's client-side TLS, used for tls://, ssl:// and
// wss:// addresses.
type BridgeTLS struct {
	CA                 string `mapstructure:"ca"`   // PEM CA bundle; "" = system roots
	Cert               string `mapstructure:"cert"` // client certificate (mTLS)
	Key                string `mapstructure:"key"`  // client key (mTLS)
	ServerName         string `mapstructure:"server_name"`
	InsecureSkipVerify bool   `mapstructure:"insecure_skip_verify"`
}

// Spool bounds a bridge's durable store-and-forward queue.
type Spool struct {
	MaxBytes int64 `mapstructure:"max_bytes"`
}

// BridgeTopic is one topic rule of a bridge.
type BridgeTopic struct {
	Pattern   string `mapstructure:"pattern"`   // MQTT topic filter
	Direction string `mapstructure:"direction"` // out | in | both
	QoS       int    `mapstructure:"qos"`       // 0..2
	// LocalPrefix and RemotePrefix remap topics: a local topic
	// LocalPrefix+T is RemotePrefix+T upstream, and back.
	LocalPrefix  string `mapstructure:"local_prefix"`
	RemotePrefix string `mapstructure:"remote_prefix"`
	// MaxAge (out rules): a message not delivered upstream within this
	// long of its arrival is dropped, counted as expired; 0 = no limit.
	MaxAge time.Duration `mapstructure:"max_age"`
	// Priority (out rules) is the spool lane: high | normal | bulk.
	Priority string `mapstructure:"priority"`
}

// Metrics configures the HTTP endpoint serving /metrics and /healthz.
type Metrics struct {
	Address string `mapstructure:"address"` // host:port; "" disables
	// BridgeDownAfter is how long a bridge may stay disconnected before
	// /healthz reports the gateway unhealthy.
	BridgeDownAfter time.Duration `mapstructure:"bridge_down_after"`
}

// DefaultGCPercent is limits.gc_percent's default. Half of Go's 100: a
// gateway's live heap is mostly queued payloads (no pointers, cheap to
// mark), so collecting twice as often costs little CPU, and the heap
// overshoot after a burst is halved (bench/README.md, slowsub).
const DefaultGCPercent = 50

// DefaultMetricsAddress is metrics.address's default. The port clashes
// with nothing common on a gateway: Prometheus' exporter range 9100-9999
// is fully allocated (9100 is node_exporter, which most scraped Pis run),
// and 18830 is also clear of the MQTT ports (1883, 8883), the usual
// WebSocket ones (8080, 8083, 9001), Node-RED (1880), EMQX's dashboard
// (18083) and Linux's ephemeral range (32768-60999). It echoes 1883.
const DefaultMetricsAddress = "127.0.0.1:18830"

// Default returns the configuration used when no file is given: a working
// local broker on 127.0.0.1:1883 with limits safe for a 512 MiB board.
func Default() Config {
	l := DefaultListener(ListenerTCP)
	l.Name = "default"
	return Config{
		Log:       Log{Level: LevelInfo, Format: FormatText},
		Listeners: []Listener{l},
		Limits: Limits{
			MaxConnections:      1024,
			MaxPacketSize:       1 * MiB,
			ConnectTimeout:      10 * time.Second,
			WriteTimeout:        10 * time.Second,
			SlowSubscriberAfter: 250 * time.Millisecond,
			MaxInflight:         32,
			MaxQueuedMessages:   1000,
			MaxQueuedBytes:      4 * MiB,
			MemoryBudget:        64 * MiB,
			GCPercent:           DefaultGCPercent,
			MaxTopicLevels:      64,
			MaxTopicLength:      65535,
			MaxSubscriptions:    500,
			MaxRetainedMessages: 100_000,
			MaxRetainedBytes:    64 * MiB,
		},
		Sessions:    Sessions{MaxExpiry: 24 * time.Hour},
		Auth:        Auth{AllowAnonymous: true},
		Persistence: Persistence{Sync: SyncBatch, SyncInterval: 20 * time.Millisecond},
		Metrics:     Metrics{Address: DefaultMetricsAddress, BridgeDownAfter: 5 * time.Minute},
	}
}

// DefaultListener returns the defaults of a listener entry of the given type
// (as applied to each entry of the file's listeners list). An unknown type
// gets the tcp defaults minus the address.
func DefaultListener(typ string) Listener {
	l := Listener{Type: typ}
	switch typ {
	case ListenerTCP:
		l.Address = "127.0.0.1:1883"
	case ListenerWebSocket:
		l.Address = "127.0.0.1:8083"
		l.Path = "/mqtt"
	case ListenerSerial:
		l.Baud = 115200
		l.Framing = FramingCOBSCRC16
		l.MaxFrameSize = 64 * KiB
	}
	return l
}

// DefaultBridge returns the defaults applied to each entry of the file's
// bridges list.
func DefaultBridge() Bridge {
	return Bridge{
		Keepalive:       30 * time.Second,
		ConnectTimeout:  10 * time.Second,
		WriteTimeout:    5 * time.Second,
		AckTimeout:      20 * time.Second,
		MaxInflight:     WindowAuto,
		MaxInflightQoS2: 20,
		Protocol:        "3.1.1",
		Engine:          "session",
		ReconnectMin:    1 * time.Second,
		ReconnectMax:    60 * time.Second,
		Spool:           Spool{MaxBytes: 256 * MiB},
		Drain:           DrainFIFO,
		BacklogShare:    "25%",
		AddressOrder:    AddressOrderSpread,
		BridgeFlag:      BridgeFlagAuto,
		UpstreamMaxQoS:  2,
		QoSNotGranted:   QoSDowngrade,
	}
}

// DefaultBridgeTopic returns the defaults applied to each entry of a bridge's
// topics list.
func DefaultBridgeTopic() BridgeTopic {
	return BridgeTopic{Direction: DirectionOut, QoS: 1, Priority: PriorityNormal}
}
