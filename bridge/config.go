package bridge

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/edgegw/edgegw/bridge/spool"
	"github.com/edgegw/edgegw/gateway/topics"
)

// Direction says which way a topic rule carries messages.
type Direction string

// The directions of a topic rule (mosquitto's topic directions).
const (
	Out  Direction = "out"  // local -> upstream
	In   Direction = "in"   // upstream -> local
	Both Direction = "both" // both ways
)

func (d Direction) out() bool { return d == Out || d == Both }
func (d Direction) in() bool  { return d == In || d == Both }

// Rule is one topic rule, with the semantics of mosquitto's
// "topic <pattern> <direction> <qos> <local-prefix> <remote-prefix>":
// locally it matches LocalPrefix+Pattern, upstream RemotePrefix+Pattern,
// and a message crossing the bridge has one prefix swapped for the other.
type Rule struct {
	Pattern      string    // MQTT topic filter (may hold + and #)
	Direction    Direction // out | in | both
	QoS          int       // 0..2: upstream publish QoS cap (out), subscription QoS (in)
	LocalPrefix  string    // prepended to Pattern locally
	RemotePrefix string    // prepended to Pattern upstream
	// MaxAge (out): a message not delivered within this long of its
	// arrival is dropped from the spool, counted as expired, never sent
	// (0: no limit; an MQTT 5 message expiry applies either way, the
	// earlier of the two wins). See lanes.go.
	MaxAge time.Duration
	// Priority (out): the spool lane, "high", "normal" (default) or
	// "bulk". high is always sent first, bulk last (lanes.go).
	Priority string
}

// TLSConfig is the client side TLS of the uplink, used for tls://, ssl://
// and wss:// addresses.
type TLSConfig struct {
	CA                 string // PEM CA bundle file; "" = system roots
	Cert               string // client certificate file (mTLS, e.g. AWS IoT)
	Key                string // client key file
	ServerName         string // overrides the host name checked in the server certificate
	InsecureSkipVerify bool   // never in production
}

// Config is one bridge; the fields mirror the keys of a `bridges:` entry.
// Zero durations and sizes take the defaults listed on each field.
type Config struct {
	Name      string   // unique; names $SYS/bridge/<name>/state and the sink
	Addresses []string // tcp:// tls:// ssl:// ws:// wss://, tried in AddressOrder
	// AddressOrder is AddressOrderSpread (the default: an order of this
	// client id's own, addresses.go) or AddressOrderStrict (as listed).
	AddressOrder string
	ClientID     string // required unless CleanSession
	Username     string
	Password     string
	CleanSession bool

	KeepAlive      time.Duration // default 30s; whole seconds on the wire
	ConnectTimeout time.Duration // dial + TLS + CONNACK; default 10s
	WriteTimeout   time.Duration // deadline of every uplink write; default 5s
	AckTimeout     time.Duration // ack watchdog; default 20s
	// MaxInflight caps the unacknowledged upstream publishes. The default,
	// MaxInflightAuto (0), sizes them by the link: bytes in flight against
	// twice the bandwidth-delay product measured from ack round trips
	// (window.go), at most 8192 publishes and 16 MiB.
	MaxInflight int
	// MaxInflightQoS2 bounds the QoS 2 flows among them (PUBLISH sent,
	// PUBCOMP not yet received); default 20, never more than MaxInflight.
	// A broker holds a receive quota for each until the flow ends, and
	// over MQTT 3.1.1 its refusal of one more is invisible: mosquitto
	// answers a plain PUBREC and discards the message (its default quota,
	// max_inflight_messages, is 20).
	MaxInflightQoS2 int
	// Drain is how the spool drains: DrainFIFO (default) or
	// DrainLiveFirst; BacklogShare is the backlog's share of the send
	// window with live-first, in (0, 1] (default DefaultBacklogShare).
	Drain        string
	BacklogShare float64
	// RateLimit caps the bytes written to the uplink per second (token
	// bucket; 0: none). BudgetBytes per BudgetPeriod caps them per period:
	// once used, only the high lane is sent until the next period (0:
	// none). See budget.go.
	RateLimit    int64
	BudgetBytes  int64
	BudgetPeriod time.Duration
	ReconnectMin time.Duration // default 1s
	ReconnectMax time.Duration // default 60s

	// NoBridgeFlag sends plain MQTT 3.1.1 (protocol level 4) in CONNECT
	// instead of level 0x84, the "bridge" flag mosquitto (try_private)
	// and EMQX understand: with it the upstream broker never echoes our
	// own publishes back to us. A broker that refuses 0x84 with
	// "unacceptable protocol version" is retried with 4 automatically.
	NoBridgeFlag bool
	// BridgeFlag is BridgeFlagAuto (the default: the flag, and plain 3.1.1
	// to an address that refuses it), BridgeFlagAlways or BridgeFlagNever
	// (NoBridgeFlag). See upstream.go.
	BridgeFlag string

	// UpstreamMaxQoS is the highest QoS sent upstream, 1 or 2 (default 2);
	// over MQTT 5 at most the CONNACK's Maximum QoS. QoSNotGranted says
	// what happens to a message a rule sends at a higher QoS: QoSDowngrade
	// (the default) or QoSHold. See upstream.go.
	UpstreamMaxQoS int
	QoSNotGranted  string

	// Protocol is the uplink's MQTT version: "3.1.1" (the default), "5",
	// or "auto": 5, and 3.1.1 from the first CONNACK that refuses version
	// 5 until the bridge restarts. Over MQTT 5 the broker's Receive
	// Maximum bounds the QoS 1/2 publishes in flight (MaxInflightQoS2 is
	// not used) and its refusals are seen (uplinkengine.go).
	Protocol string

	// MaxPacketSize is the largest MQTT packet the cloud broker takes, in
	// bytes, fixed header included (0: no limit known). A message whose
	// PUBLISH would be larger is dropped by the sender, counted as 0x95
	// packet too large, never sent: over MQTT 3.1.1 a broker cannot refuse
	// one message, it closes the connection (mosquitto's max_packet_size),
	// and the bridge would send the same message first on every reconnect.
	// Over MQTT 5 the smaller of this and the CONNACK's Maximum Packet Size
	// applies.
	MaxPacketSize int

	TLS TLSConfig

	SpoolDir          string        // durable spool directory; "" = a temporary, non-durable one
	SpoolMaxBytes     int64         // default 256 MiB
	SpoolSync         string        // always | batch | none; default batch
	SpoolSyncInterval time.Duration // group commit window; default 20ms

	Topics []Rule
}

// Defaults of Config fields left zero.
const (
	DefaultKeepAlive      = 30 * time.Second
	DefaultConnectTimeout = 10 * time.Second
	DefaultWriteTimeout   = 5 * time.Second
	DefaultAckTimeout     = 20 * time.Second
	// MaxInflightAuto is MaxInflight sized by the link, the default.
	MaxInflightAuto = 0
	// DefaultMaxInflightQoS2 is mosquitto's default per-client quota of
	// incoming QoS 2 flows (max_inflight_messages 20).
	DefaultMaxInflightQoS2 = 20
	DefaultReconnectMin    = time.Second
	DefaultReconnectMax    = 60 * time.Second
	// MaxPacketSizeMQTT is the largest MQTT packet there is: a remaining
	// length of 268,435,455 (four bytes of variable byte integer) after a
	// fixed header of 5 bytes.
	MaxPacketSizeMQTT = 268435455 + 5
	// MinMaxPacketSize is the smallest MaxPacketSize taken: a limit below
	// it would drop nearly every message, and is more likely a size
	// missing its unit than a broker's limit.
	MinMaxPacketSize = 64
)

func (c *Config) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.KeepAlive, DefaultKeepAlive)
	def(&c.ConnectTimeout, DefaultConnectTimeout)
	def(&c.WriteTimeout, DefaultWriteTimeout)
	def(&c.AckTimeout, DefaultAckTimeout)
	def(&c.ReconnectMin, DefaultReconnectMin)
	def(&c.ReconnectMax, DefaultReconnectMax)
	def(&c.SpoolSyncInterval, spool.DefaultSyncInterval)
	if c.MaxInflightQoS2 == 0 {
		c.MaxInflightQoS2 = DefaultMaxInflightQoS2
	}
	if c.SpoolMaxBytes == 0 {
		c.SpoolMaxBytes = spool.DefaultMaxBytes
	}
	if c.SpoolSync == "" {
		c.SpoolSync = spool.SyncBatch.String()
	}
	if c.Drain == "" {
		c.Drain = DrainFIFO
	}
	if c.AddressOrder == "" {
		c.AddressOrder = AddressOrderSpread
	}
	if c.BridgeFlag == "" {
		c.BridgeFlag = BridgeFlagAuto
		if c.NoBridgeFlag {
			c.BridgeFlag = BridgeFlagNever
		}
	}
	if c.UpstreamMaxQoS == 0 {
		c.UpstreamMaxQoS = 2
	}
	if c.QoSNotGranted == "" {
		c.QoSNotGranted = QoSDowngrade
	}
	if c.BacklogShare == 0 {
		c.BacklogShare = DefaultBacklogShare
	}
}

// compiled is a validated Config in the form the bridge uses.
type compiled struct {
	addrs    []*url.URL
	tls      *tls.Config
	sync     spool.SyncMode
	proto    string // Protocol311, Protocol5 or ProtocolAuto
	out, in  []rule
	stateTop string
}

// rule is a Rule with its two filters precomputed.
type rule struct {
	Rule
	localFilter, remoteFilter string
	lane                      spool.Lane
}

var schemes = map[string]string{"tcp": "1883", "mqtt": "1883", "tls": "8883", "ssl": "8883", "mqtts": "8883", "ws": "", "wss": ""}

func (c Config) compile() (*compiled, error) {
	var errs []error
	bad := func(key, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, a...)))
	}
	out := &compiled{}
	if c.Name == "" {
		bad("name", "is required")
	} else if strings.ContainsAny(c.Name, "/+#\x00") {
		bad("name", "%q must not contain '/', '+', '#' or NUL", c.Name)
	}
	out.stateTop = "$SYS/bridge/" + c.Name + "/state"
	if c.Drain != DrainFIFO && c.Drain != DrainLiveFirst {
		bad("drain", "%q: must be %s or %s", c.Drain, DrainFIFO, DrainLiveFirst)
	}
	if c.RateLimit < 0 {
		bad("rate_limit", "%d: must not be negative", c.RateLimit)
	}
	if c.BudgetBytes < 0 || (c.BudgetBytes > 0 && c.BudgetPeriod <= 0) {
		bad("budget", "%d bytes per %s: want a size per a period > 0", c.BudgetBytes, c.BudgetPeriod)
	}
	if c.BacklogShare <= 0 || c.BacklogShare > 1 {
		bad("backlog_share", "%v: must be in (0, 1]", c.BacklogShare)
	}
	if len(c.Addresses) == 0 {
		bad("addresses", "at least one address is required")
	}
	needTLS := false
	for i, a := range c.Addresses {
		u, err := url.Parse(a)
		key := fmt.Sprintf("addresses[%d]", i)
		if err != nil {
			bad(key, "%v", err)
			continue
		}
		port, ok := schemes[u.Scheme]
		if !ok {
			bad(key, "%q: scheme must be tcp, tls, ssl, ws or wss", a)
			continue
		}
		if u.Hostname() == "" {
			bad(key, "%q: no host", a)
			continue
		}
		if u.Port() == "" && port != "" {
			u.Host = net.JoinHostPort(u.Hostname(), port)
		}
		if u.Scheme == "tls" || u.Scheme == "ssl" || u.Scheme == "mqtts" || u.Scheme == "wss" {
			needTLS = true
		}
		out.addrs = append(out.addrs, u)
	}
	if c.BridgeFlag != BridgeFlagAuto && c.BridgeFlag != BridgeFlagAlways && c.BridgeFlag != BridgeFlagNever {
		bad("bridge_flag", "%q: must be %s, %s or %s", c.BridgeFlag, BridgeFlagAuto, BridgeFlagAlways, BridgeFlagNever)
	}
	if c.UpstreamMaxQoS < 1 || c.UpstreamMaxQoS > 2 {
		bad("upstream_max_qos", "%d: must be 1 or 2", c.UpstreamMaxQoS)
	}
	if c.QoSNotGranted != QoSDowngrade && c.QoSNotGranted != QoSHold {
		bad("qos_not_granted", "%q: must be %s or %s", c.QoSNotGranted, QoSDowngrade, QoSHold)
	}
	switch c.AddressOrder {
	case AddressOrderSpread:
		out.addrs = spreadOrder(out.addrs, c.ClientID)
	case AddressOrderStrict:
	default:
		bad("address_order", "%q: must be %s or %s", c.AddressOrder, AddressOrderSpread, AddressOrderStrict)
	}
	if !c.CleanSession && c.ClientID == "" {
		bad("client_id", "is required with clean_session: false (the upstream session is keyed by it)")
	}
	for _, d := range []struct {
		key string
		v   time.Duration
	}{{"keepalive", c.KeepAlive}, {"connect_timeout", c.ConnectTimeout}, {"write_timeout", c.WriteTimeout},
		{"ack_timeout", c.AckTimeout}, {"reconnect_min", c.ReconnectMin}, {"reconnect_max", c.ReconnectMax}} {
		if d.v < 0 {
			bad(d.key, "must not be negative")
		}
	}
	if c.KeepAlive > 0 && c.KeepAlive < time.Second {
		bad("keepalive", "%s: at least 1s (MQTT counts whole seconds)", c.KeepAlive)
	}
	if c.ReconnectMax < c.ReconnectMin {
		bad("reconnect_max", "%s is below reconnect_min %s", c.ReconnectMax, c.ReconnectMin)
	}
	if c.MaxInflight < 0 || c.MaxInflight > 65535 {
		bad("max_inflight", "%d: must be 1..65535, or 0 for auto", c.MaxInflight)
	}
	if p, err := parseProtocol(c.Protocol); err != nil {
		bad("protocol", "%v", err)
	} else {
		out.proto = p
	}
	if c.MaxInflightQoS2 < 1 || c.MaxInflightQoS2 > 65535 {
		bad("max_inflight_qos2", "%d: must be 1..65535", c.MaxInflightQoS2)
	}
	if c.MaxPacketSize != 0 && (c.MaxPacketSize < MinMaxPacketSize || c.MaxPacketSize > MaxPacketSizeMQTT) {
		bad("max_packet_size", "%d: must be 0 (no limit) or %d..%d bytes", c.MaxPacketSize, MinMaxPacketSize, MaxPacketSizeMQTT)
	}
	if c.SpoolMaxBytes < 0 {
		bad("spool.max_bytes", "must not be negative")
	}
	if m, err := spool.ParseSyncMode(c.SpoolSync); err != nil {
		bad("spool.sync", "%v", err)
	} else {
		out.sync = m
	}
	for i, r := range c.Topics {
		key := fmt.Sprintf("topics[%d]", i)
		if r.Direction != Out && r.Direction != In && r.Direction != Both {
			bad(key+".direction", "%q: must be out, in or both", r.Direction)
		}
		if r.QoS < 0 || r.QoS > 2 {
			bad(key+".qos", "%d: must be 0, 1 or 2", r.QoS)
		}
		if strings.ContainsAny(r.LocalPrefix, "+#") {
			bad(key+".local_prefix", "%q must not contain wildcards", r.LocalPrefix)
		}
		if strings.ContainsAny(r.RemotePrefix, "+#") {
			bad(key+".remote_prefix", "%q must not contain wildcards", r.RemotePrefix)
		}
		if r.MaxAge < 0 {
			bad(key+".max_age", "%s: must not be negative", r.MaxAge)
		}
		lane, err := spool.ParseLane(r.Priority)
		if err != nil {
			bad(key+".priority", "%v", err)
		}
		cr := rule{Rule: r, localFilter: r.LocalPrefix + r.Pattern, remoteFilter: r.RemotePrefix + r.Pattern, lane: lane}
		if r.Pattern == "" {
			bad(key+".pattern", "is required")
		} else {
			if err := topics.ValidFilter(cr.localFilter); err != nil {
				bad(key+".pattern", "local filter %q: %v", cr.localFilter, err)
			}
			if err := topics.ValidFilter(cr.remoteFilter); err != nil {
				bad(key+".pattern", "remote filter %q: %v", cr.remoteFilter, err)
			}
		}
		if r.Direction.out() {
			out.out = append(out.out, cr)
		}
		if r.Direction.in() {
			out.in = append(out.in, cr)
		}
	}
	if len(c.Topics) == 0 {
		bad("topics", "at least one topic rule is required")
	}
	if needTLS || c.TLS != (TLSConfig{}) {
		t, err := c.TLS.build()
		if err != nil {
			bad("tls", "%v", err)
		}
		out.tls = t
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("bridge %q: %w", c.Name, err)
	}
	return out, nil
}

// build loads the files named by t.
func (t TLSConfig) build() (*tls.Config, error) {
	cfg := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         t.ServerName,
		InsecureSkipVerify: t.InsecureSkipVerify, // #nosec G402 -- operator's explicit choice
	}
	if t.CA != "" {
		pem, err := os.ReadFile(t.CA)
		if err != nil {
			return nil, fmt.Errorf("ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("ca: %s holds no PEM certificate", t.CA)
		}
		cfg.RootCAs = pool
	}
	if (t.Cert == "") != (t.Key == "") {
		return nil, errors.New("cert and key must be given together")
	}
	if t.Cert != "" {
		pair, err := tls.LoadX509KeyPair(t.Cert, t.Key)
		if err != nil {
			return nil, fmt.Errorf("cert/key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// outTopic maps a local topic to its upstream topic and QoS through the
// first out rule that matches it.
func (c *compiled) outTopic(local string, qos byte) (string, byte, bool) {
	if r := c.outRule(local); r != nil {
		return r.RemotePrefix + local[len(r.LocalPrefix):], min(qos, byte(r.QoS)), true
	}
	return "", 0, false
}

// outRule returns the first out rule matching local, or nil.
func (c *compiled) outRule(local string) *rule {
	for i := range c.out {
		if r := &c.out[i]; strings.HasPrefix(local, r.LocalPrefix) && topics.MatchFilter(r.localFilter, local) {
			return r
		}
	}
	return nil
}

// inTopic maps an upstream topic to its local topic through the first in
// rule that matches it.
func (c *compiled) inTopic(remote string) (string, bool) {
	for _, r := range c.in {
		if strings.HasPrefix(remote, r.RemotePrefix) && topics.MatchFilter(r.remoteFilter, remote) {
			return r.LocalPrefix + remote[len(r.RemotePrefix):], true
		}
	}
	return "", false
}

// subscriptions is the upstream SUBSCRIBE of the in rules (highest QoS per
// filter).
func (c *compiled) subscriptions() map[string]byte {
	if len(c.in) == 0 {
		return nil
	}
	m := make(map[string]byte, len(c.in))
	for _, r := range c.in {
		if q, ok := m[r.remoteFilter]; !ok || byte(r.QoS) > q {
			m[r.remoteFilter] = byte(r.QoS)
		}
	}
	return m
}
