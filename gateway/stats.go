package gateway

import (
	"strconv"

	"github.com/edgegw/edgegw/gateway/store"
	"sync/atomic"
	"time"
)

// dropReason says why a message was not delivered to a session.
type dropReason int

const (
	dropQueueFull    dropReason = iota // per-session max_queued_messages / max_queued_bytes
	dropMemoryBudget                   // global memory_budget
	dropExpired                        // v5 message expiry passed while queued
	dropTooLarge                       // larger than the client's v5 maximum packet size
	numDropReasons
)

func (r dropReason) String() string {
	switch r {
	case dropQueueFull:
		return "queue_full"
	case dropMemoryBudget:
		return "memory_budget"
	case dropExpired:
		return "expired"
	case dropTooLarge:
		return "too_large"
	}
	return "unknown"
}

// counters are the broker's monotonic counters. Gauges are computed on
// demand in Stats.
type counters struct {
	received      atomic.Int64 // PUBLISH accepted from clients and in-process publishers
	sent          atomic.Int64 // PUBLISH written to clients
	drops         [numDropReasons]atomic.Int64
	takeovers     atomic.Int64
	expired       atomic.Int64
	refused       atomic.Int64 // connections refused (max_connections)
	slowConsumers atomic.Int64 // subscribers that stalled under flow control
	authFailures  atomic.Int64 // CONNECTs refused for a bad user name or password
	notStored     atomic.Int64 // QoS 1/2 messages a sink could not keep: not acknowledged
	// retained messages for a new topic not retained: the store was at
	// its bound (retained.go)
	retainedRefused atomic.Int64
	closes          [numCloseReasons]atomic.Int64
	writers         atomic.Int64 // writer goroutines started (writer.go; tests)
	denied          [numDenials]atomic.Int64
}

func (c *counters) drop(r dropReason) { c.drops[r].Add(1) }

// Stats is a snapshot of the broker's gauges and counters, for /metrics and
// $SYS.
type Stats struct {
	Uptime               time.Duration
	Connections          int64
	SessionsConnected    int
	SessionsDisconnected int
	QueuedMessages       int64
	QueuedBytes          int64 // includes in-flight payloads
	SubscriptionBytes    int64 // estimated topic tree memory of all subscriptions (counted in the memory budget)
	Inflight             int64
	Retained             int
	RetainedBytes        int64 // the retained messages' topic and payload bytes, plus 512 each
	RetainedRefused      int64 // retained messages for a new topic not retained: the store was at its bound
	Subscriptions        int
	MessagesReceived     int64
	MessagesSent         int64
	Drops                map[string]int64 // by reason
	Takeovers            int64
	Expired              int64
	Refused              int64
	SlowConsumers        int64            // subscribers that stopped draining while publishers waited on them
	AuthFailures         int64            // logins refused for a bad user name or password
	NotStored            int64            // QoS 1/2 publishes refused because a sink could not keep them
	Closes               map[string]int64 // by close reason
	State                *store.Stats     // the state store's writes (flash wear); nil without one
	Denied               map[string]int64 // authorization refusals by kind (publish, subscribe, delivery, session_owner)
}

// Stats returns a snapshot. It walks the sessions, so call it at metrics
// scrape rate, not per message.
func (s *Server) Stats() Stats {
	st := Stats{
		Uptime:            time.Since(s.started),
		Connections:       s.conns.Load(),
		QueuedBytes:       s.queuedBytes.Load(),
		SubscriptionBytes: s.subBytes.Load(),
		Retained:          s.retained.Len(),
		RetainedBytes:     s.retainedBytes.Load(),
		RetainedRefused:   s.stats.retainedRefused.Load(),
		Subscriptions:     s.subs.Len(),
		MessagesReceived:  s.stats.received.Load(),
		MessagesSent:      s.stats.sent.Load(),
		Takeovers:         s.stats.takeovers.Load(),
		Expired:           s.stats.expired.Load(),
		Refused:           s.stats.refused.Load(),
		SlowConsumers:     s.stats.slowConsumers.Load(),
		AuthFailures:      s.stats.authFailures.Load(),
		NotStored:         s.stats.notStored.Load(),
		Drops:             make(map[string]int64, numDropReasons),
		Closes:            make(map[string]int64, numCloseReasons),
		Denied:            make(map[string]int64, numDenials),
	}
	for r := dropReason(0); r < numDropReasons; r++ {
		st.Drops[r.String()] = s.stats.drops[r].Load()
	}
	if s.state != nil {
		ss := s.state.Stats()
		st.State = &ss
	}
	for r := CloseReason(0); r < numCloseReasons; r++ {
		st.Closes[r.String()] = s.stats.closes[r].Load()
	}
	for d := denial(0); d < numDenials; d++ {
		st.Denied[d.String()] = s.stats.denied[d].Load()
	}
	s.reg.mu.Lock()
	for _, ss := range s.reg.sessions {
		ss.mu.Lock()
		if ss.conn != nil {
			st.SessionsConnected++
		} else {
			st.SessionsDisconnected++
		}
		st.QueuedMessages += int64(ss.queue.len())
		st.Inflight += int64(len(ss.inflight))
		ss.mu.Unlock()
	}
	s.reg.mu.Unlock()
	return st
}

// publishSys publishes the $SYS/broker topics, only when someone is
// subscribed to one of them (idle brokers stay idle).
func (s *Server) publishSys() {
	if s.sysSubs.Load() == 0 {
		return
	}
	st := s.Stats()
	pub := func(topic, val string) {
		s.route(&Message{Topic: "$SYS/broker/" + topic, Payload: []byte(val), Retain: true, Origin: OriginSys})
	}
	itoa := func(v int64) string { return strconv.FormatInt(v, 10) }
	pub("version", s.opts.Version)
	pub("uptime", itoa(int64(st.Uptime/time.Second))+" seconds")
	pub("clients/connected", itoa(int64(st.SessionsConnected)))
	pub("clients/disconnected", itoa(int64(st.SessionsDisconnected)))
	pub("messages/received", itoa(st.MessagesReceived))
	pub("messages/sent", itoa(st.MessagesSent))
	pub("messages/queued", itoa(st.QueuedMessages))
	pub("bytes/queued", itoa(st.QueuedBytes))
	pub("retained/count", itoa(int64(st.Retained)))
	pub("subscriptions/count", itoa(int64(st.Subscriptions)))
	pub("sessions/expired", itoa(st.Expired))
	pub("sessions/takeovers", itoa(st.Takeovers))
	pub("clients/slow", itoa(st.SlowConsumers))
	for reason, n := range st.Drops {
		pub("messages/dropped/"+reason, itoa(n))
	}
}
