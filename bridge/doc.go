// Package bridge connects the gateway to a cloud MQTT broker (mosquitto,
// EMQX, HiveMQ, AWS IoT, ...) over an uplink that drops, stalls and goes
// half-open. One Bridge is one entry of `bridges:` in the configuration;
// docs/bridge.md is the operator's version of this text.
//
// # Topic rules
//
// Each rule has mosquitto's "topic <pattern> <direction> <qos>
// <local-prefix> <remote-prefix>" meaning. Locally a rule matches
// local_prefix+pattern, upstream remote_prefix+pattern; a message crossing
// the bridge has one prefix swapped for the other.
//
//   - {pattern: "sensors/#", direction: out, qos: 1, remote_prefix: "site-a/"}
//     local sensors/t1      -> upstream site-a/sensors/t1
//   - {pattern: "cmd/#", direction: in, qos: 1, remote_prefix: "site-a/"}
//     subscribes upstream to site-a/cmd/#; site-a/cmd/x -> local cmd/x
//   - {pattern: "+/state", direction: both, qos: 1, local_prefix: "dev/", remote_prefix: "edge-01/"}
//     local dev/pump/state  <-> upstream edge-01/pump/state
//
// out messages go upstream at the smaller of the message's QoS and the
// rule's (the rule caps it); in rules subscribe at the rule's QoS. A local
// message matching several out rules is sent once, mapped by the first
// matching rule in the list; an inbound message is mapped by the first
// matching in rule. Prefixes may not contain wildcards.
//
// Loops: a message that entered through a bridge carries Origin
// "$bridge/<name>" and the gateway never hands it back to the same bridge.
// Upstream, the bridge connects with the MQTT 3.1.1 "bridge" protocol flag
// (level 0x84, mosquitto's try_private) so that mosquitto and EMQX never
// echo the bridge's own publishes back to it; a broker that refuses the
// flag ("unacceptable protocol version") is retried with plain 3.1.1, and
// Config.NoBridgeFlag forces plain 3.1.1. Without the flag, a both rule
// whose upstream subscription covers what it publishes receives its own
// messages back once (they are delivered locally, never sent out again).
//
// # Delivery guarantees
//
// Every local message matching an out rule is appended to the bridge's
// durable spool (bridge/spool) before the local publisher gets its
// PUBACK/PUBREC. The bridge is a gateway.AsyncSink: AcceptAsync writes the
// record at once, on the publisher's reader goroutine and in its order, and
// the gateway sends the PUBACK/PUBREC when the group commit covering it
// reports it durable (spool.AppendAsync). The publisher's connection does
// not wait meanwhile: it keeps reading publishes (a pipelining publisher
// gets many messages into one commit window, not one per window) and its
// PINGREQs are answered at once. A message the spool could not keep gets
// a negative acknowledgement (Stats.AcceptFailed). Accept, the blocking
// form, remains for callers that want to wait; for a QoS 0 message it does
// not wait either (written in order, no acknowledgement depends on its
// fsync), so a local QoS 0 publisher is never held to one message per
// commit window. A message is removed from
// the spool only after the upstream PUBACK (QoS 1) or
// PUBCOMP (QoS 2); QoS 0 messages are removed once written. So a message
// acknowledged locally survives an uplink outage, a crash and a reboot
// (SpoolSync "batch" or "always"; with "none" a power loss may lose the last
// moments) and reaches the cloud at least once. After every reconnect the
// unacknowledged messages are sent again from the spool, oldest first in
// each priority lane (high, normal, bulk; high always first: lanes.go), as
// fast as the send window allows (window.go: sized by the link with
// max_inflight auto, the default; a fixed count otherwise; QoS 2 within
// max_inflight_qos2): within a lane (with drain fifo) the order of first
// copies is the local order, and a message whose ack was lost with the
// connection arrives twice (at most the publishes that were in flight).
// With drain live-first, messages accepted during the current connection
// go before the older backlog, which gets backlog_share of the window.
//
// QoS 2 is exactly once across reconnects when the upstream session is
// persistent (clean_session: false): the bridge's paho store outlives each
// connection, and the flows a lost connection cut are sent again under
// their packet ids, the PUBLISH before a PUBREC and the PUBREL after one
// (session311.go). A stop waits briefly for the flows in flight. The packet ids
// on the wire are derived from the spool records (wireid.go), so after a
// crash the restarted bridge re-sends unfinished flows under the ids the
// broker knows, and a new message never collides with an old flow the
// broker still holds. With a clean
// session the broker forgets the ids, so a QoS 2 publish whose PUBCOMP was
// lost with the connection is sent again as a new message and may arrive
// twice.
//
// Inbound (cloud to local) messages are acknowledged upstream only after the
// gateway accepted them. One the gateway refuses stays unacknowledged; with
// clean_session: false the cloud broker re-delivers it after the next
// reconnect.
//
// Over MQTT 5 (Config.Protocol "5" or "auto"; uplink5.go) the same holds,
// lanes, drain policy and byte budget included (one picker, lanes.go, for
// both protocols), with the broker's Receive Maximum bounding the QoS 1/2
// publishes in flight and its reason codes seen: a temporarily refused
// message stays in the spool and is sent again after a backoff, first in
// its lane, a permanently refused one is dropped and counted by reason
// (Stats.UpstreamDropped), never counted as delivered.
//
// The bridge is a sink of the gateway only while Run runs: start bridges
// before the listeners so that no early local message misses the spool.
//
// # Spool overflow
//
// The spool is bounded by spool max_bytes (topic+payload of unacknowledged
// messages, default 256 MiB). When a new message does not fit, the OLDEST
// messages are dropped to make room (at the edge the newest data is worth
// most); Stats.SpoolDropped counts them. A single message larger than
// max_bytes is refused, and its publisher gets a negative acknowledgement.
// Without spool_dir the spool lives in a temporary directory and does not
// survive a restart.
//
// # Failure detection
//
// A half-open uplink is found within seconds:
//
//   - write deadline: every write to the socket, PINGREQ included, has a
//     deadline of write_timeout for each 4 KiB it makes progress on
//     (writes are batched, batchwrite.go); a
//     write that times out closes the uplink (Stats.WriteTimeouts);
//   - ack watchdog: if the oldest unacknowledged publish is older than
//     ack_timeout and nothing at all was read from upstream since it was
//     sent, the uplink is torn down (Stats.WatchdogTrips). Its timer runs
//     only while something is in flight;
//   - keepalive: no PINGRESP within keepalive + write_timeout (about; paho
//     checks every keepalive/4, at most 5s) means dead.
//
// # Reconnect and failover
//
// One goroutine owns the uplink. Each round tries the addresses in order
// (tcp://, tls:// = ssl://, ws://, wss://) and keeps the first that
// connects; when it is lost, the next round starts again from the first
// address (the preferred one). Between rounds it waits an exponential
// backoff from reconnect_min to reconnect_max with jitter (a wait is
// uniform in [d/2, d]), reset after every successful connection. The in
// rules are subscribed again on every connection.
//
// # Ledger
//
// Bridge.Ledger says where every message the bridge accepted went:
// accepted = delivered + in flight + queued + dropped by reason + unknown,
// persisted with the spool so that it adds up across restarts and
// crashes (ledger.go, bridge/spool/ledger.go). cmd/edgegw shows it on
// /metrics, /ledger and below $SYS/bridge/<name>/ledger.
//
// # State
//
// The retained local topic $SYS/bridge/<name>/state is "connected" or
// "disconnected" and changes at once: a failed DNS lookup, dial, TLS
// handshake, CONNECT or SUBSCRIBE, a watchdog trip or a write timeout all
// publish "disconnected" before the bridge starts reconnecting. Stats
// returns the counters behind it.
package bridge
