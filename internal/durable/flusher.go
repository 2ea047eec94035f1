package durable

import (
	"sync"
	"time"
)

// Flusher is a log's group-commit goroutine. It sleeps until kicked (no
// timer ticks while idle), holds the commit window open as the mode says,
// then calls Flush, which writes (and fsyncs) everything appended so far
// and completes whoever waited for it. So concurrent appenders share one
// write and one fsync per window.
//
// The window:
//
//   - SyncBatch: Interval after the kick, whatever else happens, so that
//     everything appended in it rides one commit. Kicks in the window are
//     not listened to (each append kicks; waking for each only to wait on
//     was a quarter of a busy bridge's goroutine wake-ups); the one left
//     in the channel is drained as the flush starts, since the flush
//     covers what it announced.
//   - SyncAlways: until someone waits (Waiting), or Interval.
//   - SyncNone: as SyncBatch, or no window at all with NoneAtOnce (a log
//     whose records must reach the file at once to survive kill -9).
//
// The zero value is not usable: fill the fields, then Start.
type Flusher struct {
	Mode     SyncMode
	Interval time.Duration
	// NoneAtOnce: with SyncNone, flush as soon as kicked.
	NoneAtOnce bool
	// Waiting reports whether an appender waits for the next commit
	// (SyncAlways ends the window then). Called by the flusher only.
	Waiting func() bool
	// Due, if set, returns when a flush is owed without a kick (zero:
	// none). Called by the flusher before it sleeps; such a flush has no
	// window.
	Due func() time.Time
	// Flush commits; final is true once, for the last flush as Stop
	// stops the flusher. Called by the flusher goroutine only, one at a
	// time.
	Flush func(final bool)

	kick chan struct{}
	quit chan struct{}
	wg   sync.WaitGroup
}

// Start starts the flusher goroutine; Stop ends it.
func (f *Flusher) Start() {
	f.kick = make(chan struct{}, 1)
	f.quit = make(chan struct{})
	f.wg.Add(1)
	go f.loop()
}

// Kick wakes the flusher without blocking: something was appended (or
// someone waits). Kicks coalesce.
func (f *Flusher) Kick() {
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// DrainKick takes a pending kick: the flush starting now covers what it
// announced. Called by Flush (under the log's lock, if its kicks are sent
// under it) so that a later flush is due only for what comes after.
func (f *Flusher) DrainKick() {
	select {
	case <-f.kick:
	default:
	}
}

// Stop ends the window early, runs the final Flush and waits for the
// goroutine to end. Call it once.
func (f *Flusher) Stop() {
	close(f.quit)
	f.wg.Wait()
}

func (f *Flusher) loop() {
	defer f.wg.Done()
	win := time.NewTimer(time.Hour)
	win.Stop()
	owed := time.NewTimer(time.Hour)
	owed.Stop()
	defer owed.Stop()
	for {
		var due <-chan time.Time
		if f.Due != nil {
			if at := f.Due(); !at.IsZero() {
				owed.Reset(time.Until(at))
				due = owed.C
			}
		}
		select {
		case <-f.kick:
		case <-due:
			f.Flush(false)
			continue
		case <-f.quit:
			f.Flush(true)
			return
		}
		owed.Stop()
		if !f.window(win) {
			f.Flush(true)
			return
		}
		f.DrainKick()
		f.Flush(false)
	}
}

// window waits for more appends to join the commit (see Flusher). It
// returns false when the flusher is stopping.
func (f *Flusher) window(t *time.Timer) bool {
	if f.Mode == SyncNone && f.NoneAtOnce {
		return true
	}
	t.Reset(f.Interval)
	defer t.Stop()
	if f.Mode != SyncAlways {
		select {
		case <-t.C:
			return true
		case <-f.quit:
			return false
		}
	}
	for {
		if f.Waiting != nil && f.Waiting() {
			return true
		}
		select {
		case <-t.C:
			return true
		case <-f.kick:
		case <-f.quit:
			return false
		}
	}
}
