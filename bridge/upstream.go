package bridge

// What the upstream granted, learned at each connection, and what the
// bridge does about it: the bridge flag (3.1.1), and the highest QoS it
// may send.
//
// The bridge flag (protocol level 0x84 in CONNECT; mosquitto's
// try_private, EMQX) keeps a broker from echoing the bridge's own
// publishes back. Brokers that do not know it (NATS, most cloud brokers)
// refuse the CONNECT with "unacceptable protocol version". With
// bridge_flag auto the bridge then connects to that address with plain
// 3.1.1, and keeps doing so for that address until it restarts, while
// still trying the flag on the others; always makes the refusal a connect
// failure; never sends plain 3.1.1 everywhere.
//
// Maximum QoS. Cloud brokers often take QoS 1 at most (AWS IoT Core,
// Azure IoT Hub, mosquitto with max_qos 1); a QoS 2 PUBLISH to one is a
// protocol error that ends the connection (MQTT 5 announces its Maximum
// QoS in CONNACK [MQTT-3.2.2-11]; a 3.1.1 broker just closes it). The
// most the bridge sends is upstream_max_qos, and over MQTT 5 at most the
// CONNACK's Maximum QoS. A message its rule sends at a higher QoS is
// never dropped for it: qos_not_granted downgrade (the default) sends it
// at the granted QoS (2 -> 1: at least once, a reconnect may deliver a
// copy), counted; hold keeps it and everything behind it in the spool,
// unsent, says so at ERROR and on the status page, until the config or
// the upstream changes.

import (
	"context"
	"fmt"

	"github.com/edgegw/edgegw/bridge/spool"
)

// The values of Config.BridgeFlag.
const (
	BridgeFlagAuto   = "auto"   // try it; plain 3.1.1 to an address that refuses it (the default)
	BridgeFlagAlways = "always" // a refusal is a connect failure
	BridgeFlagNever  = "never"  // plain 3.1.1 (protocol level 4)
)

// The values of Config.QoSNotGranted.
const (
	QoSDowngrade = "downgrade" // send at the granted QoS (2 -> 1: at least once), counted
	QoSHold      = "hold"      // keep in the spool, unsent, and say so
)

// Upstream is what the upstream of the current (or last) connection
// granted or showed.
type Upstream struct {
	Protocol string // "3.1.1" or "5"
	// BridgeFlag: 3.1.1 with the bridge flag (protocol level 0x84), which
	// the upstream took. BridgeFlagRefused: this address refused it
	// (bridge_flag auto), so plain 3.1.1 is used with it.
	BridgeFlag, BridgeFlagRefused bool
	MaxQoS                        byte // the highest QoS sent: upstream_max_qos, over MQTT 5 at most the CONNACK's Maximum QoS
	RetainAvailable               bool // MQTT 5: the upstream takes retained messages (3.1.1: assumed)
	ReceiveMaximum                int  // MQTT 5: its Receive Maximum (65535 when not announced); 3.1.1: 0, unknown
	MaxPacketSize                 int  // MQTT 5: its Maximum Packet Size (0: none announced, or 3.1.1)
	// QoS2Window: 3.1.1, the QoS 2 messages in flight the upstream showed
	// it takes, learned from its closes (bridge/session/quota.go), when
	// below max_inflight_qos2; 0: none learned.
	QoS2Window int
}

// flagLevel is the protocol level a 3.1.1 CONNECT to u carries: 0x84 with
// the bridge flag, 4 without. Owner goroutine only.
func (b *Bridge) flagLevel(u string) uint {
	if b.cfg.BridgeFlag == BridgeFlagNever || b.flagRefused[u] {
		return 4
	}
	return 0x84
}

// refusedFlag handles an upstream's refusal of the bridge flag: false
// when bridge_flag is always (the attempt fails); otherwise the address
// is remembered as one without it. Owner goroutine only.
func (b *Bridge) refusedFlag(u string) bool {
	if b.cfg.BridgeFlag == BridgeFlagAlways {
		return false
	}
	if b.flagRefused == nil {
		b.flagRefused = map[string]bool{}
	}
	b.flagRefused[u] = true
	b.log.Info("upstream refuses the bridge protocol flag; using plain MQTT 3.1.1 with this address until the bridge restarts", "address", u)
	return true
}

// maxQoS is the highest QoS the bridge sends on a connection whose
// upstream announced granted (2 when it announced nothing).
func (b *Bridge) maxQoS(granted byte) byte {
	return min(granted, byte(b.cfg.UpstreamMaxQoS))
}

// learned records what a new connection's upstream granted, and starts
// its sending afresh (a held message is tried again).
func (b *Bridge) learned(s *uplink, up Upstream) {
	s.maxQoS = up.MaxQoS
	b.upstream.Store(&up)
	b.qosHeld.Store(false)
}

// grantQoS applies qos_not_granted to m before it is sent on s: true with
// m at most the granted QoS; false when m is held (the sender then waits
// for the connection to end, sending nothing more).
func (s *uplink) grantQoS(ctx context.Context, m *spool.Message) bool {
	if m.QoS <= s.maxQoS {
		return true
	}
	b := s.b
	if b.cfg.QoSNotGranted == QoSDowngrade && s.maxQoS >= 1 {
		if !s.downgraded {
			s.downgraded = true
			b.log.Warn("the upstream grants a lower QoS than a topic rule asks: sending at the granted QoS (qos_not_granted: downgrade; QoS 1 is at least once, a reconnect may deliver a copy)",
				"address", s.addr.Redacted(), "rule_qos", m.QoS, "granted", s.maxQoS)
		}
		m.QoS = s.maxQoS
		b.qosDowngraded.Add(1)
		return true
	}
	b.qosHeld.Store(true)
	b.log.Error("the upstream grants a lower QoS than a topic rule asks: holding the message and those behind it in the spool, unsent (qos_not_granted: hold); "+
		"set qos_not_granted: downgrade, lower the rule's qos or use an upstream that grants it",
		"address", s.addr.Redacted(), "rule_qos", m.QoS, "granted", s.maxQoS, "topic", m.Topic)
	<-ctx.Done()
	return false
}

// qosPolicyText says, for Stats, what happens to a message above the
// granted QoS.
func (b *Bridge) qosPolicyText() string {
	return fmt.Sprintf("%s (upstream_max_qos %d)", b.cfg.QoSNotGranted, b.cfg.UpstreamMaxQoS)
}
