package main

import (
	"log/slog"
	"path/filepath"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/store"
	"github.com/edgegw/edgegw/internal/config"
)

// openState opens the broker's durable state in <persistence.dir>/state.
// A state that cannot be opened at all (no permission, a read-only mount)
// does not stop the local broker: it is logged at ERROR and the broker
// runs with its state in memory only. A damaged state file is handled by
// the store itself (damaged records skipped, the file moved aside).
// Returns nil without persistence.dir or on failure.
func openState(p config.Persistence, log *slog.Logger) (*store.Store, *store.State) {
	if p.Dir == "" {
		return nil, nil
	}
	mode, err := store.ParseSync(p.Sync)
	if err != nil {
		mode = store.SyncBatch // validated by config; unreachable
	}
	st, state, err := store.Open(store.Options{Dir: filepath.Join(p.Dir, "state"), Sync: mode,
		SyncInterval: p.SyncInterval, Log: log})
	if err != nil {
		log.Error("broker state cannot be kept on disk; retained messages and sessions will not survive a restart", "err", err)
		return nil, nil
	}
	return st, state
}

// restoreState gives the gateway what the store loaded and logs it.
func restoreState(gw *gateway.Server, state *store.State, log *slog.Logger) {
	if state == nil {
		return
	}
	r := gw.Restore(state)
	log.Info("broker state restored", "retained", r.Retained, "sessions", r.Sessions, "queued", r.Queued, "expired", r.Expired)
}
