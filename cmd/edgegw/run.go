package main

// Wiring: config → gateway, listeners, metrics, systemd. Everything runs
// under one errgroup; cancelling ctx (SIGINT/SIGTERM) is the only stop, and
// runGateway returns after every subsystem has finished. SIGHUP reloads what
// can change without dropping clients.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"golang.org/x/sync/errgroup"

	"github.com/edgegw/edgegw/bridge"
	"github.com/edgegw/edgegw/cmd/edgegw/internal/metrics"
	"github.com/edgegw/edgegw/cmd/edgegw/internal/status"
	"github.com/edgegw/edgegw/devices/framing"
	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/auth"
	"github.com/edgegw/edgegw/internal/config"
	"github.com/edgegw/edgegw/listeners"
)

// gatewayOptions maps the typed config onto the broker's options.
func gatewayOptions(cfg config.Config) gateway.Options {
	l := cfg.Limits
	return gateway.Options{
		MaxConnections:      l.MaxConnections,
		MaxPacketSize:       int(l.MaxPacketSize),
		ConnectTimeout:      l.ConnectTimeout,
		WriteTimeout:        l.WriteTimeout,
		FlowStall:           l.SlowSubscriberAfter,
		MaxInflight:         l.MaxInflight,
		MaxQueuedMessages:   l.MaxQueuedMessages,
		MaxQueuedBytes:      l.MaxQueuedBytes,
		MemoryBudget:        l.MemoryBudget,
		MaxSessionExpiry:    cfg.Sessions.MaxExpiry,
		ServerKeepAlive:     l.ServerKeepalive,
		MaxKeepAlive:        l.KeepaliveMax,
		MaxTopicLevels:      l.MaxTopicLevels,
		MaxTopicLength:      l.MaxTopicLength,
		MaxSubscriptions:    l.MaxSubscriptions,
		MaxRetainedMessages: l.MaxRetainedMessages,
		MaxRetainedBytes:    l.MaxRetainedBytes,
		AllowAnonymous:      cfg.Auth.AllowAnonymous,
	}
}

// configError is a start failure caused by the config or a file it names
// (normally found by preflight first; a file can change in between). run
// exits 2 for it, which the unit does not restart.
type configError struct{ err error }

func (e configError) Error() string { return e.err.Error() }
func (e configError) Unwrap() error { return e.err }

// bindError classifies a failure to bind: a port the process may not
// bind (below 1024 without CAP_NET_BIND_SERVICE) will not heal by
// restarting and is a config problem; a port in use or an address not
// (yet) configured may, and stays a runtime failure.
func bindError(err error) error {
	if errors.Is(err, syscall.EACCES) {
		return configError{fmt.Errorf("%w (ports below 1024 need CAP_NET_BIND_SERVICE: see the comment in edgegw.service; or use a port >= 1024)", err)}
	}
	return err
}

// listener is one transport the gateway serves.
type listener interface {
	Listen() error
	Serve(ctx context.Context, establish listeners.EstablishFunc) error
	Close() error // only for a listener Serve never ran
}

// runParams is what runGateway needs; path and level allow SIGHUP reloads.
type runParams struct {
	cfg   config.Config
	path  string
	env   []string // the environment the config was loaded with: a reload loads it with the same
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
	opts := gatewayOptions(cfg)
	opts.Version = "edgegw " + buildVersion()

	var files *auth.Files
	if cfg.Auth.PasswordFile != "" || cfg.Auth.ACLFile != "" {
		files = &auth.Files{PasswordFile: cfg.Auth.PasswordFile, ACLFile: cfg.Auth.ACLFile}
		if err := files.Load(); err != nil {
			return configError{err}
		}
		opts.Authenticator, opts.Authorizer = files, files
	}
	state, loaded := openState(cfg.Persistence, log)
	if state != nil {
		opts.Store = state
		defer state.Close() // after every subsystem has stopped: the final flush
	}
	gw := gateway.New(opts, log)
	restoreState(gw, loaded, log)

	// Until the errgroup owns them, listeners bound and bridges opened here
	// are released by hand if a later step fails.
	var lns []listener
	var bridges []*bridge.Bridge
	started := false
	defer func() {
		if started {
			return
		}
		for _, ln := range lns {
			ln.Close()
		}
		for _, b := range bridges {
			b.Close()
		}
	}()

	// Bind every listener before anything is reported ready.
	var reloaders []*listeners.CertReloader
	var serials []*listeners.Serial
	for _, l := range cfg.Listeners {
		ln, rl, err := newListener(l, cfg, log)
		if err != nil {
			return configError{err}
		}
		if rl != nil {
			reloaders = append(reloaders, rl)
		}
		if s, ok := ln.(*listeners.Serial); ok {
			serials = append(serials, s)
		}
		if err := ln.Listen(); err != nil {
			return bindError(err)
		}
		lns = append(lns, ln)
	}

	failed := 0
	for _, bc := range cfg.Bridges {
		b, err := bridge.New(bridgeConfig(bc, cfg.Persistence), gw, log)
		if err != nil {
			return configError{err} // names the bridge itself
		}
		// The spool and its sinks exist before any client can publish, so
		// no message bound upstream is accepted without being spooled. A
		// spool that cannot open (full disk, read-only, no permission)
		// fails that bridge only: it logs the cause, says "failed" on its
		// state topic and in /healthz, refuses its messages and keeps
		// retrying in Run, while the broker and the other bridges run.
		if err := b.Open(); err != nil {
			failed++
		}
		bridges = append(bridges, b)
	}

	var ms *metrics.Server
	var page *status.Handler
	if cfg.Metrics.Address != "" {
		page = newStatusPage(cfg, gw, bridges, serials, files)
		ms = &metrics.Server{Address: cfg.Metrics.Address, Log: log, Pages: page, Sources: metrics.Sources{
			Gateway: gw.Stats,
			Bridges: func() []metrics.BridgeStatus { return bridgeStatuses(bridges) },
			Links:   func() []metrics.LinkStatus { return linkStatuses(serials) },
			Health:  newHealth(bridges, cfg.Metrics.BridgeDownAfter),
		}}
		if err := ms.Listen(); err != nil {
			return bindError(err)
		}
	}

	started = true
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return gw.Run(ctx) })
	for _, b := range bridges {
		g.Go(func() error { return b.Run(ctx) })
	}
	for _, ln := range lns {
		g.Go(func() error { return ln.Serve(ctx, gw.ServeConn) })
	}
	if ms != nil {
		g.Go(func() error { return ms.Serve(ctx) })
		g.Go(func() error { return page.History.Run(ctx) })
	}
	sv := supervisor{
		log:   log,
		probe: func() bool { return probe(func() { gw.Stats() }, 5*time.Second) },
		status: func() string {
			st := gw.Stats()
			up := 0
			for _, b := range bridges {
				if b.Stats().State == bridge.Connected {
					up++
				}
			}
			return fmt.Sprintf("%d clients connected, %d sessions, %d queued, bridges %d/%d up",
				st.SessionsConnected, st.SessionsConnected+st.SessionsDisconnected, st.QueuedMessages, up, len(bridges))
		},
		reload: func() { reloadAll(p, files, reloaders, bridges) },
	}
	g.Go(func() error { return sv.run(ctx) })
	g.Go(func() error { return logStopping(ctx, log, len(bridges)) })
	if len(bridges) > 0 {
		g.Go(func() error { return publishBridgeSys(ctx, gw, bridges, sysInterval) })
	}
	log.Info("edgegw started", "version", buildVersion(), "listeners", len(lns), "bridges", len(bridges), "bridges_failed", failed)
	err := g.Wait()
	logDropped(log, cfg.Persistence.Dir, gw.Stats(), bridgeStatuses(bridges))
	if err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("gateway: %w", err)
	}
	return nil
}

// supervisor talks to systemd (READY, STATUS, WATCHDOG, STOPPING) and
// handles SIGHUP. Outside systemd the notifications are no-ops.
type supervisor struct {
	log    *slog.Logger
	probe  func() bool   // true when the gateway answers
	status func() string // one-line STATUS=
	reload func()        // SIGHUP
}

// run sends READY=1 (the caller has bound every listener and opened every
// bridge), then pings the watchdog at half its interval while the probe
// answers, until ctx is done; STOPPING=1 on the way out.
func (sv supervisor) run(ctx context.Context) error {
	notify := func(state string) {
		if _, err := daemon.SdNotify(false, state); err != nil {
			sv.log.Debug("sd_notify", "err", err)
		}
	}
	notify(daemon.SdNotifyReady)
	defer notify(daemon.SdNotifyStopping)

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	// A wedged broker gets no ping, so systemd restarts it.
	var tick <-chan time.Time
	if iv, err := daemon.SdWatchdogEnabled(false); err == nil && iv > 0 {
		t := time.NewTicker(iv / 2)
		defer t.Stop()
		tick = t.C
	}
	notify("STATUS=" + sv.status())
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick:
			if sv.probe() {
				notify(daemon.SdNotifyWatchdog)
				notify("STATUS=" + sv.status())
			} else {
				sv.log.Error("gateway unresponsive; withholding the watchdog ping")
			}
		case <-hup:
			sv.reload()
		}
	}
}

// probe reports whether touch (which takes the gateway's locks) returns
// within d.
func probe(touch func(), d time.Duration) bool {
	done := make(chan struct{})
	go func() { // ends when touch returns; if it never does, systemd restarts the process
		touch()
		close(done)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// reloadAll is SIGHUP: reload, then the listeners' TLS certificates, then
// one closing line, "reloaded" at INFO only when every part was applied.
func reloadAll(p runParams, files *auth.Files, reloaders []*listeners.CertReloader, bridges []*bridge.Bridge) {
	ok := reload(p, files, bridges)
	for _, rl := range reloaders {
		if err := rl.Reload(); err != nil {
			p.log.Error("reload: tls certificate; keeping the previous one", "err", err)
			ok = false
		}
	}
	if ok {
		p.log.Info("reloaded", "log_level", strings.ToLower(p.level.Level().String()))
	} else {
		p.log.Warn("reload incomplete: the parts named above kept their previous state")
	}
}

// reload re-reads the config file and applies what can change live: the
// log level, the auth files and the bridges' topic rules and connection
// settings. Everything else is named in the log, by key, as needing a
// restart. It reports whether everything it tried was applied;
// each failure is logged, one line per problem.
func reload(p runParams, files *auth.Files, bridges []*bridge.Bridge) (ok bool) {
	log := p.log
	log.Info("reloading", "config", p.path)
	env := p.env
	if env == nil {
		env = os.Environ()
	}
	cfg, err := config.Load(p.path, env)
	if err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			log.Error("reload: config invalid; keeping the running config", "problem", line)
		}
		return false
	}
	ok = true
	p.level.Set(parseLevel(cfg.Log.Level))
	if files != nil {
		if err := files.Load(); err != nil {
			for _, line := range strings.Split(err.Error(), "\n") {
				log.Error("reload: auth files; keeping the previous rules", "err", line)
			}
			ok = false
		}
	}
	// p.cfg is the config the process started with, which is what still
	// runs for everything a reload cannot change: compare against it.
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
	br, bok := reloadBridges(log, cfg, bridges)
	restart = append(restart, br...)
	ok = ok && bok
	if len(restart) > 0 {
		log.Warn("reload: these changes need a restart", "changed", strings.Join(restart, ", "))
	}
	return ok
}

// newListener builds the listener for one config entry (and its certificate
// reloader when it uses TLS).
func newListener(l config.Listener, cfg config.Config, log *slog.Logger) (listener, *listeners.CertReloader, error) {
	var tlsCfg *tls.Config
	var rl *listeners.CertReloader
	if l.TLS.Enabled() {
		var err error
		tlsCfg, rl, err = listeners.TLSConfig(l.TLS.Cert, l.TLS.Key, l.TLS.ClientCA)
		if err != nil {
			return nil, nil, fmt.Errorf("listener %s: %w", l.Name, err)
		}
		rl.Log = log
	}
	switch l.Type {
	case config.ListenerTCP:
		return &listeners.TCP{Name: l.Name, Address: l.Address, TLS: tlsCfg, UseCNAsUsername: l.TLS.UseCNAsUsername, Log: log}, rl, nil
	case config.ListenerWebSocket:
		return &listeners.WebSocket{Name: l.Name, Address: l.Address, Path: l.Path, TLS: tlsCfg,
			UseCNAsUsername: l.TLS.UseCNAsUsername, AllowedOrigins: l.AllowedOrigins,
			WriteTimeout: cfg.Limits.WriteTimeout, Log: log}, rl, nil
	case config.ListenerSerial:
		mode, err := framing.ParseMode(l.Framing)
		if err != nil {
			return nil, nil, fmt.Errorf("listener %s: %w", l.Name, err)
		}
		return &listeners.Serial{Name: l.Name, Device: l.Device, Baud: l.Baud, Framing: mode,
			MaxFrame: int(l.MaxFrameSize), Log: log}, nil, nil
	}
	return nil, nil, fmt.Errorf("listener %s: unknown type %q", l.Name, l.Type)
}

// bridgeConfig maps one bridges[] entry; its spool lives in
// <persistence.dir>/bridges/<name> (memory-backed temp dir without one).
func bridgeConfig(b config.Bridge, p config.Persistence) bridge.Config {
	bc := bridge.Config{
		Name: b.Name, Addresses: b.Addresses, AddressOrder: b.AddressOrder, ClientID: b.ClientID, Username: b.Username, Password: b.Password,
		CleanSession: b.CleanSession, Protocol: b.Protocol, BridgeFlag: b.BridgeFlag, UpstreamMaxQoS: b.UpstreamMaxQoS, QoSNotGranted: b.QoSNotGranted, KeepAlive: b.Keepalive, ConnectTimeout: b.ConnectTimeout,
		WriteTimeout: b.WriteTimeout, AckTimeout: b.AckTimeout, MaxInflight: int(b.MaxInflight), MaxInflightQoS2: b.MaxInflightQoS2,
		ReconnectMin: b.ReconnectMin, ReconnectMax: b.ReconnectMax,
		TLS: bridge.TLSConfig{CA: b.TLS.CA, Cert: b.TLS.Cert, Key: b.TLS.Key, ServerName: b.TLS.ServerName,
			InsecureSkipVerify: b.TLS.InsecureSkipVerify},
		SpoolMaxBytes: b.Spool.MaxBytes, SpoolSync: p.Sync, SpoolSyncInterval: p.SyncInterval,
		Drain: b.Drain, RateLimit: b.RateLimit, MaxPacketSize: int(b.MaxPacketSize),
	}
	bc.BacklogShare, _ = config.ParsePercent(b.BacklogShare) // validated
	if b.Budget != "" {
		bc.BudgetBytes, bc.BudgetPeriod, _ = config.ParseBudget(b.Budget) // validated
	}
	if p.Dir != "" {
		bc.SpoolDir = filepath.Join(p.Dir, "bridges", b.Name)
	}
	for _, t := range b.Topics {
		bc.Topics = append(bc.Topics, bridge.Rule{Pattern: t.Pattern, Direction: bridge.Direction(t.Direction),
			QoS: t.QoS, LocalPrefix: t.LocalPrefix, RemotePrefix: t.RemotePrefix, MaxAge: t.MaxAge, Priority: t.Priority})
	}
	return bc
}

func bridgeStatuses(bridges []*bridge.Bridge) []metrics.BridgeStatus {
	out := make([]metrics.BridgeStatus, 0, len(bridges))
	for _, b := range bridges {
		st := b.Stats()
		bs := metrics.BridgeStatus{
			Name: b.Name(), Connected: st.State == bridge.Connected, LastError: st.LastError,
			Connects: int64(st.Connects), Disconnects: int64(st.Disconnects), ConnectFailures: int64(st.ConnectFailures),
			WatchdogTrips: int64(st.WatchdogTrips), WriteTimeouts: int64(st.WriteTimeouts),
			Inflight: st.InFlight, Sent: int64(st.Sent), Resumed: int64(st.Resumed), Acked: int64(st.Acked),
			Received: int64(st.Received), InboundRefused: int64(st.InboundFailed), Refused: int64(st.AcceptFailed),
			Spool: metrics.SpoolStatus{Messages: st.SpoolMessages, Bytes: st.SpoolBytes, Dropped: int64(st.SpoolDropped)},
		}
		if ss, ok := b.SpoolStats(); ok {
			bs.Spool.CorruptTails, bs.Spool.Skipped, bs.Spool.DamagedBytes = ss.CorruptTail, ss.Skipped, ss.DamagedBytes
			bs.Spool.Quarantined, bs.Spool.EmptySegments, bs.Spool.AckDamage = ss.Quarantined, ss.EmptySegments, ss.AckDamage
			bs.Spool.IDGap, bs.Spool.NoSpace = int64(ss.IDGap), int64(ss.NoSpace)
			bs.Spool.BytesWritten, bs.Spool.Syncs = int64(ss.BytesWritten), int64(ss.Syncs)
			bs.Spool.CoveredCommits = int64(ss.CoveredCommits)
		}
		bs.Ledger = ledgerStatus(b)
		bs.UpstreamRetried = int64(st.UpstreamRetried)
		bs.QoSDowngraded, bs.QoSHeld = int64(st.QoSDowngraded), st.QoSHeld
		if u := st.Upstream; u.Protocol != "" {
			bs.Upstream = &metrics.UpstreamStatus{Protocol: u.Protocol, BridgeFlag: u.BridgeFlag, BridgeFlagRefused: u.BridgeFlagRefused,
				MaxQoS: int(u.MaxQoS), RetainAvailable: u.RetainAvailable, ReceiveMaximum: u.ReceiveMaximum, MaxPacketSize: u.MaxPacketSize, QoS2Window: u.QoS2Window}
		}
		bs.UpstreamDropped = make(map[string]int64)
		for _, rc := range bridge.PermanentRefusals() { // every reason, zero included
			bs.UpstreamDropped[reasonLabel(rc)] = int64(st.UpstreamDroppedBy[rc])
		}
		if st.RateLimit > 0 || st.BudgetLimit > 0 {
			bs.Budget = &metrics.BudgetStatus{Used: st.BudgetUsed, Limit: st.BudgetLimit, PeriodEnd: st.BudgetEnd,
				Rate: st.RateLimit, RateWaited: st.RateWaited}
		}
		out = append(out, bs)
	}
	return out
}

// reasonLabel is an MQTT 5 reason code as a metric label:
// "not_authorized", "qos_not_supported".
func reasonLabel(rc byte) string {
	return strings.ReplaceAll(strings.ToLower(bridge.ReasonName(rc)), " ", "_")
}

func linkStatuses(serials []*listeners.Serial) []metrics.LinkStatus {
	out := make([]metrics.LinkStatus, 0, len(serials))
	for _, s := range serials {
		st := s.Stats()
		out = append(out, metrics.LinkStatus{
			Name: s.Name, State: st.State, Opens: int64(st.Opens), Failures: int64(st.Failures),
			GoodFrames: int64(st.Frames.Good),
			BadFrames: map[string]int64{"crc": int64(st.Frames.BadCRC), "cobs": int64(st.Frames.BadCOBS),
				"oversize": int64(st.Frames.Oversize), "short": int64(st.Frames.Short)},
		})
	}
	return out
}

// newHealth reports a bridge as a problem once it has been disconnected for
// longer than grace (an uplink flapping for a few seconds is not unhealthy;
// one down for minutes is), and at once if it failed (its spool cannot
// open).
func newHealth(bridges []*bridge.Bridge, grace time.Duration) func() []string {
	return func() []string {
		var problems []string
		for _, b := range bridges {
			st := b.Stats()
			if st.State == bridge.Connected {
				continue
			}
			if st.State == bridge.Failed { // no grace: it will not come back by itself soon
				problems = append(problems, fmt.Sprintf("bridge %s failed: %s", b.Name(), st.LastError))
				continue
			}
			if d := time.Since(st.Since); d > grace {
				problems = append(problems, fmt.Sprintf("bridge %s disconnected for %s: %s", b.Name(), d.Round(time.Second), st.LastError))
			}
		}
		return problems
	}
}
