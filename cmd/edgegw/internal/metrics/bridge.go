package metrics

import (
	"strconv"
	"time"
)

// BridgeStatus is what /metrics and $SYS/bridge/<name>/... show of one
// bridge.
type BridgeStatus struct {
	Name            string
	Connected       bool
	LastError       string // why the uplink last went down or failed to come up
	Connects        int64
	Disconnects     int64
	ConnectFailures int64
	WatchdogTrips   int64
	WriteTimeouts   int64
	Inflight        int64
	Sent            int64
	Resumed         int64 // QoS 1/2 flows re-sent after a reconnect under their original packet id
	Acked           int64
	Received        int64
	InboundRefused  int64 // inbound messages the gateway refused (not acked upstream)
	Refused         int64 // local messages the spool could not keep (publisher not acked)
	// MQTT 5 uplinks: messages the upstream refused for good (dropped, by
	// reason: every reason a bridge drops for, zero included) and refusals
	// for now (the message is sent again).
	UpstreamDropped map[string]int64
	UpstreamRetried int64
	Upstream        *UpstreamStatus // what the current or last connection's upstream granted; nil before the first
	QoSDowngraded   int64           // messages sent below their rule's QoS (qos_not_granted: downgrade)
	QoSHeld         bool            // a message above the granted QoS is held, unsent (qos_not_granted: hold)
	Budget          *BudgetStatus   // nil without rate_limit and budget
	Spool           SpoolStatus
	Ledger          *Ledger // nil while the spool is not open
}

// UpstreamStatus is what a bridge's upstream granted or showed.
type UpstreamStatus struct {
	Protocol          string // "3.1.1" or "5"
	BridgeFlag        bool   // 3.1.1 with the bridge flag
	BridgeFlagRefused bool   // this address refused the bridge flag
	MaxQoS            int    // the highest QoS sent
	RetainAvailable   bool
	ReceiveMaximum    int // MQTT 5 only
	MaxPacketSize     int // MQTT 5 only; 0: none announced
	QoS2Window        int // MQTT 3.1.1 only: the QoS 2 window learned from the upstream's closes; 0: none
}

func hasUpstream(b BridgeStatus) bool  { return b.Upstream != nil }
func hasUpstream5(b BridgeStatus) bool { return b.Upstream != nil && b.Upstream.Protocol == "5" }
func hasUpstream311(b BridgeStatus) bool {
	return b.Upstream != nil && b.Upstream.Protocol == "3.1.1"
}

// BudgetStatus is a bridge's uplink byte budget (rate_limit, budget).
type BudgetStatus struct {
	Used       int64         // bytes written to the uplink in the current period (without a period budget: since start)
	Limit      int64         // bytes per period; 0: no period budget
	PeriodEnd  time.Time     // when the current period ends (normal and bulk wait for it once Used reaches Limit)
	Rate       int64         // rate_limit, bytes per second; 0: none
	RateWaited time.Duration // how long the sender waited for the rate limit, in all
}

// SpoolStatus is a bridge spool's part of BridgeStatus.
type SpoolStatus struct {
	Messages, Bytes, Dropped                                        int64
	CorruptTails, Skipped, DamagedBytes, Quarantined, EmptySegments int64 // damage found at open
	AckDamage, IDGap                                                int64
	NoSpace, BytesWritten, Syncs                                    int64 // since open
	CoveredCommits                                                  int64 // since open
}

// bridgeSeries is one per-bridge value, under its metric name and its
// $SYS/bridge/<name>/ topic: /metrics and $SYS are built from this one
// table, so they cannot drift apart. docs/metrics.md lists them all
// (TestMetricsDocumented in cmd/edgegw holds it to the binary).
type bridgeSeries struct {
	metric, help string
	counter      bool
	sys          string // topic below $SYS/bridge/<name>/
	val          func(b BridgeStatus) float64
	only         func(b BridgeStatus) bool // nil: every bridge has it
}

func hasBudget(b BridgeStatus) bool { return b.Budget != nil }
func hasPeriod(b BridgeStatus) bool { return b.Budget != nil && b.Budget.Limit > 0 }
func hasRate(b BridgeStatus) bool   { return b.Budget != nil && b.Budget.Rate > 0 }

var bridgeTable = []bridgeSeries{
	{"edgegw_bridge_up", "1 if the bridge's uplink is connected.", false, "",
		func(b BridgeStatus) float64 { return float64(boolInt(b.Connected)) }, nil},
	{"edgegw_bridge_connects_total", "Uplink connections established.", true, "connects",
		func(b BridgeStatus) float64 { return float64(b.Connects) }, nil},
	{"edgegw_bridge_disconnects_total", "Uplink connections lost.", true, "disconnects",
		func(b BridgeStatus) float64 { return float64(b.Disconnects) }, nil},
	{"edgegw_bridge_connect_failures_total", "Failed uplink connection attempts (dial, TLS, CONNECT or SUBSCRIBE).", true, "connect_failures",
		func(b BridgeStatus) float64 { return float64(b.ConnectFailures) }, nil},
	{"edgegw_bridge_watchdog_trips_total", "Uplinks torn down by the ack watchdog.", true, "watchdog_trips",
		func(b BridgeStatus) float64 { return float64(b.WatchdogTrips) }, nil},
	{"edgegw_bridge_write_timeouts_total", "Uplink writes that missed their deadline.", true, "write_timeouts",
		func(b BridgeStatus) float64 { return float64(b.WriteTimeouts) }, nil},
	{"edgegw_bridge_inflight_messages", "Upstream publishes awaiting acknowledgement.", false, "inflight",
		func(b BridgeStatus) float64 { return float64(b.Inflight) }, nil},
	{"edgegw_bridge_sent_total", "Messages published upstream (re-sends included).", true, "sent",
		func(b BridgeStatus) float64 { return float64(b.Sent) }, nil},
	{"edgegw_bridge_resumed_total", "QoS 1/2 flows re-sent after a reconnect under their original packet id.", true, "resumed",
		func(b BridgeStatus) float64 { return float64(b.Resumed) }, nil},
	{"edgegw_bridge_acked_total", "Upstream publishes acknowledged.", true, "acked",
		func(b BridgeStatus) float64 { return float64(b.Acked) }, nil},
	{"edgegw_bridge_received_total", "Messages received from upstream and accepted locally.", true, "received",
		func(b BridgeStatus) float64 { return float64(b.Received) }, nil},
	{"edgegw_bridge_inbound_refused_total", "Messages from upstream the local broker refused; not acknowledged upstream.", true, "inbound_refused",
		func(b BridgeStatus) float64 { return float64(b.InboundRefused) }, nil},
	{"edgegw_bridge_refused_total", "Local messages the bridge's spool could not keep; their publishers were not acknowledged.", true, "refused",
		func(b BridgeStatus) float64 { return float64(b.Refused) }, nil},
	{"edgegw_bridge_upstream_retried_total", "MQTT 5: publishes the upstream refused for now (0x97 quota exceeded, ...); the message stays and is sent again.", true, "upstream/retried",
		func(b BridgeStatus) float64 { return float64(b.UpstreamRetried) }, nil},
	{"edgegw_bridge_upstream_max_qos", "The highest QoS the bridge sends upstream: upstream_max_qos, over MQTT 5 at most the broker's Maximum QoS.", false, "upstream/max_qos",
		func(b BridgeStatus) float64 { return float64(b.Upstream.MaxQoS) }, hasUpstream},
	{"edgegw_bridge_upstream_retain_available", "1 if the upstream takes retained messages (MQTT 5 CONNACK; assumed over 3.1.1).", false, "upstream/retain_available",
		func(b BridgeStatus) float64 { return float64(boolInt(b.Upstream.RetainAvailable)) }, hasUpstream},
	{"edgegw_bridge_upstream_receive_maximum", "MQTT 5: the upstream's Receive Maximum, the QoS 1/2 publishes it takes at once.", false, "upstream/receive_maximum",
		func(b BridgeStatus) float64 { return float64(b.Upstream.ReceiveMaximum) }, hasUpstream5},
	{"edgegw_bridge_upstream_maximum_packet_size_bytes", "MQTT 5: the upstream's Maximum Packet Size (0: none announced).", false, "upstream/maximum_packet_size",
		func(b BridgeStatus) float64 { return float64(b.Upstream.MaxPacketSize) }, hasUpstream5},
	{"edgegw_bridge_upstream_qos2_window", "MQTT 3.1.1: the QoS 2 messages in flight the bridge sends at most, learned from an upstream that closed the connection over its quota (below max_inflight_qos2); 0: none learned.", false, "upstream/qos2_window",
		func(b BridgeStatus) float64 { return float64(b.Upstream.QoS2Window) }, hasUpstream311},
	{"edgegw_bridge_qos_downgraded_total", "Messages sent upstream at a lower QoS than their rule asks, because the upstream grants no more (qos_not_granted: downgrade).", true, "qos/downgraded",
		func(b BridgeStatus) float64 { return float64(b.QoSDowngraded) }, nil},
	{"edgegw_bridge_qos_held", "1 while a message above the upstream's QoS is held in the spool, unsent, with those behind it (qos_not_granted: hold).", false, "qos/held",
		func(b BridgeStatus) float64 { return float64(boolInt(b.QoSHeld)) }, nil},
	{"edgegw_bridge_budget_used_bytes", "Bytes written to the uplink in the current budget period (without a period budget: since start).", false, "budget/used",
		func(b BridgeStatus) float64 { return float64(b.Budget.Used) }, hasBudget},
	{"edgegw_bridge_budget_limit_bytes", "The uplink's byte budget per period; once used, only the high lane is sent until the period ends.", false, "budget/limit",
		func(b BridgeStatus) float64 { return float64(b.Budget.Limit) }, hasPeriod},
	{"edgegw_bridge_budget_period_end_seconds", "When the current budget period ends, in seconds since the Unix epoch.", false, "budget/period_end",
		func(b BridgeStatus) float64 { return float64(b.Budget.PeriodEnd.Unix()) }, hasPeriod},
	{"edgegw_bridge_rate_limit_bytes_per_second", "The uplink's rate limit.", false, "rate_limit/bytes_per_second",
		func(b BridgeStatus) float64 { return float64(b.Budget.Rate) }, hasRate},
	{"edgegw_bridge_rate_limit_wait_seconds_total", "Time the bridge's sender waited for the rate limit.", true, "rate_limit/wait_seconds",
		func(b BridgeStatus) float64 { return b.Budget.RateWaited.Seconds() }, hasRate},
	{"edgegw_bridge_spool_messages", "Messages in the bridge's spool (in flight included).", false, "spool/messages",
		func(b BridgeStatus) float64 { return float64(b.Spool.Messages) }, nil},
	{"edgegw_bridge_spool_bytes", "Topic and payload bytes in the bridge's spool.", false, "spool/bytes",
		func(b BridgeStatus) float64 { return float64(b.Spool.Bytes) }, nil},
	{"edgegw_bridge_spool_dropped_total", "Messages dropped from the spool (overflow policy, damage).", true, "spool/dropped",
		func(b BridgeStatus) float64 { return float64(b.Spool.Dropped) }, nil},
	{"edgegw_bridge_spool_corrupt_tails_total", "Torn or corrupt segment tails cut off when the spool opened.", true, "spool/corrupt_tails",
		func(b BridgeStatus) float64 { return float64(b.Spool.CorruptTails) }, nil},
	{"edgegw_bridge_spool_skipped_total", "Unacknowledged spool records lost to damage found when the spool opened.", true, "spool/skipped",
		func(b BridgeStatus) float64 { return float64(b.Spool.Skipped) }, nil},
	{"edgegw_bridge_spool_damaged_bytes_total", "Spool bytes that could not be read when the spool opened.", true, "spool/damaged_bytes",
		func(b BridgeStatus) float64 { return float64(b.Spool.DamagedBytes) }, nil},
	{"edgegw_bridge_spool_quarantined_total", "Unreadable spool files moved aside (*.quarantine) when the spool opened.", true, "spool/quarantined",
		func(b BridgeStatus) float64 { return float64(b.Spool.Quarantined) }, nil},
	{"edgegw_bridge_spool_empty_segments_total", "Empty spool segment files (a power cut) removed when the spool opened.", true, "spool/empty_segments",
		func(b BridgeStatus) float64 { return float64(b.Spool.EmptySegments) }, nil},
	{"edgegw_bridge_spool_ack_damage_total", "Unreadable entries of the spool's ack log found when it opened.", true, "spool/ack_damage",
		func(b BridgeStatus) float64 { return float64(b.Spool.AckDamage) }, nil},
	{"edgegw_bridge_spool_id_gap_total", "Spool ids skipped at open so that none is handed out twice.", true, "spool/id_gap",
		func(b BridgeStatus) float64 { return float64(b.Spool.IDGap) }, nil},
	{"edgegw_bridge_spool_no_space_total", "Spool appends refused because the disk is full.", true, "spool/no_space",
		func(b BridgeStatus) float64 { return float64(b.Spool.NoSpace) }, nil},
	{"edgegw_bridge_spool_bytes_written_total", "Bytes written to the spool's files (flash wear).", true, "spool/bytes_written",
		func(b BridgeStatus) float64 { return float64(b.Spool.BytesWritten) }, nil},
	{"edgegw_bridge_spool_syncs_total", "fsyncs issued by the spool.", true, "spool/syncs",
		func(b BridgeStatus) float64 { return float64(b.Spool.Syncs) }, nil},
	{"edgegw_bridge_spool_covered_commits_total", "Spool group commits the upstream had acknowledged whole before their fsync, which they skipped.", true, "spool/covered_commits",
		func(b BridgeStatus) float64 { return float64(b.Spool.CoveredCommits) }, nil},
}

// lastErrorMax bounds the error label of edgegw_bridge_last_error_info.
const lastErrorMax = 200

// perProcess ends the help of every bridge counter: they start at zero
// with the process, while the delivery ledger persists with the spool, so
// after a restart the two differ, and each surface says which is which.
const perProcess = " Counts since this process started; the delivery ledger (edgegw_bridge_ledger_messages) counts across restarts."

// collectBridges writes the edgegw_bridge_* families.
func collectBridges(w *expo, bs []BridgeStatus) {
	for _, s := range bridgeTable {
		f := w.gauge(s.metric, s.help)
		if s.counter {
			f = w.counter(s.metric, s.help+perProcess)
		}
		for _, b := range bs {
			if s.only == nil || s.only(b) {
				f.v(s.val(b), "bridge", b.Name)
			}
		}
	}
	f := w.counter("edgegw_bridge_upstream_dropped_total",
		"MQTT 5: messages the upstream refused for good, by reason; dropped from the spool, never counted as delivered.")
	for _, b := range bs {
		for _, r := range sortedKeys(b.UpstreamDropped) {
			f.v(float64(b.UpstreamDropped[r]), "bridge", b.Name, "reason", r)
		}
	}
	f = w.gauge("edgegw_bridge_upstream_info", "The protocol of the current (or last) uplink connection, 1: protocol 3.1.1 or 5, bridge_flag true, false, or refused (the broker refused it; 3.1.1 only).")
	for _, b := range bs {
		if u := b.Upstream; u != nil {
			flag := strconv.FormatBool(u.BridgeFlag)
			if u.BridgeFlagRefused {
				flag = "refused"
			}
			f.v(1, "bridge", b.Name, "protocol", u.Protocol, "bridge_flag", flag)
		}
	}
	// One series per bridge whose label changes with the error: what it
	// says is in the label, so alerts can show it.
	f = w.gauge("edgegw_bridge_last_error_info", "Why the uplink last went down or failed to come up (in the error label), 1 while set.")
	for _, b := range bs {
		if b.LastError != "" {
			e := b.LastError
			if len(e) > lastErrorMax {
				e = e[:lastErrorMax]
			}
			f.v(1, "bridge", b.Name, "error", e)
		}
	}
}

// SysValue is one retained topic under $SYS/bridge/<name>/.
type SysValue struct {
	Topic, Value string
}

// BridgeSys returns the $SYS/bridge/<name>/... topics of b (except state,
// which the bridge publishes itself when it changes).
func BridgeSys(b BridgeStatus) []SysValue {
	out := make([]SysValue, 0, len(bridgeTable)+1)
	prefix := "$SYS/bridge/" + b.Name + "/"
	for _, s := range bridgeTable {
		if s.sys != "" && (s.only == nil || s.only(b)) {
			out = append(out, SysValue{prefix + s.sys, strconv.FormatFloat(s.val(b), 'f', -1, 64)})
		}
	}
	for _, r := range sortedKeys(b.UpstreamDropped) {
		out = append(out, SysValue{prefix + "upstream/dropped/" + r, strconv.FormatInt(b.UpstreamDropped[r], 10)})
	}
	out = append(out, SysValue{prefix + "last_error", b.LastError})
	return append(out, ledgerSys(prefix, b.Ledger)...)
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
