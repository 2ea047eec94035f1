package metrics

import "strconv"

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
	Spool           SpoolStatus
	Ledger          *Ledger // nil while the spool is not open
}

// SpoolStatus is a bridge spool's part of BridgeStatus.
type SpoolStatus struct {
	Messages, Bytes, Dropped                                        int64
	CorruptTails, Skipped, DamagedBytes, Quarantined, EmptySegments int64 // damage found at open
	AckDamage, IDGap                                                int64
	NoSpace, BytesWritten, Syncs                                    int64 // since open
}

// bridgeSeries is one per-bridge value, under its metric name and its
// $SYS/bridge/<name>/ topic: /metrics and $SYS are built from this one
// table, so they cannot drift apart. docs/metrics.md lists them all
// (TestMetricsDocumented in cmd/edgegw holds it to the binary).
type bridgeSeries struct {
	metric, help string
	counter      bool
	sys          string // topic below $SYS/bridge/<name>/
	val          func(b BridgeStatus) int64
}

var bridgeTable = []bridgeSeries{
	{"edgegw_bridge_up", "1 if the bridge's uplink is connected.", false, "",
		func(b BridgeStatus) int64 { return boolInt(b.Connected) }},
	{"edgegw_bridge_connects_total", "Uplink connections established.", true, "connects",
		func(b BridgeStatus) int64 { return b.Connects }},
	{"edgegw_bridge_disconnects_total", "Uplink connections lost.", true, "disconnects",
		func(b BridgeStatus) int64 { return b.Disconnects }},
	{"edgegw_bridge_connect_failures_total", "Failed uplink connection attempts (dial, TLS, CONNECT or SUBSCRIBE).", true, "connect_failures",
		func(b BridgeStatus) int64 { return b.ConnectFailures }},
	{"edgegw_bridge_watchdog_trips_total", "Uplinks torn down by the ack watchdog.", true, "watchdog_trips",
		func(b BridgeStatus) int64 { return b.WatchdogTrips }},
	{"edgegw_bridge_write_timeouts_total", "Uplink writes that missed their deadline.", true, "write_timeouts",
		func(b BridgeStatus) int64 { return b.WriteTimeouts }},
	{"edgegw_bridge_inflight_messages", "Upstream publishes awaiting acknowledgement.", false, "inflight",
		func(b BridgeStatus) int64 { return b.Inflight }},
	{"edgegw_bridge_sent_total", "Messages published upstream (re-sends included).", true, "sent",
		func(b BridgeStatus) int64 { return b.Sent }},
	{"edgegw_bridge_resumed_total", "QoS 1/2 flows re-sent after a reconnect under their original packet id.", true, "resumed",
		func(b BridgeStatus) int64 { return b.Resumed }},
	{"edgegw_bridge_acked_total", "Upstream publishes acknowledged.", true, "acked",
		func(b BridgeStatus) int64 { return b.Acked }},
	{"edgegw_bridge_received_total", "Messages received from upstream and accepted locally.", true, "received",
		func(b BridgeStatus) int64 { return b.Received }},
	{"edgegw_bridge_inbound_refused_total", "Messages from upstream the local broker refused; not acknowledged upstream.", true, "inbound_refused",
		func(b BridgeStatus) int64 { return b.InboundRefused }},
	{"edgegw_bridge_refused_total", "Local messages the bridge's spool could not keep; their publishers were not acknowledged.", true, "refused",
		func(b BridgeStatus) int64 { return b.Refused }},
	{"edgegw_bridge_spool_messages", "Messages in the bridge's spool (in flight included).", false, "spool/messages",
		func(b BridgeStatus) int64 { return b.Spool.Messages }},
	{"edgegw_bridge_spool_bytes", "Topic and payload bytes in the bridge's spool.", false, "spool/bytes",
		func(b BridgeStatus) int64 { return b.Spool.Bytes }},
	{"edgegw_bridge_spool_dropped_total", "Messages dropped from the spool (overflow policy, damage).", true, "spool/dropped",
		func(b BridgeStatus) int64 { return b.Spool.Dropped }},
	{"edgegw_bridge_spool_corrupt_tails_total", "Torn or corrupt segment tails cut off when the spool opened.", true, "spool/corrupt_tails",
		func(b BridgeStatus) int64 { return b.Spool.CorruptTails }},
	{"edgegw_bridge_spool_skipped_total", "Unacknowledged spool records lost to damage found when the spool opened.", true, "spool/skipped",
		func(b BridgeStatus) int64 { return b.Spool.Skipped }},
	{"edgegw_bridge_spool_damaged_bytes_total", "Spool bytes that could not be read when the spool opened.", true, "spool/damaged_bytes",
		func(b BridgeStatus) int64 { return b.Spool.DamagedBytes }},
	{"edgegw_bridge_spool_quarantined_total", "Unreadable spool files moved aside (*.quarantine) when the spool opened.", true, "spool/quarantined",
		func(b BridgeStatus) int64 { return b.Spool.Quarantined }},
	{"edgegw_bridge_spool_empty_segments_total", "Empty spool segment files (a power cut) removed when the spool opened.", true, "spool/empty_segments",
		func(b BridgeStatus) int64 { return b.Spool.EmptySegments }},
	{"edgegw_bridge_spool_ack_damage_total", "Unreadable entries of the spool's ack log found when it opened.", true, "spool/ack_damage",
		func(b BridgeStatus) int64 { return b.Spool.AckDamage }},
	{"edgegw_bridge_spool_id_gap_total", "Spool ids skipped at open so that none is handed out twice.", true, "spool/id_gap",
		func(b BridgeStatus) int64 { return b.Spool.IDGap }},
	{"edgegw_bridge_spool_no_space_total", "Spool appends refused because the disk is full.", true, "spool/no_space",
		func(b BridgeStatus) int64 { return b.Spool.NoSpace }},
	{"edgegw_bridge_spool_bytes_written_total", "Bytes written to the spool's files (flash wear).", true, "spool/bytes_written",
		func(b BridgeStatus) int64 { return b.Spool.BytesWritten }},
	{"edgegw_bridge_spool_syncs_total", "fsyncs issued by the spool.", true, "spool/syncs",
		func(b BridgeStatus) int64 { return b.Spool.Syncs }},
}

// lastErrorMax bounds the error label of edgegw_bridge_last_error_info.
const lastErrorMax = 200

// collectBridges writes the edgegw_bridge_* families.
func collectBridges(w *expo, bs []BridgeStatus) {
	for _, s := range bridgeTable {
		f := w.gauge(s.metric, s.help)
		if s.counter {
			f = w.counter(s.metric, s.help)
		}
		for _, b := range bs {
			f.v(float64(s.val(b)), "bridge", b.Name)
		}
	}
	// One series per bridge whose label changes with the error: what it
	// says is in the label, so alerts can show it.
	f := w.gauge("edgegw_bridge_last_error_info", "Why the uplink last went down or failed to come up (in the error label), 1 while set.")
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
		if s.sys != "" {
			out = append(out, SysValue{prefix + s.sys, strconv.FormatInt(s.val(b), 10)})
		}
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
