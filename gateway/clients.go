package gateway

import (
	"slices"
	"strings"
	"time"
)

// ClientInfo is a read-only snapshot of one connected client, for the
// status page.
type ClientInfo struct {
	ClientID  string
	Username  string
	Remote    string    // the connection's remote address
	Listener  string    // the listener's name
	Protocol  int       // 3 (3.1), 4 (3.1.1) or 5
	Since     time.Time // when the network connection reached the broker
	Queued    int       // messages waiting in the session's queue
	Inflight  int       // outgoing QoS 1/2 messages awaiting the client's ack
	Slow      bool      // not keeping up: a message has waited for its ack longer than the flow-control stall
	Waiting   int       // publishers whose acks wait for this client's queue to drain
	QueuedMem int64     // payload bytes charged to the session (queue and in flight)
}

// Clients returns the connected clients sorted by listener and client id.
// It takes the registry lock and each session's lock briefly, like Stats,
// so call it at page-refresh rate, not per message. The message path pays
// nothing for it.
func (s *Server) Clients() []ClientInfo {
	s.reg.mu.Lock()
	out := make([]ClientInfo, 0, len(s.reg.sessions))
	for _, ss := range s.reg.sessions {
		ss.mu.Lock()
		// The client's CONNECT fields were written before attach set
		// ss.conn under ss.mu: reading them under ss.mu is ordered after.
		if c := ss.conn; c != nil {
			out = append(out, ClientInfo{
				ClientID:  c.id,
				Username:  c.username,
				Remote:    c.conn.RemoteAddr().String(),
				Listener:  c.listener,
				Protocol:  int(c.version),
				Since:     c.since,
				Queued:    ss.queue.len(),
				Inflight:  len(ss.inflight),
				Slow:      !ss.keepingUp(),
				Waiting:   len(ss.waiters),
				QueuedMem: ss.queuedBytes,
			})
		}
		ss.mu.Unlock()
	}
	s.reg.mu.Unlock()
	slices.SortFunc(out, func(a, b ClientInfo) int {
		if c := strings.Compare(a.Listener, b.Listener); c != 0 {
			return c
		}
		return strings.Compare(a.ClientID, b.ClientID)
	})
	return out
}
