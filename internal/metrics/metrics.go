// Package metrics serves Prometheus /metrics and /healthz on a local address.
//
// Nothing is counted twice: the collector reads the subsystems' own
// counters (gateway.Stats, bridge and serial link stats) at scrape time, so
// the message path pays nothing for metrics.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/edgegw/edgegw/gateway"
)

// BridgeStatus is what /metrics shows of one bridge.
type BridgeStatus struct {
	Name          string
	Connected     bool
	Since         time.Time // when the state last changed
	Connects      int64
	Disconnects   int64
	WatchdogTrips int64
	WriteTimeouts int64
	Inflight      int64
	Sent          int64
	Acked         int64
	Received      int64
	SpoolMessages int64
	SpoolBytes    int64
	SpoolDropped  int64
}

// LinkStatus is what /metrics shows of one serial link.
type LinkStatus struct {
	Name       string
	State      string // opening | open | waiting | stopped
	Opens      int64
	Failures   int64
	GoodFrames int64
	BadFrames  map[string]int64 // by kind: crc, cobs, oversize, short
}

// Sources are the functions the collector calls at scrape time. Any may be
// nil.
type Sources struct {
	Gateway func() gateway.Stats
	Bridges func() []BridgeStatus
	Links   func() []LinkStatus
	// Health reports problems; an empty slice is healthy.
	Health func() []string
}

type collector struct {
	src Sources

	connections, sessions, queuedMsgs, queuedBytes, inflight, retained, subs *prometheus.Desc
	received, sent, drops, takeovers, expired, refused, closes, slow         *prometheus.Desc

	bUp, bConnects, bDisconnects, bTrips, bWriteTimeouts, bInflight, bSent, bAcked, bReceived *prometheus.Desc
	bSpoolMsgs, bSpoolBytes, bSpoolDropped                                                    *prometheus.Desc

	lState, lOpens, lFailures, lGood, lBad *prometheus.Desc
}

func newCollector(src Sources) *collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("edgegw_"+name, help, labels, nil)
	}
	return &collector{
		src:         src,
		connections: d("connections", "Open client network connections."),
		sessions:    d("sessions", "Sessions by state.", "state"),
		queuedMsgs:  d("queued_messages", "Messages waiting in session queues."),
		queuedBytes: d("queued_bytes", "Payload bytes held by session queues and in-flight windows."),
		inflight:    d("inflight_messages", "Outgoing QoS 1/2 messages awaiting acknowledgement."),
		retained:    d("retained_messages", "Retained messages."),
		subs:        d("subscriptions", "Subscriptions in the topic tree."),
		received:    d("messages_received_total", "PUBLISH messages accepted."),
		sent:        d("messages_sent_total", "PUBLISH packets written to clients."),
		drops:       d("messages_dropped_total", "Messages not delivered to a session, by reason.", "reason"),
		takeovers:   d("session_takeovers_total", "Sessions taken over by a new connection."),
		expired:     d("sessions_expired_total", "Sessions destroyed by expiry."),
		refused:     d("connections_refused_total", "Connections refused at max_connections."),
		closes:      d("connections_closed_total", "Closed client connections, by reason.", "reason"),
		slow:        d("slow_consumers_total", "Subscribers that stopped draining while publishers waited on them."),

		bUp:            d("bridge_up", "1 if the bridge's uplink is connected.", "bridge"),
		bConnects:      d("bridge_connects_total", "Uplink connections established.", "bridge"),
		bDisconnects:   d("bridge_disconnects_total", "Uplink connections lost.", "bridge"),
		bTrips:         d("bridge_watchdog_trips_total", "Uplinks torn down by the ack watchdog.", "bridge"),
		bWriteTimeouts: d("bridge_write_timeouts_total", "Uplink writes that missed their deadline.", "bridge"),
		bInflight:      d("bridge_inflight_messages", "Upstream publishes awaiting acknowledgement.", "bridge"),
		bSent:          d("bridge_sent_total", "Messages published upstream.", "bridge"),
		bAcked:         d("bridge_acked_total", "Upstream publishes acknowledged.", "bridge"),
		bReceived:      d("bridge_received_total", "Messages received from upstream.", "bridge"),
		bSpoolMsgs:     d("bridge_spool_messages", "Messages in the bridge's spool.", "bridge"),
		bSpoolBytes:    d("bridge_spool_bytes", "Bytes in the bridge's spool.", "bridge"),
		bSpoolDropped:  d("bridge_spool_dropped_total", "Messages dropped from a full spool.", "bridge"),

		lState:    d("serial_link_state", "1 for the serial link's current state.", "listener", "state"),
		lOpens:    d("serial_link_opens_total", "Times the serial device was opened.", "listener"),
		lFailures: d("serial_link_open_failures_total", "Failed attempts to open the serial device.", "listener"),
		lGood:     d("serial_frames_total", "Good frames read from the serial link.", "listener"),
		lBad:      d("serial_frame_errors_total", "Frames dropped, by kind.", "listener", "kind"),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) { prometheus.DescribeByCollect(c, ch) }

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	g := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	ct := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, l...)
	}
	if c.src.Gateway != nil {
		st := c.src.Gateway()
		g(c.connections, float64(st.Connections))
		g(c.sessions, float64(st.SessionsConnected), "connected")
		g(c.sessions, float64(st.SessionsDisconnected), "disconnected")
		g(c.queuedMsgs, float64(st.QueuedMessages))
		g(c.queuedBytes, float64(st.QueuedBytes))
		g(c.inflight, float64(st.Inflight))
		g(c.retained, float64(st.Retained))
		g(c.subs, float64(st.Subscriptions))
		ct(c.received, float64(st.MessagesReceived))
		ct(c.sent, float64(st.MessagesSent))
		for r, n := range st.Drops {
			ct(c.drops, float64(n), r)
		}
		ct(c.takeovers, float64(st.Takeovers))
		ct(c.expired, float64(st.Expired))
		ct(c.refused, float64(st.Refused))
		ct(c.slow, float64(st.SlowConsumers))
		for r, n := range st.Closes {
			ct(c.closes, float64(n), r)
		}
	}
	if c.src.Bridges != nil {
		for _, b := range c.src.Bridges() {
			up := 0.0
			if b.Connected {
				up = 1
			}
			g(c.bUp, up, b.Name)
			ct(c.bConnects, float64(b.Connects), b.Name)
			ct(c.bDisconnects, float64(b.Disconnects), b.Name)
			ct(c.bTrips, float64(b.WatchdogTrips), b.Name)
			ct(c.bWriteTimeouts, float64(b.WriteTimeouts), b.Name)
			g(c.bInflight, float64(b.Inflight), b.Name)
			ct(c.bSent, float64(b.Sent), b.Name)
			ct(c.bAcked, float64(b.Acked), b.Name)
			ct(c.bReceived, float64(b.Received), b.Name)
			g(c.bSpoolMsgs, float64(b.SpoolMessages), b.Name)
			g(c.bSpoolBytes, float64(b.SpoolBytes), b.Name)
			ct(c.bSpoolDropped, float64(b.SpoolDropped), b.Name)
		}
	}
	if c.src.Links != nil {
		for _, l := range c.src.Links() {
			for _, s := range []string{"opening", "open", "waiting", "stopped"} {
				v := 0.0
				if s == l.State {
					v = 1
				}
				g(c.lState, v, l.Name, s)
			}
			ct(c.lOpens, float64(l.Opens), l.Name)
			ct(c.lFailures, float64(l.Failures), l.Name)
			ct(c.lGood, float64(l.GoodFrames), l.Name)
			for k, n := range l.BadFrames {
				ct(c.lBad, float64(n), l.Name, k)
			}
		}
	}
}

// Handler returns the /metrics and /healthz handler.
func Handler(src Sources) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(newCollector(src), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		var problems []string
		if src.Health != nil {
			problems = src.Health()
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if len(problems) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "unhealthy:")
			fmt.Fprintln(w, strings.Join(problems, "\n"))
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// Server serves Handler on an address.
type Server struct {
	Address string
	Sources Sources
	Log     *slog.Logger

	ln net.Listener
}

// Listen binds the address.
func (s *Server) Listen() error {
	ln, err := net.Listen("tcp", s.Address)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	s.ln = ln
	return nil
}

// Addr is the bound address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Serve runs until ctx is cancelled.
func (s *Server) Serve(ctx context.Context) error {
	if s.ln == nil {
		if err := s.Listen(); err != nil {
			return err
		}
	}
	hs := &http.Server{Handler: Handler(s.Sources), ReadHeaderTimeout: 5 * time.Second}
	stop := context.AfterFunc(ctx, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		hs.Shutdown(sctx)
	})
	defer stop()
	if s.Log != nil {
		s.Log.Info("metrics listening", "address", s.ln.Addr().String())
	}
	if err := hs.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("metrics: %w", err)
	}
	return nil
}
