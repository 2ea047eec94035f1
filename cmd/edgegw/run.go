package main

// Wiring: config → gateway, listeners, metrics, systemd. Everything runs
// under one errgroup; cancelling ctx (SIGINT/SIGTERM) is the only stop, and
// runGateway returns after every subsystem has finished. SIGHUP reloads what
// can change without dropping clients.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"golang.org/x/sync/errgroup"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/auth"
	"github.com/edgegw/edgegw/internal/config"
	"github.com/edgegw/edgegw/internal/metrics"
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

// listener is one transport the gateway serves.
type listener interface {
	Listen() error
	Serve(ctx context.Context, establish listeners.EstablishFunc) error
}

// runParams is what runGateway needs; path and level allow SIGHUP reloads.
type runParams struct {
	cfg   config.Config
	path  string
	log   *slog.Logger
	level *slog.LevelVar
}

// run runs the gateway from a config until ctx is cancelled (no reloads).
func run(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	return runGateway(ctx, runParams{cfg: cfg, log: log, level: new(slog.LevelVar)})
}

// runGateway runs the gateway until ctx is cancelled; nil is a clean stop.
func runGateway(ctx context.Context, p runParams) error {
	cfg, log := p.cfg, p.log
	gateway.Version = "edgegw " + buildVersion()
	opts := gatewayOptions(cfg)

	var files *auth.Files
	if cfg.Auth.PasswordFile != "" || cfg.Auth.ACLFile != "" {
		files = &auth.Files{PasswordFile: cfg.Auth.PasswordFile, ACLFile: cfg.Auth.ACLFile}
		if err := files.Load(); err != nil {
			return fmt.Errorf("auth: %w", err)
		}
		opts.Authenticator, opts.Authorizer = files, files
	}
	gw := gateway.New(opts, log)

	// Bind every listener before anything is reported ready.
	var lns []listener
	for _, l := range cfg.Listeners {
		var ln listener
		switch l.Type {
		case config.ListenerTCP:
			ln = &listeners.TCP{Name: l.Name, Address: l.Address, Log: log}
		default:
			log.Warn("listener type not wired yet", "listener", l.Name, "type", l.Type)
			continue
		}
		if err := ln.Listen(); err != nil {
			return err
		}
		lns = append(lns, ln)
	}
	var ms *metrics.Server
	if cfg.Metrics.Address != "" {
		ms = &metrics.Server{Address: cfg.Metrics.Address, Log: log, Sources: metrics.Sources{
			Gateway: gw.Stats,
		}}
		if err := ms.Listen(); err != nil {
			return err
		}
	}

	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return gw.Run(ctx) })
	for _, ln := range lns {
		g.Go(func() error { return ln.Serve(ctx, gw.ServeConn) })
	}
	if ms != nil {
		g.Go(func() error { return ms.Serve(ctx) })
	}
	g.Go(func() error {
		return supervise(ctx, p, gw, files)
	})
	log.Info("edgegw started", "version", buildVersion(), "listeners", len(lns))
	err := g.Wait()
	if err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("gateway: %w", err)
	}
	return nil
}

// supervise talks to systemd (READY, STATUS, WATCHDOG, STOPPING) and handles
// SIGHUP until ctx is done. Outside systemd the notifications are no-ops.
func supervise(ctx context.Context, p runParams, gw *gateway.Server, files *auth.Files) error {
	log := p.log
	notify := func(state string) {
		if _, err := daemon.SdNotify(false, state); err != nil {
			log.Debug("sd_notify", "err", err)
		}
	}
	notify(daemon.SdNotifyReady)
	defer notify(daemon.SdNotifyStopping)

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	// The watchdog is pinged at half its interval, and only after a probe
	// of the gateway's locks answers: a wedged broker gets restarted.
	var tick <-chan time.Time
	if iv, err := daemon.SdWatchdogEnabled(false); err == nil && iv > 0 {
		t := time.NewTicker(iv / 2)
		defer t.Stop()
		tick = t.C
	}
	status := func() {
		st := gw.Stats()
		notify(fmt.Sprintf("STATUS=%d clients connected, %d sessions, %d queued", st.SessionsConnected,
			st.SessionsConnected+st.SessionsDisconnected, st.QueuedMessages))
	}
	status()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick:
			if probe(gw, 5*time.Second) {
				notify(daemon.SdNotifyWatchdog)
				status()
			} else {
				log.Error("gateway unresponsive; withholding the watchdog ping")
			}
		case <-hup:
			reload(p, files)
		}
	}
}

// probe reports whether the gateway's state can be read within d.
func probe(gw *gateway.Server, d time.Duration) bool {
	done := make(chan struct{})
	go func() { // bounded: returns when Stats returns; a wedged gateway is restarted by systemd
		gw.Stats()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// reload re-reads the config file and applies what can change live: the
// log level and the auth files. Everything else is named in the log as
// needing a restart.
func reload(p runParams, files *auth.Files) {
	log := p.log
	log.Info("reloading", "config", p.path)
	cfg, err := config.Load(p.path, os.Environ())
	if err != nil {
		log.Error("reload: config invalid; keeping the running config", "err", err)
		return
	}
	p.level.Set(parseLevel(cfg.Log.Level))
	if files != nil {
		if err := files.Load(); err != nil {
			log.Error("reload: auth files; keeping the previous rules", "err", err)
		}
	}
	var restart []string
	old := p.cfg
	if cfg.Auth.PasswordFile != old.Auth.PasswordFile || cfg.Auth.ACLFile != old.Auth.ACLFile {
		restart = append(restart, "auth file paths")
	}
	if fmt.Sprint(cfg.Listeners) != fmt.Sprint(old.Listeners) {
		restart = append(restart, "listeners")
	}
	if cfg.Limits != old.Limits || cfg.Sessions != old.Sessions || cfg.Auth.AllowAnonymous != old.Auth.AllowAnonymous {
		restart = append(restart, "limits/sessions/allow_anonymous")
	}
	if cfg.Metrics != old.Metrics || cfg.Persistence != old.Persistence {
		restart = append(restart, "metrics/persistence")
	}
	if len(restart) > 0 {
		log.Warn("reload: these changes need a restart", "changed", strings.Join(restart, ", "))
	}
	log.Info("reloaded", "log_level", cfg.Log.Level)
}
