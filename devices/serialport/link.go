package serialport

// Design note. A Link is driven by the single goroutine that calls Run; it
// starts no goroutine of its own except the context.AfterFunc that closes the
// open port when ctx is cancelled, which is what unblocks a handler stuck in
// Read. State and counters are atomics so that metrics and health checks can
// read them from anywhere.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// Default backoff bounds for reopening a device.
const (
	DefaultMinBackoff = 250 * time.Millisecond
	DefaultMaxBackoff = 10 * time.Second
)

// State is the state of a Link.
type State int32

// Link states.
const (
	StateStopped State = iota // Run is not running
	StateOpening              // trying to open the device
	StateOpen                 // the device is open and the handler runs
	StateWaiting              // the device is missing or was lost; waiting to retry
)

// String returns the lowercase state name.
func (s State) String() string {
	switch s {
	case StateStopped:
		return "stopped"
	case StateOpening:
		return "opening"
	case StateOpen:
		return "open"
	case StateWaiting:
		return "waiting"
	}
	return fmt.Sprintf("State(%d)", int32(s))
}

// HandleFunc serves an open device. It should return when the port fails
// (the device vanished) or when ctx is cancelled; the Link closes the port
// after it returns, and also closes it when ctx is cancelled so that a
// blocked Read returns.
type HandleFunc func(ctx context.Context, port io.ReadWriteCloser) error

// OpenFunc opens a device. The default is Open, returning a *Port.
type OpenFunc func(cfg Config) (io.ReadWriteCloser, error)

// LinkConfig configures a Link.
type LinkConfig struct {
	Port       Config
	MinBackoff time.Duration // first retry delay; 0 selects DefaultMinBackoff
	MaxBackoff time.Duration // retry delay cap; 0 selects DefaultMaxBackoff
	Open       OpenFunc      // nil selects Open
}

// LinkStats are a Link's counters since it was created.
type LinkStats struct {
	Opens    uint64 // successful opens
	Failures uint64 // failed open attempts
	Lost     uint64 // times an open device failed or its handler returned
	Reopens  uint64 // immediate reopens the handler asked for (ErrReopen)
}

// Link keeps one device open. Create it with NewLink and drive it with Run.
type Link struct {
	cfg LinkConfig
	log *slog.Logger

	state                          atomic.Int32
	opens, failures, lost, reopens atomic.Uint64
}

// NewLink returns a Link for cfg.Port.Path. log may be nil.
func NewLink(cfg LinkConfig, log *slog.Logger) *Link {
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = DefaultMinBackoff
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = DefaultMaxBackoff
	}
	cfg.MaxBackoff = max(cfg.MaxBackoff, cfg.MinBackoff)
	if cfg.Open == nil {
		cfg.Open = func(c Config) (io.ReadWriteCloser, error) { return Open(c) }
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Link{cfg: cfg, log: log.With("device", cfg.Port.Path)}
}

// State returns the current state.
func (l *Link) State() State { return State(l.state.Load()) }

// Stats returns the counters.
func (l *Link) Stats() LinkStats {
	return LinkStats{Opens: l.opens.Load(), Failures: l.failures.Load(), Lost: l.lost.Load(), Reopens: l.reopens.Load()}
}

// Run opens the device and calls handle while it is open, until ctx is
// cancelled. A device that is missing at start, cannot be opened, or vanishes
// is retried with exponential backoff (MinBackoff doubling to MaxBackoff, with
// jitter); the backoff restarts from MinBackoff after the device stayed open
// for at least MaxBackoff. Each state change is logged once, not each
// attempt. Run returns nil when ctx is cancelled; it never fails because of
// the device. Run must not be called concurrently on the same Link.
func (l *Link) Run(ctx context.Context, handle HandleFunc) error {
	if handle == nil {
		return errors.New("serialport: nil handler")
	}
	defer l.state.Store(int32(StateStopped))
	backoff := l.cfg.MinBackoff
	logged := StateStopped // the last state announced in the log
	for ctx.Err() == nil {
		l.state.Store(int32(StateOpening))
		port, err := l.cfg.Open(l.cfg.Port)
		if err != nil {
			l.failures.Add(1)
			l.state.Store(int32(StateWaiting))
			if logged != StateWaiting {
				l.log.Warn("device unavailable", "err", err, "retry", backoff)
				logged = StateWaiting
			} else {
				l.log.Debug("device open failed", "err", err, "retry", backoff)
			}
			if !wait(ctx, jitter(backoff)) {
				break
			}
			backoff = min(2*backoff, l.cfg.MaxBackoff)
			continue
		}

		l.opens.Add(1)
		l.state.Store(int32(StateOpen))
		l.log.Info("device open")
		logged = StateOpen
		opened := time.Now()
		err = l.serve(ctx, port, handle)
		if ctx.Err() != nil {
			l.log.Info("device closed")
			break
		}
		if errors.Is(err, ErrReopen) {
			// The handler wants a fresh start on a healthy device: reopen
			// at once, without backoff, and it is not a loss.
			l.log.Debug("device reopen", "reason", err)
			l.reopens.Add(1)
			continue
		}
		l.lost.Add(1)
		l.state.Store(int32(StateWaiting))
		logged = StateWaiting
		if time.Since(opened) >= l.cfg.MaxBackoff {
			backoff = l.cfg.MinBackoff
		}
		l.log.Warn("device lost", "err", err, "retry", backoff)
		if !wait(ctx, jitter(backoff)) {
			break
		}
		backoff = min(2*backoff, l.cfg.MaxBackoff)
	}
	return nil
}

// serve runs handle on an open port and closes the port afterwards.
func (l *Link) serve(ctx context.Context, port io.ReadWriteCloser, handle HandleFunc) error {
	// Closing the port is the only way to unblock a Read on a device
	// without deadlines; the callback runs once, on cancellation.
	closed := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		_ = port.Close()
		close(closed)
	})
	err := handle(ctx, port)
	if stop() {
		_ = port.Close()
	} else {
		<-closed // the callback is running: join it, it is ours
	}
	if err == nil {
		err = errors.New("handler returned")
	}
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("serve: device hung up: %w", err)
	}
	return fmt.Errorf("serve: %w", err)
}

// ErrReopen, returned (wrapped) by a HandleFunc, asks Run to close the port
// and open it again at once: not a lost device, no backoff. The raw-framing
// serial listener uses it between logical connections.
var ErrReopen = errors.New("serialport: reopen requested")

// jitter returns a duration in [d/2, d].
func jitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d/2+1)
}

// wait waits for d or ctx; it reports false if ctx was cancelled.
func wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
