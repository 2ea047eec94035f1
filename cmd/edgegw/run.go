package main

// Wiring: config → gateway, listeners, bridges, metrics. Everything runs
// under one errgroup; cancelling ctx (SIGINT/SIGTERM) is the only stop, and
// run returns after every subsystem has finished.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"golang.org/x/sync/errgroup"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/internal/config"
	"github.com/edgegw/edgegw/listeners"
)

// gatewayOptions maps the typed config onto the broker's options.
func gatewayOptions(cfg config.Config) gateway.Options {
	l := cfg.Limits
	return gateway.Options{
		MaxConnections:    l.MaxConnections,
		MaxPacketSize:     int(l.MaxPacketSize),
		ConnectTimeout:    l.ConnectTimeout,
		WriteTimeout:      l.WriteTimeout,
		MaxInflight:       l.MaxInflight,
		MaxQueuedMessages: l.MaxQueuedMessages,
		MaxQueuedBytes:    l.MaxQueuedBytes,
		MemoryBudget:      l.MemoryBudget,
		MaxSessionExpiry:  cfg.Sessions.MaxExpiry,
		ServerKeepAlive:   l.ServerKeepalive,
		MaxKeepAlive:      l.KeepaliveMax,
		AllowAnonymous:    cfg.Auth.AllowAnonymous,
	}
}

// server is one listener the gateway serves.
type server interface {
	Listen() error
	Serve(ctx context.Context, establish listeners.EstablishFunc) error
}

// run runs the gateway until ctx is cancelled; a nil error is a clean stop.
func run(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	gateway.Version = "edgegw " + version
	gw := gateway.New(gatewayOptions(cfg), log)

	// Bind every listener before anything is reported ready.
	var srvs []server
	for _, l := range cfg.Listeners {
		switch l.Type {
		case config.ListenerTCP:
			srvs = append(srvs, &listeners.TCP{Name: l.Name, Address: l.Address, Log: log})
		default:
			log.Warn("listener type not wired yet", "listener", l.Name, "type", l.Type)
			continue
		}
		if err := srvs[len(srvs)-1].Listen(); err != nil {
			return err
		}
	}

	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return gw.Run(ctx) })
	for _, s := range srvs {
		g.Go(func() error { return s.Serve(ctx, gw.ServeConn) })
	}
	log.Info("edgegw started", "version", version, "listeners", len(srvs))
	err := g.Wait()
	if err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("gateway: %w", err)
	}
	return nil
}
