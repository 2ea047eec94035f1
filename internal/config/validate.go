package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// MQTT protocol bounds the configuration has to respect.
const (
	maxPacketSizeMQTT = 268435455                // 256 MiB - 1: largest remaining-length encoding
	maxKeepalive      = 65535 * time.Second      // keepalive is a uint16 of seconds
	maxSessionExpiry  = 4294967295 * time.Second // v5 session expiry is a uint32 of seconds
	maxInflightMQTT   = 65535                    // receive maximum / packet ids are uint16
	// minBridgePacketSize is the smallest bridges[].max_packet_size taken
	// (bridge.MinMaxPacketSize): a smaller limit would drop nearly every
	// message and is more likely a size missing its unit. The largest is
	// the largest packet: maxPacketSizeMQTT of remaining length after a
	// 5-byte fixed header (bridge.MaxPacketSizeMQTT).
	minBridgePacketSize = 64
	maxTopicLen         = 65535                   // UTF-8 string length prefix is uint16
	maxBaud             = 4000000                 // beyond what any UART here does
	minDuration         = time.Millisecond        // smaller timeouts are typos (10 = 10ns)
	bridgeNameChars     = "A-Z a-z 0-9 and - _ ." // for the error message
	listenerAddrHint    = "want host:port, e.g. 0.0.0.0:1883, 127.0.0.1:1883 or :1883"
	bridgeAddrHint      = "want scheme://host:port with scheme tcp, tls, ssl, ws or wss"
	durationUnitsHint   = "use a unit, e.g. 10s"
)

// Validate checks c and returns every problem found as Errors (nil when c is
// valid). It does not touch the filesystem or the network: files named by
// the config and serial devices may appear later (a missing serial device
// is retried by the gateway, not a config error).
func (c Config) Validate() error {
	var es Errors
	c.validateLog(&es)
	c.validateListeners(&es)
	c.validateLimits(&es)
	c.validateSessions(&es)
	c.validateAuth(&es)
	c.validatePersistence(&es)
	c.validateBridges(&es)
	c.validateMetrics(&es)
	return es.err()
}

func oneOf(es *Errors, key, val string, allowed ...string) {
	if !slices.Contains(allowed, val) {
		es.add(key, "invalid value %q (want %s)", val, strings.Join(allowed, " | "))
	}
}

func (c Config) validateLog(es *Errors) {
	oneOf(es, "log.level", c.Log.Level, LevelDebug, LevelInfo, LevelWarn, LevelError)
	oneOf(es, "log.format", c.Log.Format, FormatText, FormatJSON)
}

// checkHostPort reports whether s is a bindable/dialable host:port.
func checkHostPort(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		var ae *net.AddrError
		msg := err.Error()
		if errors.As(err, &ae) {
			msg = ae.Err
		}
		return fmt.Errorf("invalid address %q: %s", s, msg)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("invalid address %q: port %q is not a number in 0..65535", s, port)
	}
	if strings.ContainsAny(host, " \t/") {
		return fmt.Errorf("invalid address %q: bad host %q", s, host)
	}
	return nil
}

func positiveDuration(es *Errors, key string, d time.Duration) {
	switch {
	case d <= 0:
		es.add(key, "must be > 0 (got %s)", FormatDuration(d))
	case d < minDuration:
		es.add(key, "%s is too short to be meant (%s)", FormatDuration(d), durationUnitsHint)
	}
}

func positiveSize(es *Errors, key string, n int64) {
	if n <= 0 {
		es.add(key, "must be > 0 (got %d)", n)
	}
}

func (c Config) validateListeners(es *Errors) {
	if len(c.Listeners) == 0 {
		es.add("listeners", "at least one listener is needed (remove the key for the default tcp listener on 127.0.0.1:1883)")
	}
	names := map[string]int{}
	addrs := map[string]int{}
	devices := map[string]int{}
	for i, l := range c.Listeners {
		k := fmt.Sprintf("listeners[%d]", i)
		if l.Name == "" {
			es.add(k+".name", "is required")
		} else if j, dup := names[l.Name]; dup {
			es.add(k+".name", "duplicate listener name %q (also listeners[%d])", l.Name, j)
		} else {
			names[l.Name] = i
		}
		switch l.Type {
		case ListenerTCP, ListenerWebSocket:
			if err := checkHostPort(l.Address); err != nil {
				es.add(k+".address", "%v (%s)", err, listenerAddrHint)
			} else if j, dup := addrs[l.Address]; dup && !strings.HasSuffix(l.Address, ":0") {
				es.add(k+".address", "%q is already used by listeners[%d]", l.Address, j)
			} else {
				addrs[l.Address] = i
			}
			if l.Address != "" && l.Address == c.Metrics.Address {
				es.add(k+".address", "%q is also metrics.address", l.Address)
			}
			validateListenerTLS(es, k+".tls", l.TLS)
			if l.Type == ListenerWebSocket {
				if !strings.HasPrefix(l.Path, "/") {
					es.add(k+".path", "must start with / (got %q)", l.Path)
				}
				for j, o := range l.AllowedOrigins {
					if o == "*" {
						continue
					}
					if u, err := url.Parse(o); err != nil || u.Scheme == "" || u.Host == "" {
						es.add(fmt.Sprintf("%s.allowed_origins[%d]", k, j), "invalid origin %q (want scheme://host[:port], e.g. https://dash.example.com, or *)", o)
					}
				}
			} else {
				if l.Path != "" {
					es.add(k+".path", "applies only to websocket listeners")
				}
				if len(l.AllowedOrigins) > 0 {
					es.add(k+".allowed_origins", "applies only to websocket listeners")
				}
			}
			if l.Device != "" {
				es.add(k+".device", "applies only to serial listeners")
			}
		case ListenerSerial:
			if l.Device == "" {
				es.add(k+".device", "is required for a serial listener (e.g. /dev/ttyUSB0)")
			} else if j, dup := devices[l.Device]; dup {
				es.add(k+".device", "%q is already used by listeners[%d]", l.Device, j)
			} else {
				devices[l.Device] = i
			}
			if l.Baud <= 0 || l.Baud > maxBaud {
				es.add(k+".baud", "must be in 1..%d (got %d)", maxBaud, l.Baud)
			}
			oneOf(es, k+".framing", l.Framing, FramingCOBSCRC16, FramingRaw)
			positiveSize(es, k+".max_frame_size", l.MaxFrameSize)
			if l.Address != "" {
				es.add(k+".address", "does not apply to serial listeners (use device)")
			}
			if l.TLS != (ListenerTLS{}) {
				es.add(k+".tls", "does not apply to serial listeners")
			}
			if l.Path != "" || len(l.AllowedOrigins) > 0 {
				es.add(k, "path and allowed_origins apply only to websocket listeners")
			}
		default:
			es.add(k+".type", "invalid value %q (want tcp | websocket | serial)", l.Type)
		}
		if l.Type != ListenerSerial {
			if l.Baud != 0 || l.Framing != "" || l.MaxFrameSize != 0 {
				es.add(k, "baud, framing and max_frame_size apply only to serial listeners")
			}
		}
	}
}

func validateListenerTLS(es *Errors, k string, t ListenerTLS) {
	switch {
	case t.Cert != "" && t.Key == "":
		es.add(k+".key", "is required when tls.cert is set")
	case t.Cert == "" && t.Key != "":
		es.add(k+".cert", "is required when tls.key is set")
	}
	if t.Cert == "" && t.ClientCA != "" {
		es.add(k+".client_ca", "needs tls.cert and tls.key (mTLS is TLS)")
	}
	if t.UseCNAsUsername && t.ClientCA == "" {
		es.add(k+".use_cn_as_username", "needs tls.client_ca (no client certificate without mTLS)")
	}
}

func (c Config) validateLimits(es *Errors) {
	l := c.Limits
	if l.MaxConnections < 1 {
		es.add("limits.max_connections", "must be >= 1 (got %d)", l.MaxConnections)
	}
	if l.MaxPacketSize <= 0 || l.MaxPacketSize > maxPacketSizeMQTT {
		es.add("limits.max_packet_size", "must be in 1..%d bytes (got %d)", maxPacketSizeMQTT, l.MaxPacketSize)
	}
	positiveDuration(es, "limits.connect_timeout", l.ConnectTimeout)
	positiveDuration(es, "limits.write_timeout", l.WriteTimeout)
	positiveDuration(es, "limits.slow_subscriber_after", l.SlowSubscriberAfter)
	keepalive(es, "limits.keepalive_max", l.KeepaliveMax)
	keepalive(es, "limits.server_keepalive", l.ServerKeepalive)
	if l.MaxInflight < 1 || l.MaxInflight > maxInflightMQTT {
		es.add("limits.max_inflight", "must be in 1..%d (got %d)", maxInflightMQTT, l.MaxInflight)
	}
	if l.MaxTopicLevels < 1 || l.MaxTopicLevels > maxTopicLen/2+1 {
		es.add("limits.max_topic_levels", "must be in 1..%d (got %d)", maxTopicLen/2+1, l.MaxTopicLevels)
	}
	if l.MaxTopicLength < 1 || l.MaxTopicLength > maxTopicLen {
		es.add("limits.max_topic_length", "must be in 1..%d bytes (got %d)", maxTopicLen, l.MaxTopicLength)
	}
	if l.MaxSubscriptions < 1 {
		es.add("limits.max_subscriptions", "must be >= 1 (got %d)", l.MaxSubscriptions)
	}
	if l.MaxRetainedMessages < 1 {
		es.add("limits.max_retained_messages", "must be >= 1 (got %d)", l.MaxRetainedMessages)
	}
	positiveSize(es, "limits.max_retained_bytes", l.MaxRetainedBytes)
	if l.MaxQueuedMessages < 1 {
		es.add("limits.max_queued_messages", "must be >= 1 (got %d)", l.MaxQueuedMessages)
	}
	positiveSize(es, "limits.max_queued_bytes", l.MaxQueuedBytes)
	positiveSize(es, "limits.memory_budget", l.MemoryBudget)
	switch {
	case l.MemoryLimit < 0:
		es.add("limits.memory_limit", "must be >= 0 (0 = derived from memory_budget; got %d)", l.MemoryLimit)
	case l.MemoryLimit > 0 && l.MemoryLimit < l.MemoryBudget:
		es.add("limits.memory_limit", "must be 0 (derived) or at least limits.memory_budget %s (got %s): the queued payloads alone may reach the budget",
			FormatSize(l.MemoryBudget), FormatSize(l.MemoryLimit))
	}
	if l.GCPercent != -1 && (l.GCPercent < minGCPercent || l.GCPercent > maxGCPercent) {
		es.add("limits.gc_percent", "must be -1 (off) or in %d..%d (got %d)", minGCPercent, maxGCPercent, l.GCPercent)
	}
}

// gc_percent bounds: below 10 the collector runs almost continuously;
// above 1000 the heap may grow to 11 times the live data.
const (
	minGCPercent = 10
	maxGCPercent = 1000
)

// keepalive checks a keepalive-like duration: 0 = off, else whole seconds
// up to 65535s.
func keepalive(es *Errors, key string, d time.Duration) {
	switch {
	case d < 0:
		es.add(key, "must be >= 0 (got %s)", FormatDuration(d))
	case d > maxKeepalive:
		es.add(key, "must be at most 65535s (got %s)", FormatDuration(d))
	case d%time.Second != 0:
		es.add(key, "must be whole seconds (got %s)", FormatDuration(d))
	}
}

func (c Config) validateSessions(es *Errors) {
	d := c.Sessions.MaxExpiry
	switch {
	case d < 0:
		es.add("sessions.max_expiry", "must be >= 0 (got %s)", FormatDuration(d))
	case d > maxSessionExpiry:
		es.add("sessions.max_expiry", "must be at most 4294967295s, about 136 years (got %s)", FormatDuration(d))
	}
}

func (c Config) validateAuth(es *Errors) {
	if c.Auth.AllowAnonymous || c.Auth.PasswordFile != "" {
		return
	}
	for _, l := range c.Listeners {
		if l.TLS.UseCNAsUsername {
			return
		}
	}
	es.add("auth.allow_anonymous", "is false but there is no auth.password_file and no listener with tls.use_cn_as_username: no client could connect")
}

func (c Config) validatePersistence(es *Errors) {
	p := c.Persistence
	oneOf(es, "persistence.sync", p.Sync, SyncAlways, SyncBatch, SyncNone)
	if p.Sync == SyncBatch {
		positiveDuration(es, "persistence.sync_interval", p.SyncInterval)
	} else if p.SyncInterval < 0 {
		es.add("persistence.sync_interval", "must be >= 0 (got %s)", FormatDuration(p.SyncInterval))
	}
}

func validBridgeName(s string) bool {
	if s == "" || s == "." || s == ".." {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

func (c Config) validateBridges(es *Errors) {
	names := map[string]int{}
	for i, b := range c.Bridges {
		k := fmt.Sprintf("bridges[%d]", i)
		switch {
		case b.Name == "":
			es.add(k+".name", "is required (it names the spool and $SYS/bridge/<name>/state)")
		case !validBridgeName(b.Name):
			es.add(k+".name", "invalid name %q (use %s)", b.Name, bridgeNameChars)
		default:
			if j, dup := names[b.Name]; dup {
				es.add(k+".name", "duplicate bridge name %q (also bridges[%d])", b.Name, j)
			} else {
				names[b.Name] = i
			}
		}
		if len(b.Addresses) == 0 {
			es.add(k+".addresses", "at least one address is needed (%s)", bridgeAddrHint)
		}
		secure := false
		for j, a := range b.Addresses {
			s, err := checkBridgeAddress(a)
			if err != nil {
				es.add(fmt.Sprintf("%s.addresses[%d]", k, j), "%v (%s)", err, bridgeAddrHint)
			}
			secure = secure || s
		}
		if b.ClientID == "" && !b.CleanSession {
			es.add(k+".client_id", "is required when clean_session is false") // [MQTT-3.1.3-7](3.1.1)
		}
		if len(b.ClientID) > 65535 || !utf8.ValidString(b.ClientID) {
			es.add(k+".client_id", "must be valid UTF-8 of at most 65535 bytes")
		}
		if b.Password != "" && b.Username == "" {
			es.add(k+".password", "needs a username (MQTT 3.1.1 sends no password without one)") // [MQTT-3.1.2-22](3.1.1)
		}
		if b.Keepalive < time.Second || b.Keepalive > maxKeepalive || b.Keepalive%time.Second != 0 {
			es.add(k+".keepalive", "must be whole seconds in 1s..65535s (got %s); it is how a half-open uplink is found", FormatDuration(b.Keepalive))
		}
		positiveDuration(es, k+".connect_timeout", b.ConnectTimeout)
		positiveDuration(es, k+".write_timeout", b.WriteTimeout)
		positiveDuration(es, k+".ack_timeout", b.AckTimeout)
		if b.MaxInflight < WindowAuto || b.MaxInflight > maxInflightMQTT {
			es.add(k+".max_inflight", "must be auto or in 1..%d (got %d)", maxInflightMQTT, b.MaxInflight)
		}
		switch b.Protocol {
		case "3.1.1", "5", "auto":
		default:
			es.add(k+".protocol", "must be 3.1.1, 5 or auto (got %q)", b.Protocol)
		}
		switch b.Engine {
		case "session", "paho": // paho: removed; preflight warns
		default:
			es.add(k+".engine", "must be session (got %q)", b.Engine)
		}
		if b.MaxInflightQoS2 < 1 || b.MaxInflightQoS2 > maxInflightMQTT {
			es.add(k+".max_inflight_qos2", "must be in 1..%d (got %d)", maxInflightMQTT, b.MaxInflightQoS2)
		}
		positiveDuration(es, k+".reconnect_min", b.ReconnectMin)
		positiveDuration(es, k+".reconnect_max", b.ReconnectMax)
		if b.ReconnectMin > 0 && b.ReconnectMax > 0 && b.ReconnectMin > b.ReconnectMax {
			es.add(k+".reconnect_min", "%s is greater than reconnect_max %s", FormatDuration(b.ReconnectMin), FormatDuration(b.ReconnectMax))
		}
		t := b.TLS
		switch {
		case t.Cert != "" && t.Key == "":
			es.add(k+".tls.key", "is required when tls.cert is set")
		case t.Cert == "" && t.Key != "":
			es.add(k+".tls.cert", "is required when tls.key is set")
		}
		if t != (BridgeTLS{}) && !secure && len(b.Addresses) > 0 {
			es.add(k+".tls", "is set but no address uses tls://, ssl:// or wss://")
		}
		positiveSize(es, k+".spool.max_bytes", b.Spool.MaxBytes)
		if b.Drain != "" { // "": the default, fifo
			oneOf(es, k+".drain", b.Drain, DrainFIFO, DrainLiveFirst)
		}
		if b.AddressOrder != "" { // "": the default, spread
			oneOf(es, k+".address_order", b.AddressOrder, AddressOrderSpread, AddressOrderStrict)
		}
		if b.BridgeFlag != "" { // "": the default, auto
			oneOf(es, k+".bridge_flag", b.BridgeFlag, BridgeFlagAuto, BridgeFlagAlways, BridgeFlagNever)
		}
		if b.QoSNotGranted != "" { // "": the default, downgrade
			oneOf(es, k+".qos_not_granted", b.QoSNotGranted, QoSDowngrade, QoSHold)
		}
		if b.UpstreamMaxQoS != 0 && (b.UpstreamMaxQoS < 1 || b.UpstreamMaxQoS > 2) { // 0: the default, 2
			es.add(k+".upstream_max_qos", "must be 1 or 2 (got %d)", b.UpstreamMaxQoS)
		}
		if b.RateLimit < 0 {
			es.add(k+".rate_limit", "must not be negative (got %d)", b.RateLimit)
		}
		if b.MaxPacketSize != 0 && (b.MaxPacketSize < minBridgePacketSize || b.MaxPacketSize > maxPacketSizeMQTT+5) {
			es.add(k+".max_packet_size", "must be 0 (no limit) or in %d..%d bytes, the cloud broker's limit (got %d)",
				minBridgePacketSize, maxPacketSizeMQTT+5, b.MaxPacketSize)
		}
		if b.Budget != "" {
			if _, _, err := ParseBudget(b.Budget); err != nil {
				es.add(k+".budget", "%v", err)
			}
		}
		if _, err := ParsePercent(b.BacklogShare); err != nil && b.BacklogShare != "" {
			es.add(k+".backlog_share", "%v", err)
		}
		if len(b.Topics) == 0 {
			es.add(k+".topics", "at least one topic rule is needed (e.g. pattern: \"sensors/#\", direction: out)")
		}
		for j, tp := range b.Topics {
			tk := fmt.Sprintf("%s.topics[%d]", k, j)
			if err := checkTopicFilter(tp.Pattern); err != nil {
				es.add(tk+".pattern", "%v", err)
			}
			oneOf(es, tk+".direction", tp.Direction, DirectionOut, DirectionIn, DirectionBoth)
			if tp.QoS < 0 || tp.QoS > 2 {
				es.add(tk+".qos", "must be 0, 1 or 2 (got %d)", tp.QoS)
			}
			if tp.Priority != "" { // "": the default, normal
				oneOf(es, tk+".priority", tp.Priority, PriorityHigh, PriorityNormal, PriorityBulk)
			}
			if tp.Priority != "" && tp.Priority != PriorityNormal && tp.Direction == DirectionIn {
				es.add(tk+".priority", "applies to messages going out; this rule is direction: in")
			}
			if tp.MaxAge < 0 {
				es.add(tk+".max_age", "must not be negative (got %s)", tp.MaxAge)
			} else if tp.MaxAge > 0 && tp.Direction == DirectionIn {
				es.add(tk+".max_age", "applies to messages going out; this rule is direction: in")
			}
			for _, p := range []struct{ key, val string }{{"local_prefix", tp.LocalPrefix}, {"remote_prefix", tp.RemotePrefix}} {
				if strings.ContainsAny(p.val, "+#\x00") {
					es.add(tk+"."+p.key, "must not contain +, # or NUL (got %q)", p.val)
				}
			}
		}
	}
}

// checkBridgeAddress validates an upstream URL and reports whether it uses TLS.
func checkBridgeAddress(a string) (secure bool, err error) {
	u, err := url.Parse(a)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return false, fmt.Errorf("invalid address %q", a)
	}
	switch u.Scheme {
	case "tcp", "ws":
	case "tls", "ssl", "wss":
		secure = true
	default:
		return false, fmt.Errorf("unsupported scheme %q in %q", u.Scheme, a)
	}
	if u.Port() == "" {
		return secure, fmt.Errorf("address %q has no port", a)
	}
	if err := checkHostPort(u.Host); err != nil {
		return secure, err
	}
	if u.Hostname() == "" {
		return secure, fmt.Errorf("address %q has no host", a)
	}
	if (u.Scheme == "tcp" || u.Scheme == "tls" || u.Scheme == "ssl") && u.Path != "" && u.Path != "/" {
		return secure, fmt.Errorf("address %q: a path applies only to ws:// and wss://", a)
	}
	return secure, nil
}

// checkTopicFilter applies the MQTT topic filter rules (5.0 and 3.1.1 §4.7).
func checkTopicFilter(f string) error {
	switch {
	case f == "":
		return fmt.Errorf("must not be empty") // [MQTT-4.7.3-1]
	case len(f) > maxTopicLen:
		return fmt.Errorf("longer than 65535 bytes") // [MQTT-4.7.3-3]
	case !utf8.ValidString(f) || strings.ContainsRune(f, 0):
		return fmt.Errorf("must be UTF-8 without NUL (got %q)", f) // [MQTT-1.5.4-1], [MQTT-4.7.3-2]
	}
	levels := strings.Split(f, "/")
	for i, lv := range levels {
		if strings.Contains(lv, "#") && (lv != "#" || i != len(levels)-1) {
			return fmt.Errorf("invalid pattern %q: # must be a whole level and the last one", f) // [MQTT-4.7.1-1], [MQTT-4.7.1-2](3.1.1)
		}
		if strings.Contains(lv, "+") && lv != "+" {
			return fmt.Errorf("invalid pattern %q: + must be a whole level", f) // [MQTT-4.7.1-2], [MQTT-4.7.1-3](3.1.1)
		}
	}
	return nil
}

func (c Config) validateMetrics(es *Errors) {
	if c.Metrics.BridgeDownAfter <= 0 {
		es.add("metrics.bridge_down_after", "must be > 0 (got %s)", c.Metrics.BridgeDownAfter)
	}
	if c.Metrics.Address == "" {
		return
	}
	if err := checkHostPort(c.Metrics.Address); err != nil {
		es.add("metrics.address", "%v (want host:port, e.g. 127.0.0.1:18830, or \"\" to disable)", err)
	}
}
