// Package bridge connects the gateway to a cloud MQTT broker (mosquitto,
// EMQX, HiveMQ, AWS IoT, ...) over an uplink that drops, stalls and goes
// half-open. One Bridge is one entry of `bridges:` in the configuration;
// docs/bridge.md is the operator's version of this text.
//
// # Files
//
//	bridge.go      Bridge, New, Open, Close, Run: the lifecycle
//	state.go       State, Stats, setState: $SYS/bridge/<name>/state
//	config.go      Config, its validation and compiled rules; defaults.go
//	sink.go        the gateway's sink: a local message into the spool, and
//	               what a rule adds to it (expiry, lane)
//	lanes.go       the picker: which record goes next
//	refusals.go    local messages the spool could not keep, counted and logged
//	loop.go        the owner goroutine: reconnect loop, backoff
//	uplink.go      one upstream connection: serveUplink
//	uplinkengine.go  the connection on the session engine: connect,
//	               subscribe, publish and finish; the engine's Store
//	send.go        the sender
//	packetsize.go  a PUBLISH's exact size on the wire (max_packet_size)
//	stuck.go       a message the cloud broker closes the link on, again
//	               and again: the ERROR line and its hint
//	ack.go         the acker; completed
//	flowqueue.go   the flows from the sender to the acker, in send order
//	window.go      the send window (max_inflight auto)
//	budget.go      the byte budget and rate limit
//	conn.go        the transport: dial (TCP, TLS, WebSocket), the metered
//	               connection the engine's wire writes to (a plain TCP
//	               socket reads and writes through internal/sockio)
//	inbound.go     messages from upstream into the gateway
//	reload.go      live reload (SIGHUP)
//	ledger.go      where every accepted message went; spoolstats.go
//	protocol.go    the MQTT version; MQTT 5 reason codes
//	log.go         connect failure lines
//	addresses.go   the addresses for the status page; their order
//	               (address_order: spread over a fleet, or strict)
//	collision.go   another client using the bridge's client id, named
//	upstream.go    what the upstream granted: the bridge flag, the QoS
//	               it takes (upstream_max_qos, qos_not_granted)
//
// # The session engine
//
// The uplink's MQTT session is the bridge's own engine, in two packages
// that depend one way (session -> wire -> gateway/packet, paho's
// packets; neither imports this package):
//
//	wire/      the wire: a packet-level connection over a net.Conn, one
//	           writer goroutine, a control lane (PINGREQ, acks) written
//	           before queued publishes, write_timeout on every chunk
//	session/   the engine: packet ids, flows of both directions, resume
//	           by session present, keepalive, the ack watchdog; its
//	           durable state through a small Store, which the spool
//	           implements (spool/session.go, session.log)
//
// This package keeps the send policy (picker, window, budget, refusals,
// stuck) and hands the engine what it needs: uplinkengine.go connects it,
// gives it the spool's session log as its Store and the gateway
// (PublishExactlyOnce, Release) as the keeper of its inbound QoS 2 ids.
//
// "Acknowledged upstream" is decided in one place,
// session.Engine.acknowledgedUpstream: on the peer's PUBACK or PUBCOMP
// read from the wire (over MQTT 5 also a PUBACK/PUBREC refusing the
// message for good), and nowhere else does a record leave the spool as
// delivered.
//
// One engine speaks one packet type, gateway/packet's: MQTT 5 is
// encoded and decoded by gateway/packet itself (the project's fuzzed,
// symmetric codec with golden tests, so the client side, CONNECT and
// SUBSCRIBE out and CONNACK and SUBACK in, is the code the broker side
// already trusts), and MQTT 3.1.1 by paho's public packets package
// through a field-for-field adapter (wire/codec311.go), except the
// packets of every message (PUBLISH, its acks, PINGREQ): those
// gateway/packet writes, byte for byte as paho does, without paho's
// allocations per PUBLISH. The design names paho for the 3.1.1 uplink,
// and its packets package is a codec made to be used on its own, with no
// client behind it to steer. The WebSocket transport (ws://, wss://) is
// paho's too (wire/websocket.go).
//
// "Session" is the MQTT session only (the state client and broker keep
// across connections); one connection is an uplink.
//
// # The route of a local message
//
//	sink.go        AcceptAsync maps it (config.go outRule,
//	               spoolMessageFor) and appends it to
//	spool/         the spool (append.go write, flush.go group commit); the
//	               gateway acknowledges the publisher from done
//	loop.go        the owner connects (uplinkengine.go connectUplink,
//	               through conn.go dialTransport) and serves
//	uplink.go      serveUplink: window, picker, sender and acker, then
//	send.go        send: the picker (lanes.go next; spool Head) picks it
//	               (a picker that caught up waits for spool WakeOnChange,
//	               sent once per group commit: it sends the batch in one go),
//	               the window (window.go acquire) takes it, and the
//	               engine (uplinkengine.go publish: session Link.Publish)
//	               puts it on the wire (session/, wire/); a QoS 0
//	               publish is complete once queued for the wire (ack.go
//	               completed: spool Ack)
//	session/       the PUBACK/PUBCOMP ends its flow
//	               (Engine.acknowledgedUpstream: the Store's Ack, the
//	               spool's session log, acks its record)
//	ack.go         ack: the flow ended in send order (uplinkengine.go
//	               finish: a refusal for now goes back to the picker),
//	               its room in the window is freed
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
// reports it durable, or acknowledged upstream with the rest of its
// window (spool.AppendAsync; a covered commit, spool/covered.go). The publisher's connection does
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
// With a persistent session (clean_session: false) the QoS 1/2
// publishes a lost connection left unacknowledged are re-sent first on
// the next connection, before anything new, oldest record first (QoS 1
// and 2 mixed), under their packet ids: a PUBLISH with DUP set, or a QoS
// 2 flow's PUBREL (session/link.go resume,
// TestReconnectResendsUnackedQoS1).
//
// QoS 2 is exactly once across reconnects when the upstream session is
// persistent (clean_session: false): the engine's flows outlive each
// connection, and the flows a lost connection cut are sent again under
// their packet ids, the PUBLISH before a PUBREC and the PUBREL after one.
// A stop waits briefly for the flows in flight. The packet id of a QoS 2
// publish is derived from its spool record (session/engine.go wireID),
// and its flow is kept in the spool's session log, so after a crash the
// restarted bridge re-sends unfinished flows under the ids the broker
// knows, and a new message never collides with an old flow the broker
// still holds. With a clean session the broker forgets the ids, so a QoS
// 2 publish whose PUBCOMP was lost with the connection is sent again as a
// new message and may arrive twice.
//
// Inbound (cloud to local) messages are acknowledged upstream only after the
// gateway accepted them. One the gateway refuses stays unacknowledged; with
// clean_session: false the cloud broker re-delivers it after the next
// reconnect.
//
// Over MQTT 5 (Config.Protocol "5" or "auto"; uplinkengine.go) the same holds,
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
//     deadline of write_timeout for each chunk it makes progress on
//     (bridge/wire; writes are batched); a write that times out closes
//     the uplink (Stats.WriteTimeouts);
//   - ack watchdog: if the oldest unacknowledged publish is older than
//     ack_timeout and nothing at all was read from upstream since it was
//     sent, the uplink is torn down (Stats.WatchdogTrips). Its timer runs
//     only while something is in flight (session/timer.go);
//   - keepalive: a PINGREQ goes out when nothing was read for half the
//     keepalive; nothing at all read for 1.5 times the keepalive means
//     dead (session/timer.go).
//
// # Reconnect and failover
//
// One goroutine owns the uplink. Each round tries the addresses (tcp://,
// tls:// = ssl://, ws://, wss://) in the bridge's order and keeps the
// first that connects; when it is lost, the next round starts again from
// the first of that order. The order is the configured one with
// address_order strict, and with spread (the default) a stable ranking by
// the client id (addresses.go), so a fleet from one config spreads over
// the listed nodes. Between rounds it waits an exponential
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
//
// # Lock order
//
// Locks are taken top down, never bottom up; a lock not listed is a leaf
// (the picker's, the window's, the budget's, the refusal logs',
// uplink.causeMu, connSlot.mu).
//
//	reloadState.mu        Reload (reload.go)
//	  Bridge.openMu       the sinks and the spool (bridge.go, reload.go)
//	    Bridge.stateMu    the state (state.go); gateway.Publish runs under
//	                      it: no sink takes it (another bridge's sink may
//	                      receive the state message; lastErr is atomic)
//	  reloadState.subMu   the live connection's subscriptions; the engine
//	                      is handed SUBSCRIBE under it (uplinkengine.go,
//	                      reload.go)
//	    Bridge.stateMu, uplink.causeMu   (teardown)
//	    the engine's locks (session/), connSlot.mu
//
// # Design notes
//
//	uplink.go        the owner, the sender and the acker
//	uplinkengine.go  the uplink on the session engine
//	window.go        how much is in flight upstream
//	budget.go        the byte budget
//	sink.go          what a rule adds to a message (expiry)
//	inbound.go       inbound QoS 2, exactly once across restarts
//	ledger.go        the delivery ledger
//	reload.go        what a running bridge can take without a restart
//	session/doc.go   the engine; wire/doc.go its wire
//	spool/doc.go     the spool: durability, damage, full disk, overflow
package bridge
