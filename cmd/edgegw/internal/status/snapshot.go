package status

import (
	"fmt"
	"math"
	"os"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"

	"github.com/edgegw/edgegw/bridge"
	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/listeners"
)

// Schema is the version of the /status.json document. Fields are only
// added within a version; a field that changes meaning or goes away
// raises it (docs/status-page.md).
const Schema = 1

// Snapshot is the /status.json document and what the page renders.
type Snapshot struct {
	Schema        int          `json:"schema"`
	GeneratedAt   time.Time    `json:"generated_at"`
	Version       string       `json:"version"`
	StartedAt     time.Time    `json:"started_at"`
	UptimeSeconds int64        `json:"uptime_seconds"`
	Memory        Memory       `json:"memory"`
	Broker        Broker       `json:"broker"`
	Drops         []Drop       `json:"drops"`
	Bridges       []Bridge     `json:"bridges"`
	Listeners     []Listener   `json:"listeners"`
	SerialLinks   []SerialLink `json:"serial_links"`
}

// Memory is the gateway's memory against its budgets.
type Memory struct {
	QueuedBytes   int64 `json:"queued_bytes"`        // payloads held for local subscribers
	BudgetBytes   int64 `json:"memory_budget_bytes"` // limits.memory_budget
	GoTotalBytes  int64 `json:"go_total_bytes"`      // all memory mapped by the Go runtime
	GoLimitBytes  int64 `json:"go_limit_bytes"`      // the runtime's soft limit (limits.memory_limit); 0 = none
	ResidentBytes int64 `json:"resident_bytes"`      // RSS from /proc/self/statm; 0 when unknown
}

// Broker is the local broker's totals.
type Broker struct {
	Connections          int64 `json:"connections"`
	SessionsConnected    int   `json:"sessions_connected"`
	SessionsDisconnected int   `json:"sessions_disconnected"`
	QueuedMessages       int64 `json:"queued_messages"`
	Inflight             int64 `json:"inflight"`
	Retained             int   `json:"retained"`
	Subscriptions        int   `json:"subscriptions"`
	MessagesReceived     int64 `json:"messages_received"`
	MessagesSent         int64 `json:"messages_sent"`
	SlowConsumers        int64 `json:"slow_consumers"`
	AuthFailures         int64 `json:"auth_failures"`
}

// Drop is a count of messages not delivered, by reason; spool drops are
// named "bridge <name>: spool full".
type Drop struct {
	Reason string `json:"reason"`
	Count  int64  `json:"count"`
}

// Bridge is one uplink.
type Bridge struct {
	Name          string    `json:"name"`
	State         string    `json:"state"` // connected | disconnected
	Since         time.Time `json:"since"`
	LastError     string    `json:"last_error"`      // as the bridge reported it
	LastErrorText string    `json:"last_error_text"` // the same in words
	Address       string    `json:"address"`         // of the current or last connection (password redacted)
	Addresses     []string  `json:"addresses"`       // configured, in the order tried (passwords redacted)

	Inflight        int64  `json:"inflight"`
	BacklogMessages int64  `json:"backlog_messages"`
	BacklogBytes    int64  `json:"backlog_bytes"`
	SpoolDropped    uint64 `json:"spool_dropped"`
	// Rates over the last minute of samples (null until two samples exist).
	InRate    *float64 `json:"in_per_second"`    // messages into the spool
	DrainRate *float64 `json:"drain_per_second"` // messages acknowledged upstream
	// TimeToEmpty is the backlog over its net shrink rate; 0 when empty,
	// null when the backlog is not shrinking.
	TimeToEmpty *float64 `json:"time_to_empty_seconds"`
	// BacklogState is one of the Backlog* states ("" without a history);
	// BacklogNotDraining is the page's alarm.
	BacklogState string `json:"backlog_state"`

	Connects        uint64 `json:"connects"`
	Disconnects     uint64 `json:"disconnects"`
	ConnectFailures uint64 `json:"connect_failures"`
	WatchdogTrips   uint64 `json:"watchdog_trips"`
	WriteTimeouts   uint64 `json:"write_timeouts"`
	Sent            uint64 `json:"sent"`
	Resumed         uint64 `json:"resumed"`
	Acked           uint64 `json:"acked"`
	Received        uint64 `json:"received"`
	InboundFailed   uint64 `json:"inbound_failed"`
	AcceptFailed    uint64 `json:"accept_failed"`

	// Upstream is what the upstream of the current (or last) connection
	// granted (null before the first); UpstreamText says it in words.
	Upstream     *Upstream `json:"upstream"`
	UpstreamText string    `json:"upstream_text"`
	// QoSNotGranted is the policy for a message above the granted QoS
	// ("downgrade (upstream_max_qos 2)"); QoSDowngraded counts the
	// messages sent below their rule's QoS; QoSHeld: one is held, unsent.
	QoSNotGranted string `json:"qos_not_granted"`
	QoSDowngraded uint64 `json:"qos_downgraded"`
	QoSHeld       bool   `json:"qos_held"`
}

// Upstream is what a bridge's upstream granted or showed.
type Upstream struct {
	Protocol          string `json:"protocol"`            // 3.1.1 | 5
	BridgeFlag        bool   `json:"bridge_flag"`         // 3.1.1 with the bridge flag (protocol level 0x84)
	BridgeFlagRefused bool   `json:"bridge_flag_refused"` // this address refused it: plain 3.1.1
	MaxQoS            int    `json:"max_qos"`             // the highest QoS sent
	RetainAvailable   bool   `json:"retain_available"`
	ReceiveMaximum    int    `json:"receive_maximum"`     // MQTT 5; 0 over 3.1.1 (not announced)
	MaxPacketSize     int    `json:"maximum_packet_size"` // MQTT 5; 0: none announced
	QoS2Window        int    `json:"qos2_window"`         // MQTT 3.1.1: the QoS 2 window learned from the upstream's closes; 0: none
}

// Listener is one configured listener and its connected clients.
type Listener struct {
	Name    string   `json:"name"`
	Type    string   `json:"type"`    // tcp | websocket | serial
	Address string   `json:"address"` // host:port, or the serial device
	TLS     bool     `json:"tls"`
	Clients []Client `json:"clients"`
}

// Client is one connected client.
type Client struct {
	ClientID string    `json:"client_id"`
	Username string    `json:"username"`
	Remote   string    `json:"remote"`
	Protocol string    `json:"protocol"` // 3.1 | 3.1.1 | 5.0
	Since    time.Time `json:"connected_since"`
	Queued   int       `json:"queued_messages"`
	Inflight int       `json:"inflight"`
	Slow     bool      `json:"slow_consumer"`
}

// SerialLink is one serial listener's device.
type SerialLink struct {
	Listener     string           `json:"listener"`
	Device       string           `json:"device"`
	Baud         int              `json:"baud"`
	Framing      string           `json:"framing"`
	State        string           `json:"state"` // opening | open | waiting | stopped
	Opens        uint64           `json:"opens"`
	OpenFailures uint64           `json:"open_failures"`
	Lost         uint64           `json:"lost"`
	LastOpen     *time.Time       `json:"last_open"` // null: never opened
	FramesGood   uint64           `json:"frames_good"`
	FramesBad    map[string]int64 `json:"frames_corrupt"` // by kind: crc, cobs, oversize, short
	Connections  uint64           `json:"connections"`    // logical MQTT connections served
}

// ListenerInfo is a listener as configured (what the page may show of it:
// no certificate or key paths).
type ListenerInfo struct {
	Name, Type, Address string
	TLS                 bool
}

// Sources are the running parts the page reads. Every read is a snapshot
// under the parts' own locks or atomics: nothing on the message path.
type Sources struct {
	Version      string
	Started      time.Time
	MemoryBudget int64 // limits.memory_budget
	Gateway      *gateway.Server
	Bridges      []*bridge.Bridge
	Serials      []*listeners.Serial
	Listeners    []ListenerInfo
}

// bridgeOf is one bridge's part of the document; h supplies the rates and
// the backlog state (nil: none).
func bridgeOf(name string, addresses []string, st bridge.Stats, now time.Time, h *History) Bridge {
	br := Bridge{Name: name, State: st.State.String(), Since: st.Since.UTC(),
		LastError: st.LastError, LastErrorText: explain(st.LastError),
		Address: st.Address, Addresses: addresses,
		Inflight: st.InFlight, BacklogMessages: st.SpoolMessages, BacklogBytes: st.SpoolBytes,
		SpoolDropped: st.SpoolDropped,
		Connects:     st.Connects, Disconnects: st.Disconnects, ConnectFailures: st.ConnectFailures,
		WatchdogTrips: st.WatchdogTrips, WriteTimeouts: st.WriteTimeouts, Sent: st.Sent,
		Resumed: st.Resumed, Acked: st.Acked, Received: st.Received,
		InboundFailed: st.InboundFailed, AcceptFailed: st.AcceptFailed,
		QoSNotGranted: st.QoSPolicy, QoSDowngraded: st.QoSDowngraded, QoSHeld: st.QoSHeld}
	if u := st.Upstream; u.Protocol != "" {
		br.Upstream = &Upstream{Protocol: u.Protocol, BridgeFlag: u.BridgeFlag, BridgeFlagRefused: u.BridgeFlagRefused,
			MaxQoS: int(u.MaxQoS), RetainAvailable: u.RetainAvailable, ReceiveMaximum: u.ReceiveMaximum, MaxPacketSize: u.MaxPacketSize, QoS2Window: u.QoS2Window}
		br.UpstreamText = upstreamText(*br.Upstream, st.QoSHeld)
	}
	if h != nil {
		r := h.rates(name, sampleOf(now, st), st.State == bridge.Connected)
		br.InRate, br.DrainRate, br.TimeToEmpty, br.BacklogState = r.in, r.out, r.empty, r.state
	}
	return br
}

// upstreamText says what an upstream granted, for the page.
func upstreamText(u Upstream, held bool) string {
	var b strings.Builder
	b.WriteString("MQTT " + u.Protocol)
	switch {
	case u.Protocol != "3.1.1":
	case u.BridgeFlag:
		b.WriteString(" with the bridge flag")
	case u.BridgeFlagRefused:
		b.WriteString(" without the bridge flag (refused by this broker)")
	default:
		b.WriteString(" without the bridge flag")
	}
	fmt.Fprintf(&b, " · max QoS %d", u.MaxQoS)
	if u.QoS2Window > 0 {
		fmt.Fprintf(&b, " · takes only %d QoS 2 messages in flight (learned; set max_inflight_qos2)", u.QoS2Window)
	}
	if held {
		b.WriteString(" (a message above it is HELD, unsent)")
	}
	if u.Protocol == "5" {
		if u.RetainAvailable {
			b.WriteString(" · retain available")
		} else {
			b.WriteString(" · no retain")
		}
		fmt.Fprintf(&b, " · receive maximum %d", u.ReceiveMaximum)
		if u.MaxPacketSize > 0 {
			b.WriteString(" · maximum packet size " + formatBytes(int64(u.MaxPacketSize)))
		}
	}
	return b.String()
}

// snapshot builds the document; h supplies the rates (nil: none).
func (src *Sources) snapshot(now time.Time, h *History) Snapshot {
	s := Snapshot{Schema: Schema, GeneratedAt: now.UTC(), Version: src.Version,
		StartedAt: src.Started.UTC(), UptimeSeconds: int64(now.Sub(src.Started) / time.Second),
		Drops: []Drop{}, Bridges: []Bridge{}, Listeners: []Listener{}, SerialLinks: []SerialLink{}}
	s.Memory = readMemory()
	s.Memory.BudgetBytes = src.MemoryBudget
	var clients []gateway.ClientInfo
	if gw := src.Gateway; gw != nil {
		st := gw.Stats()
		s.Memory.QueuedBytes = st.QueuedBytes
		s.Broker = Broker{Connections: st.Connections, SessionsConnected: st.SessionsConnected,
			SessionsDisconnected: st.SessionsDisconnected, QueuedMessages: st.QueuedMessages,
			Inflight: st.Inflight, Retained: st.Retained, Subscriptions: st.Subscriptions,
			MessagesReceived: st.MessagesReceived, MessagesSent: st.MessagesSent,
			SlowConsumers: st.SlowConsumers, AuthFailures: st.AuthFailures}
		for _, r := range sortedKeys(st.Drops) {
			s.Drops = append(s.Drops, Drop{Reason: r, Count: st.Drops[r]})
		}
		clients = gw.Clients()
	}
	for _, b := range src.Bridges {
		st := b.Stats()
		s.Bridges = append(s.Bridges, bridgeOf(b.Name(), b.Addresses(), st, now, h))
		s.Drops = append(s.Drops, Drop{Reason: "bridge " + b.Name() + ": spool full", Count: int64(st.SpoolDropped)})
	}
	for _, l := range src.Listeners {
		li := Listener{Name: l.Name, Type: l.Type, Address: l.Address, TLS: l.TLS, Clients: []Client{}}
		for _, c := range clients {
			if c.Listener == l.Name {
				li.Clients = append(li.Clients, Client{ClientID: c.ClientID, Username: c.Username,
					Remote: c.Remote, Protocol: protocolName(c.Protocol), Since: c.Since.UTC(),
					Queued: c.Queued, Inflight: c.Inflight, Slow: c.Slow})
			}
		}
		s.Listeners = append(s.Listeners, li)
	}
	for _, sr := range src.Serials {
		st := sr.Stats()
		sl := SerialLink{Listener: sr.Name, Device: sr.Device, Baud: sr.Baud, Framing: sr.Framing.String(),
			State: st.State, Opens: st.Opens, OpenFailures: st.Failures, Lost: st.Lost,
			FramesGood: st.Frames.Good, Connections: st.Logical,
			FramesBad: map[string]int64{"crc": int64(st.Frames.BadCRC), "cobs": int64(st.Frames.BadCOBS),
				"oversize": int64(st.Frames.Oversize), "short": int64(st.Frames.Short)}}
		if !st.LastOpen.IsZero() {
			t := st.LastOpen.UTC()
			sl.LastOpen = &t
		}
		s.SerialLinks = append(s.SerialLinks, sl)
	}
	return s
}

// protocolName is the MQTT protocol level in the name people use.
func protocolName(level int) string {
	switch level {
	case 3:
		return "3.1"
	case 4:
		return "3.1.1"
	case 5:
		return "5.0"
	}
	return strconv.Itoa(level)
}

// readMemory reads the Go runtime's total and limit (runtime/metrics: no
// stop-the-world) and the resident set size.
func readMemory() Memory {
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/gc/gomemlimit:bytes"}}
	metrics.Read(s)
	var m Memory
	if s[0].Value.Kind() == metrics.KindUint64 {
		m.GoTotalBytes = int64(s[0].Value.Uint64())
	}
	if s[1].Value.Kind() == metrics.KindUint64 {
		if v := s[1].Value.Uint64(); v < math.MaxInt64 {
			m.GoLimitBytes = int64(v)
		}
	}
	if b, err := os.ReadFile("/proc/self/statm"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 1 {
			pages, _ := strconv.ParseInt(f[1], 10, 64)
			m.ResidentBytes = pages * int64(os.Getpagesize())
		}
	}
	return m
}
