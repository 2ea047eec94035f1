package bridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgegw/edgegw/bridge/spool"
	"github.com/edgegw/edgegw/gateway"
)

// Gateway is what a bridge needs from the local broker (gateway.Server
// implements it).
type Gateway interface {
	// Publish routes a message from the cloud locally; it never blocks.
	Publish(m *gateway.Message) error
	// AddSink registers the bridge's spool for local messages matching filter.
	AddSink(name, filter string, sink gateway.Sink) error
	// RemoveSink undoes AddSink.
	RemoveSink(name, filter string)
}

// Bridge is one uplink to a cloud broker. Create it with New, run it with
// Run.
type Bridge struct {
	cfg    Config
	c      atomic.Pointer[compiled] // swapped by Reload (reload.go)
	rl     reloadState
	gw     Gateway
	log    *slog.Logger
	origin string

	spool    atomic.Pointer[spool.Spool] // set by Open before the sinks are added
	budget   *budget                     // uplink byte budget (budget.go); set by Open with the spool, nil: none
	openMu   sync.Mutex                  // serialises Open
	tmpDir   string                      // spool dir made by Open when none is configured; removed by Run
	filters  []string                    // local filters registered as sinks by Open
	lastRead atomic.Int64                // unix nanos of the last byte read from upstream
	win      atomic.Pointer[sendWindow]  // the current connection's window, for Stats
	running  atomic.Bool

	flagRefused map[string]bool // addresses that refused the bridge flag (upstream.go); owner goroutine only
	refusals    refusalLog
	failLog     failLog        // connect failure lines (log.go); only touched by the owner goroutine
	stuck       stuckRecord    // connections ended right after the same record (stuck.go); owner goroutine only
	collide     collisionWatch // connections ended right after they came up (collision.go); owner goroutine only

	proto         string // Protocol311, Protocol5 or ProtocolAuto (until 5 is refused); owner goroutine only
	upRefused     refusalCounts
	upRefusedLog  refusalLog5
	uplinkProto   atomic.Value             // string: the protocol of the current or last connection
	upstream      atomic.Pointer[Upstream] // what the current or last connection's upstream granted (upstream.go)
	qosHeld       atomic.Bool              // a message above the granted QoS is held (qos_not_granted: hold)
	qosDowngraded atomic.Uint64            // messages sent at a lower QoS than their rule's

	// The session engine (uplinkengine.go).
	eng        engineState // owner goroutine only
	engResumed atomic.Uint64

	stateMu   sync.Mutex // serialises state changes and their publication
	state     State
	published bool
	addr      string
	since     time.Time // when state last changed
	// lastErr is why the bridge last failed or disconnected. Atomic, not
	// under stateMu: a Failed bridge's sink reads it, and a sink must not
	// take stateMu, which setState holds while it publishes: another
	// bridge's state publication, routed to this sink by a $SYS out rule,
	// would wait for it while this bridge's waits for that one's.
	lastErr atomic.Pointer[string]

	connects, disconnects, connectFailures, trips, writeTimeouts atomic.Uint64
	sent, acked, received, inboundFailed, acceptFailed           atomic.Uint64
	// peerAcked counts the completions the broker acknowledged (PUBACK,
	// PUBCOMP, an MQTT 5 success code), not QoS 0 writes: the reconnect
	// backoff's proof of progress (loop.go).
	peerAcked atomic.Uint64
	inflight  atomic.Int64
	rejected  [len(rejectReasons)]atomic.Uint64 // by rejectReason
}

// New validates cfg (filling in defaults) and returns a bridge that is not
// yet running.
func New(cfg Config, gw Gateway, log *slog.Logger) (*Bridge, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if gw == nil {
		return nil, errors.New("bridge: nil gateway")
	}
	cfg.setDefaults()
	c, err := cfg.compile()
	if err != nil {
		return nil, err
	}
	b := &Bridge{
		cfg:    cfg,
		gw:     gw,
		log:    log.With("bridge", cfg.Name),
		origin: gateway.BridgeOrigin(cfg.Name),
	}
	b.c.Store(c)
	b.rl.wake = make(chan struct{}, 1)
	b.proto = c.proto
	b.refusals = refusalLog{log: b.log, every: refusalLogEvery}
	return b, nil
}

// Name returns the bridge's name.
func (b *Bridge) Name() string { return b.cfg.Name }

// Open opens the spool and registers the out rules with the gateway as
// sinks, so that no local message accepted after Open returns misses the
// spool. The caller (cmd/edgegw) opens every bridge before its listeners
// accept clients; Run opens it if the caller did not.
//
// If the spool cannot open, the bridge is Failed: Open logs the cause,
// publishes "failed" on its state topic and returns the error, and the
// sinks are registered all the same, refusing every message (a local QoS
// 1/2 publisher is not acknowledged). Run keeps trying to open the spool.
// The caller need not stop anything else.
func (b *Bridge) Open() error {
	b.openMu.Lock()
	defer b.openMu.Unlock()
	if b.spool.Load() != nil {
		return nil
	}
	err := b.openSpool()
	if err != nil {
		b.setState(Failed, "", err)
	} else {
		b.setState(Disconnected, "", nil)
	}
	if b.filters == nil {
		b.filters = []string{} // non-nil: the sinks are registered (reload.go)
		for _, r := range b.c.Load().out {
			if err := b.gw.AddSink(b.cfg.Name, r.localFilter, sink{b}); err != nil {
				b.log.Error("add sink", "topic", r.localFilter, "err", err)
				continue
			}
			b.filters = append(b.filters, r.localFilter)
		}
	}
	return err
}

// openSpool opens the spool (in a temporary directory if none is
// configured). Caller holds openMu.
func (b *Bridge) openSpool() error {
	dir, mode := b.cfg.SpoolDir, b.c.Load().sync
	if dir == "" {
		tmp, err := os.MkdirTemp("", "edgegw-bridge-*")
		if err != nil {
			return fmt.Errorf("bridge %s: spool dir: %w", b.cfg.Name, err)
		}
		b.tmpDir = tmp
		dir, mode = tmp, spool.SyncNone
		b.log.Warn("no spool dir: messages bound upstream do not survive a restart")
	}
	sp, err := spool.Open(spool.Options{
		Dir: dir, MaxBytes: b.cfg.SpoolMaxBytes, Sync: mode, SyncInterval: b.cfg.SpoolSyncInterval,
		Logger: b.log,
	})
	if err != nil {
		if b.tmpDir != "" {
			os.RemoveAll(b.tmpDir)
		}
		b.tmpDir = ""
		return fmt.Errorf("bridge %s: open spool: %w", b.cfg.Name, err)
	}
	bg, err := newBudget(b.cfg.RateLimit, b.cfg.BudgetBytes, b.cfg.BudgetPeriod, dir, time.Now)
	if err != nil {
		sp.Close()
		return fmt.Errorf("bridge %s: %w", b.cfg.Name, err)
	}
	b.budget = bg
	b.spool.Store(sp)
	return nil
}

// reopen retries Open with backoff until the spool opens (true) or ctx
// ends (false).
func (b *Bridge) reopen(ctx context.Context) bool {
	bo := backoff{min: b.cfg.ReconnectMin, max: b.cfg.ReconnectMax}
	for {
		t := time.NewTimer(bo.next())
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
		if err := b.Open(); err == nil {
			b.log.Info("spool opened; bridge starting")
			return true
		}
	}
}

// Close releases what Open took when Run will not be called (a start that
// failed after the bridge was opened): the sinks, the spool and a temporary
// spool directory. After Run has started, cancelling its ctx is the stop.
func (b *Bridge) Close() error {
	if b.running.Load() {
		return fmt.Errorf("bridge %s: Close while running; cancel Run's context", b.cfg.Name)
	}
	b.openMu.Lock()
	defer b.openMu.Unlock()
	for _, f := range b.filters {
		b.gw.RemoveSink(b.cfg.Name, f)
	}
	b.filters = nil
	sp := b.spool.Load()
	if sp == nil {
		return nil
	}
	err := sp.Close()
	b.spool.Store(nil)
	if b.tmpDir != "" {
		os.RemoveAll(b.tmpDir)
		b.tmpDir = ""
	}
	return err
}

// Run opens the bridge if needed and keeps the uplink connected until ctx
// ends. A spool that cannot open leaves the bridge Failed (see Open) while
// Run retries it with backoff; that is not an error of Run. It returns
// after every goroutine it started has ended, the sinks are removed and
// the spool is closed.
func (b *Bridge) Run(ctx context.Context) error {
	if !b.running.CompareAndSwap(false, true) {
		return fmt.Errorf("bridge %s: Run called twice", b.cfg.Name)
	}
	defer b.removeSinks()
	if err := b.Open(); err != nil && !b.reopen(ctx) {
		return nil
	}
	if b.tmpDir != "" {
		defer os.RemoveAll(b.tmpDir)
	}
	sp := b.spool.Load()

	bctx, stopBudget := context.WithCancel(context.Background())
	budgetDone := make(chan struct{})
	go func() {
		defer close(budgetDone)
		b.budget.keep(bctx, func(err error) { b.log.Warn("budget state not saved", "err", err) })
	}()
	b.loop(ctx)
	b.closeEngine()
	stopBudget()
	<-budgetDone

	b.removeSinks()
	b.setState(Disconnected, "", errors.New("stopped"))
	if err := sp.Close(); err != nil {
		return fmt.Errorf("bridge %s: close spool: %w", b.cfg.Name, err)
	}
	return nil
}
