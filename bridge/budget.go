package bridge

// Design note: the uplink byte budget. Two limits on the bytes the bridge
// writes to the uplink (every byte the connection writes: publishes,
// re-sends, acks, pings, subscribes), both optional:
//
//   - rate_limit, bytes per second: a token bucket holding at most one
//     second of tokens. The picker waits, before it hands out a record,
//     until the bucket is not in debt; the connection debits what it
//     actually wrote. So the rate over any interval is at most the limit
//     plus one second's burst plus one message.
//   - budget, bytes per period ("500MiB per 30d"): once the period's bytes
//     are used, only the high lane is sent (an alarm still goes, and is
//     counted, so high traffic may overrun the budget); normal and bulk
//     wait in the spool for the next period, where the spool's overflow
//     policy and expiry apply to them as to any backlog. Periods are
//     consecutive from the first start, on the wall clock.
//
// The period's state (its start and the bytes used) is kept in the file
// "budget" in the spool directory, written at most once a second while it
// changes and when the bridge stops: a crash forgets at most the last
// second's bytes.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/edgegw/edgegw/bridge/spool"
)

// budget is a bridge's uplink byte budget; safe for concurrent use. A nil
// *budget allows everything.
type budget struct {
	rate   float64       // bytes/s; 0: no rate limit
	limit  int64         // bytes per period; 0: no period budget
	period time.Duration //
	path   string        // the state file; "" : not persisted
	now    func() time.Time

	mu     sync.Mutex
	waited time.Duration // the picker's waits for the bucket, in all
	tokens float64
	last   time.Time // of the last refill
	start  time.Time // of the current period
	used   int64     // bytes written in it
	dirty  bool
}

// newBudget returns the budget of cfg, loading its period state from dir
// (nil if cfg sets no limit).
func newBudget(rate, limit int64, period time.Duration, dir string, now func() time.Time) (*budget, error) {
	if rate <= 0 && limit <= 0 {
		return nil, nil
	}
	t := now()
	bg := &budget{rate: float64(rate), limit: limit, period: period, now: now, tokens: float64(rate), last: t, start: t}
	if dir != "" && limit > 0 {
		bg.path = filepath.Join(dir, budgetFileName)
		st, ok, err := readBudget(bg.path)
		if err != nil {
			return nil, err
		}
		if ok {
			bg.start, bg.used = st.start, st.used
		}
		bg.dirty = !ok
	}
	bg.rollLocked(t)
	return bg, nil
}

// rollLocked moves to the period containing t. Caller holds mu.
func (bg *budget) rollLocked(t time.Time) {
	if bg.limit <= 0 || t.Before(bg.start.Add(bg.period)) {
		return
	}
	n := t.Sub(bg.start) / bg.period
	bg.start = bg.start.Add(n * bg.period)
	bg.used = 0
	bg.dirty = true
}

// wrote debits n bytes written to the uplink.
func (bg *budget) wrote(n int) {
	if bg == nil || n <= 0 {
		return
	}
	bg.mu.Lock()
	defer bg.mu.Unlock()
	bg.refillLocked(bg.now())
	bg.tokens -= float64(n)
	bg.used += int64(n)
	bg.dirty = true
}

// refillLocked adds the tokens earned since the last refill (at most one
// second's worth in the bucket). Caller holds mu.
func (bg *budget) refillLocked(t time.Time) {
	if bg.rate > 0 {
		bg.tokens = math.Min(bg.rate, bg.tokens+t.Sub(bg.last).Seconds()*bg.rate)
	}
	bg.last = t
	bg.rollLocked(t)
}

// laneAllowed reports whether lane may send in this period, and if not,
// how long until the next period.
func (bg *budget) laneAllowed(lane spool.Lane) (bool, time.Duration) {
	if bg == nil || bg.limit <= 0 || lane == spool.LaneHigh {
		return true, 0
	}
	bg.mu.Lock()
	defer bg.mu.Unlock()
	t := bg.now()
	bg.rollLocked(t)
	if bg.used < bg.limit {
		return true, 0
	}
	return false, bg.start.Add(bg.period).Sub(t)
}

// wait waits until the token bucket is out of debt (the rate limit), or
// ctx ends.
func (bg *budget) wait(ctx context.Context) error {
	if bg == nil || bg.rate <= 0 {
		return nil
	}
	for {
		bg.mu.Lock()
		bg.refillLocked(bg.now())
		debt := -bg.tokens
		bg.mu.Unlock()
		if debt <= 0 {
			return nil
		}
		start := time.Now()
		t := time.NewTimer(time.Duration(debt / bg.rate * float64(time.Second)))
		var err error
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			err = ctx.Err()
		}
		bg.mu.Lock()
		bg.waited += time.Since(start)
		bg.mu.Unlock()
		if err != nil {
			return err
		}
	}
}

// budgetStats is what Stats shows of a budget.
type budgetStats struct {
	start, end time.Time // of the current period (zero without a period budget)
	used       int64     // bytes written in it (without a period budget: since start)
	waited     time.Duration
}

// state returns the budget's state for Stats.
func (bg *budget) state() budgetStats {
	bg.mu.Lock()
	defer bg.mu.Unlock()
	bg.rollLocked(bg.now())
	st := budgetStats{used: bg.used, waited: bg.waited}
	if bg.limit > 0 {
		st.start, st.end = bg.start, bg.start.Add(bg.period)
	}
	return st
}

// persist writes the period state if it changed.
func (bg *budget) persist() error {
	if bg == nil || bg.path == "" {
		return nil
	}
	bg.mu.Lock()
	if !bg.dirty {
		bg.mu.Unlock()
		return nil
	}
	st := budgetState{start: bg.start, used: bg.used}
	bg.dirty = false
	bg.mu.Unlock()
	if err := writeBudget(bg.path, st); err != nil {
		bg.mu.Lock()
		bg.dirty = true
		bg.mu.Unlock()
		return err
	}
	return nil
}

// keep persists the state every budgetPersistEvery until ctx ends, then
// once more. Run owns it.
func (bg *budget) keep(ctx context.Context, log func(error)) {
	if bg == nil || bg.path == "" {
		return
	}
	t := time.NewTicker(budgetPersistEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if err := bg.persist(); err != nil {
				log(err)
			}
			return
		case <-t.C:
			if err := bg.persist(); err != nil {
				log(err)
			}
		}
	}
}

const (
	budgetPersistEvery = time.Second
	budgetFileName     = "budget"
	budgetMagic        = "EGBU"
	budgetVersion      = 1
	budgetSize         = 28 // magic 4 | version 1 | 3 reserved | start 8 | used 8 | crc 4
)

// budgetState is the content of the budget file.
type budgetState struct {
	start time.Time
	used  int64
}

func writeBudget(path string, st budgetState) error {
	b := make([]byte, budgetSize)
	copy(b, budgetMagic)
	b[4] = budgetVersion
	binary.LittleEndian.PutUint64(b[8:], uint64(st.start.UnixNano()))
	binary.LittleEndian.PutUint64(b[16:], uint64(st.used))
	binary.LittleEndian.PutUint32(b[24:], crc32.Checksum(b[:24], crc32.MakeTable(crc32.Castagnoli)))
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("write budget state: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write budget state: %w", err)
	}
	return nil
}

// readBudget reads the budget file; ok is false if it is missing or
// damaged (the period starts afresh: at most one period's bytes more).
// A file of another version is an error: not guessed at.
func readBudget(path string) (st budgetState, ok bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return st, false, nil
	}
	if err != nil {
		return st, false, fmt.Errorf("read budget state: %w", err)
	}
	if len(b) >= 8 && string(b[:4]) == budgetMagic && b[4] != budgetVersion && b[5]|b[6]|b[7] == 0 {
		return st, false, fmt.Errorf("budget state %s: unknown version %d", path, b[4])
	}
	if len(b) != budgetSize || string(b[:4]) != budgetMagic ||
		binary.LittleEndian.Uint32(b[24:]) != crc32.Checksum(b[:24], crc32.MakeTable(crc32.Castagnoli)) {
		return st, false, nil
	}
	return budgetState{start: time.Unix(0, int64(binary.LittleEndian.Uint64(b[8:]))), used: int64(binary.LittleEndian.Uint64(b[16:]))}, true, nil
}
