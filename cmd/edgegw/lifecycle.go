package main

import (
	"context"
	"log/slog"

	"github.com/edgegw/edgegw/cmd/edgegw/internal/metrics"
	"github.com/edgegw/edgegw/gateway"
)

// logStopping logs once ctx is done that the gateway is draining: the
// listeners stop accepting, clients are disconnected and the bridges flush
// their spools. It returns nil then (an errgroup member).
func logStopping(ctx context.Context, log *slog.Logger, bridges int) error {
	<-ctx.Done()
	if bridges == 0 {
		log.Info("stopping: closing listeners and client connections")
	} else {
		log.Info("stopping: closing listeners and client connections, flushing bridge spools", "bridges", bridges)
	}
	return nil
}

// logDropped says, once everything has stopped, what the process held
// that ends with it. Without persistence.dir that is every queued message,
// every session, every retained message and the bridges' spools: logged at
// WARN when there was any, so that losing them is never silent.
func logDropped(log *slog.Logger, persistDir string, st gateway.Stats, bridges []metrics.BridgeStatus) {
	var spooled int64
	for _, b := range bridges {
		spooled += b.Spool.Messages
	}
	sessions := st.SessionsConnected + st.SessionsDisconnected
	attrs := []any{"queued_messages", st.QueuedMessages, "queued_bytes", st.QueuedBytes,
		"sessions", sessions, "retained", st.Retained, "bridge_spooled", spooled}
	if persistDir != "" {
		log.Info("shutdown: held at exit", append(attrs, "persistence_dir", persistDir)...)
		return
	}
	if st.QueuedMessages == 0 && sessions == 0 && st.Retained == 0 && spooled == 0 {
		log.Info("shutdown: nothing held in memory was dropped")
		return
	}
	log.Warn("shutdown: dropped what was held in memory only (set persistence.dir to keep it)", attrs...)
}
