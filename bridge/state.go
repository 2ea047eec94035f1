package bridge

import (
	"time"

	"github.com/edgegw/edgegw/gateway"
)

// State is the uplink's state as published on $SYS/bridge/<name>/state.
type State uint8

// The states of a bridge.
const (
	Disconnected State = iota
	Connected
	// Failed: the spool cannot open (full disk, read-only, no permission,
	// a file where its directory should be). The bridge keeps trying to
	// open it; meanwhile its out rules refuse local QoS 1/2 messages, as a
	// full spool does, and nothing goes upstream.
	Failed
)

// String returns the state topic's payload.
func (s State) String() string {
	switch s {
	case Connected:
		return "connected"
	case Failed:
		return "failed"
	}
	return "disconnected"
}

// Stats is a snapshot of a bridge's state and counters.
type Stats struct {
	State     State
	Since     time.Time // when State last changed
	Address   string    // upstream address of the current (or last) connection
	LastError string    // why the uplink last went down or failed to come up

	Connects        uint64 // successful connections (CONNACK + SUBACK)
	Disconnects     uint64 // connections that ended
	ConnectFailures uint64 // dial, TLS, CONNECT or SUBSCRIBE failures
	WatchdogTrips   uint64 // uplinks torn down by the ack watchdog
	WriteTimeouts   uint64 // uplink writes that hit write_timeout

	InFlight      int64         // upstream publishes not yet acknowledged (<= max_inflight)
	InFlightBytes int64         // their size on the wire, about
	Window        int64         // the send window in bytes with max_inflight auto (0: fixed, or not connected)
	MinRTT        time.Duration // the connection's round-trip floor (send to ack), 0 before the first ack
	SpoolMessages int64         // messages waiting for an upstream ack (incl. in flight)
	SpoolBytes    int64         // their topic+payload bytes (bounded by spool max_bytes)
	SpoolDropped  uint64        // messages dropped by the spool's overflow policy

	Sent          uint64 // PUBLISH handed to the uplink (re-sends included)
	Resumed       uint64 // QoS 1/2 flows re-sent after a reconnect under their original packet id
	Acked         uint64 // upstream acknowledgements (PUBACK/PUBCOMP; QoS 0 on write)
	Received      uint64 // inbound messages accepted locally and acked upstream
	InboundFailed uint64 // inbound messages the gateway refused (not acked upstream)
	AcceptFailed  uint64 // local messages the spool could not keep (publisher not acked); logged per burst

	// The byte budget (budget.go), if rate_limit or budget is set.
	BudgetUsed  int64         // bytes written to the uplink in the current period (without a period budget: since the bridge started)
	BudgetLimit int64         // bytes per period (0: no period budget)
	BudgetStart time.Time     // the current period's start (zero: no period budget)
	BudgetEnd   time.Time     // and its end: normal and bulk wait for it once BudgetUsed reaches BudgetLimit
	RateLimit   int64         // bytes per second (0: none)
	RateWaited  time.Duration // how long the sender waited for the rate limit, in all
	// MQTT 5 uplinks (protocol.go, uplinkengine.go).
	Protocol          string          // of the current (or last) connection: "3.1.1" or "5"
	UpstreamDropped   uint64          // messages the upstream refused for good (PUBACK/PUBREC reason code): dropped, never Acked
	UpstreamDroppedBy map[byte]uint64 // the same by reason code (0x87 not authorized, 0x90 topic name invalid, ...)
	UpstreamRetried   uint64          // temporary refusals (0x97 quota exceeded, ...): the message stays and is sent again

	// What the upstream of the current (or last) connection granted
	// (upstream.go); zero before the first connection.
	Upstream Upstream
	// QoSPolicy is what happens to a message above the granted QoS
	// ("downgrade (upstream_max_qos 2)"); QoSDowngraded counts the
	// messages sent below their rule's QoS; QoSHeld: the sender holds one
	// (qos_not_granted: hold) and sends nothing.
	QoSPolicy     string
	QoSDowngraded uint64
	QoSHeld       bool
}

// Stats returns a snapshot of the bridge's state and counters.
func (b *Bridge) Stats() Stats {
	b.stateMu.Lock()
	st := Stats{State: b.state, Since: b.since, Address: b.addr}
	if p := b.lastErr.Load(); p != nil {
		st.LastError = *p
	}
	b.stateMu.Unlock()
	st.Connects = b.connects.Load()
	st.Disconnects = b.disconnects.Load()
	st.ConnectFailures = b.connectFailures.Load()
	st.WatchdogTrips = b.trips.Load()
	st.WriteTimeouts = b.writeTimeouts.Load()
	st.InFlight = b.inflight.Load()
	if w := b.win.Load(); w != nil {
		_, bytes, cwnd, rtt := w.snapshot()
		st.InFlightBytes, st.Window, st.MinRTT = int64(bytes), int64(cwnd), rtt
	}
	st.Sent = b.sent.Load()
	st.Resumed = b.engResumed.Load()
	st.Acked = b.acked.Load()
	st.Received = b.received.Load()
	st.InboundFailed = b.inboundFailed.Load()
	st.AcceptFailed = b.acceptFailed.Load()
	if b.spool.Load() != nil && b.budget != nil {
		bs := b.budget.state()
		st.BudgetUsed, st.BudgetStart, st.BudgetEnd, st.RateWaited = bs.used, bs.start, bs.end, bs.waited
		st.BudgetLimit, st.RateLimit = b.budget.limit, int64(b.budget.rate)
	}
	st.Protocol, _ = b.uplinkProto.Load().(string)
	st.UpstreamDroppedBy, st.UpstreamDropped = b.upRefused.droppedByReason()
	st.UpstreamRetried = b.upRefused.retried.Load()
	if up := b.upstream.Load(); up != nil {
		st.Upstream = *up
	}
	st.QoSPolicy, st.QoSDowngraded, st.QoSHeld = b.qosPolicyText(), b.qosDowngraded.Load(), b.qosHeld.Load()
	if sp := b.spool.Load(); sp != nil {
		ss := sp.Stats()
		st.SpoolMessages, st.SpoolBytes = ss.Messages, ss.Bytes
		for _, n := range ss.Dropped {
			st.SpoolDropped += n
		}
	}
	return st
}

// StateTopic returns the local retained topic carrying the bridge's state.
func (b *Bridge) StateTopic() string { return b.c.Load().stateTop }

// setState records s and publishes it (retained, locally) if it changed.
// Any goroutine may call it: a write timeout or watchdog trip reports
// "disconnected" at once, before the owner has noticed.
func (b *Bridge) setState(s State, addr string, why error) {
	b.stateMu.Lock()
	defer b.stateMu.Unlock()
	if addr != "" {
		b.addr = addr
	}
	if why != nil {
		e := why.Error()
		b.lastErr.Store(&e)
	}
	if b.published && b.state == s {
		return
	}
	b.state, b.published = s, true
	b.since = time.Now()
	switch {
	case s == Connected:
		b.log.Info("uplink connected", "address", b.addr)
	case s == Failed:
		b.log.Error("bridge failed: its spool cannot open; messages for it are refused, the rest of the gateway runs", "err", why)
	case why != nil:
		b.log.Warn("uplink disconnected", "address", b.addr, "reason", why)
	}
	// OriginSys: the bridge's report, not a message anyone sent, so the
	// broker does not count it as received; the bridge's own sink skips it
	// (spoolMessage), as it skips what came in through it.
	err := b.gw.Publish(&gateway.Message{
		Topic: b.c.Load().stateTop, Payload: []byte(s.String()), QoS: 1, Retain: true, Origin: gateway.OriginSys,
	})
	if err != nil {
		b.log.Error("publish state", "err", err)
	}
}
