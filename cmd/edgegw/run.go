package main

// Placeholder wiring, owned by the lead, who replaces it with the gateway,
// listeners, bridges, metrics and systemd notify. It binds the tcp
// listeners so the binary is runnable and its config path is exercised.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"

	"github.com/edgegw/edgegw/internal/config"
)

// run runs the gateway until ctx is cancelled; a nil error is a clean stop.
func run(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			_ = ln.Close()
		}
	}()
	for _, l := range cfg.Listeners {
		if l.Type != config.ListenerTCP {
			log.Warn("listener type not wired yet", "listener", l.Name, "type", l.Type)
			continue
		}
		ln, err := net.Listen("tcp", l.Address)
		if err != nil {
			return fmt.Errorf("listener %s: %w", l.Name, err)
		}
		lns = append(lns, ln)
		log.Info("listening", "listener", l.Name, "address", ln.Addr().String())
	}
	<-ctx.Done()
	if err := context.Cause(ctx); !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
