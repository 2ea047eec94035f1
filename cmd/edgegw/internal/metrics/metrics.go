// Package metrics serves Prometheus /metrics and /healthz on a local address.
//
// Nothing is counted twice: the collector reads the subsystems' own
// counters (gateway.Stats, bridge and serial link stats) at scrape time, so
// the message path pays nothing for metrics.
//
// The text exposition format (version 0.0.4) is written by hand (expo.go),
// with the go_* and process_* families Prometheus' Go client would export
// (runtime.go). client_golang with its protobuf, procfs and expvar
// dependencies cost the gateway 2.2 MiB of resident memory at idle (1.6 MiB
// of mapped code and 0.5 MiB of heap from init-time registrations) and
// 2.3 MiB of binary, on a board with 512 MiB (bench/README.md).
package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"

	"github.com/edgegw/edgegw/gateway"
)

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

// collect writes the edgegw_* families from the sources.
func collect(w *expo, src Sources) {
	if src.Gateway != nil {
		st := src.Gateway()
		w.gauge("edgegw_connections", "Open client network connections.").
			v(float64(st.Connections))
		w.gauge("edgegw_sessions", "Sessions by state.").
			v(float64(st.SessionsConnected), "state", "connected").
			v(float64(st.SessionsDisconnected), "state", "disconnected")
		w.gauge("edgegw_queued_messages", "Messages waiting in session queues.").
			v(float64(st.QueuedMessages))
		w.gauge("edgegw_queued_bytes", "Payload bytes held by session queues and in-flight windows.").
			v(float64(st.QueuedBytes))
		w.gauge("edgegw_subscription_bytes", "Estimated topic tree memory of all subscriptions, counted in the memory budget.").
			v(float64(st.SubscriptionBytes))
		w.gauge("edgegw_inflight_messages", "Outgoing QoS 1/2 messages awaiting acknowledgement.").
			v(float64(st.Inflight))
		w.gauge("edgegw_retained_messages", "Retained messages.").
			v(float64(st.Retained))
		w.gauge("edgegw_retained_bytes", "Estimated memory of the retained messages: topic and payload bytes plus 512 per message (bounded by limits.max_retained_bytes).").
			v(float64(st.RetainedBytes))
		w.counter("edgegw_retained_refused_total", "Retained messages for a new topic not retained: the retained store was at its bound.").
			v(float64(st.RetainedRefused))
		w.gauge("edgegw_subscriptions", "Subscriptions in the topic tree.").
			v(float64(st.Subscriptions))
		w.counter("edgegw_messages_received_total", "PUBLISH messages accepted.").
			v(float64(st.MessagesReceived))
		w.counter("edgegw_messages_sent_total", "PUBLISH packets written to clients.").
			v(float64(st.MessagesSent))
		f := w.counter("edgegw_messages_dropped_total", "Messages not delivered to a session, by reason.")
		for _, r := range sortedKeys(st.Drops) {
			f.v(float64(st.Drops[r]), "reason", r)
		}
		w.counter("edgegw_session_takeovers_total", "Sessions taken over by a new connection.").
			v(float64(st.Takeovers))
		w.counter("edgegw_sessions_expired_total", "Sessions destroyed by expiry.").
			v(float64(st.Expired))
		w.counter("edgegw_connections_refused_total", "Connections refused at max_connections.").
			v(float64(st.Refused))
		f = w.counter("edgegw_connections_closed_total", "Closed client connections, by reason.")
		for _, r := range sortedKeys(st.Closes) {
			f.v(float64(st.Closes[r]), "reason", r)
		}
		f = w.counter("edgegw_denied_total", "Authorization refusals, by kind: publish, subscribe, delivery, session_owner, topic_limit, subscription_limit.")
		for _, k := range sortedKeys(st.Denied) {
			f.v(float64(st.Denied[k]), "kind", k)
		}
		w.counter("edgegw_slow_consumers_total", "Subscribers that stopped draining while publishers waited on them.").
			v(float64(st.SlowConsumers))
		w.counter("edgegw_auth_failures_total", "Logins refused for a bad user name or password.").
			v(float64(st.AuthFailures))
		w.counter("edgegw_messages_not_stored_total", "QoS 1/2 publishes not acknowledged because they could not be kept (a bridge spool, or the broker state on disk).").
			v(float64(st.NotStored))
		if s := st.State; s != nil { // persistence.dir: flash-write accounting
			w.counter("edgegw_state_bytes_written_total", "Bytes written by the broker state store (records and snapshots).").
				v(float64(s.BytesWritten))
			w.counter("edgegw_state_fsyncs_total", "fsyncs by the broker state store.").v(float64(s.Fsyncs))
			w.counter("edgegw_state_compactions_total", "Snapshots written by the broker state store.").v(float64(s.Compactions))
			w.gauge("edgegw_state_log_bytes", "Size of the broker state log.").v(float64(s.LogBytes))
			w.gauge("edgegw_state_live_bytes", "Size of a snapshot of the live broker state.").v(float64(s.LiveBytes))
			w.counter("edgegw_state_skipped_records_total", "Damaged broker state records skipped at start.").v(float64(s.SkippedRecords))
			failed := 0.0
			if s.Failed {
				failed = 1
			}
			w.gauge("edgegw_state_failed", "1 when an fsync of the broker state failed: new state is not durable.").v(failed)
		}
	}
	if src.Bridges != nil {
		bs := src.Bridges()
		collectBridges(w, bs)
		collectLedgers(w, bs)
	}
	if src.Links != nil {
		ls := src.Links()
		f := w.gauge("edgegw_serial_link_state", "1 for the serial link's current state.")
		for _, l := range ls {
			for _, s := range []string{"opening", "open", "waiting", "stopped"} {
				v := 0.0
				if s == l.State {
					v = 1
				}
				f.v(v, "listener", l.Name, "state", s)
			}
		}
		f = w.counter("edgegw_serial_link_opens_total", "Times the serial device was opened.")
		for _, l := range ls {
			f.v(float64(l.Opens), "listener", l.Name)
		}
		f = w.counter("edgegw_serial_link_open_failures_total", "Failed attempts to open the serial device.")
		for _, l := range ls {
			f.v(float64(l.Failures), "listener", l.Name)
		}
		f = w.counter("edgegw_serial_frames_total", "Good frames read from the serial link.")
		for _, l := range ls {
			f.v(float64(l.GoodFrames), "listener", l.Name)
		}
		f = w.counter("edgegw_serial_frame_errors_total", "Frames dropped, by kind.")
		for _, l := range ls {
			for _, k := range sortedKeys(l.BadFrames) {
				f.v(float64(l.BadFrames[k]), "kind", k, "listener", l.Name)
			}
		}
	}
}

// Handler returns the /metrics and /healthz handler.
func Handler(src Sources) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		e := newExpo()
		collect(e, src)
		collectRuntime(e)
		collectProcess(e)
		w.Header().Set("Content-Type", contentType)
		if r.Method == http.MethodHead {
			return
		}
		e.writeTo(w)
	})
	mux.HandleFunc("/ledger", func(w http.ResponseWriter, r *http.Request) { serveLedger(w, r, src) })
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
	// Pages serves every path other than /metrics and /healthz (the
	// status page, cmd/edgegw/internal/status) on the same address; nil: 404.
	Pages http.Handler

	ln net.Listener
}

// Listen binds the address.
func (s *Server) Listen() error {
	ln, err := net.Listen("tcp", s.Address)
	if err != nil {
		hint := "change metrics.address in the config, or set it to \"\" to turn metrics off"
		if errors.Is(err, syscall.EADDRINUSE) {
			hint = "another program listens there, ss -ltnp shows which; " + hint
		}
		return fmt.Errorf("metrics.address %s: %w (%s)", s.Address, err, hint)
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
	h := Handler(s.Sources)
	if s.Pages != nil {
		mux := http.NewServeMux()
		mux.Handle("/metrics", h)
		mux.Handle("/healthz", h)
		mux.Handle("/ledger", h)
		mux.Handle("/", s.Pages)
		h = mux
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
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
