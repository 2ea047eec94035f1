package bridge

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgegw/edgegw/bridge/spool"
)

type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// TestTokenBucket: the bucket holds one second of tokens, goes into debt
// by what was written, and is refilled at the rate.
func TestTokenBucket(t *testing.T) {
	clk := &fakeClock{}
	clk.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	bg, err := newBudget(1000, 0, 0, "", clk.now)
	if err != nil {
		t.Fatal(err)
	}
	debt := func() float64 {
		bg.mu.Lock()
		defer bg.mu.Unlock()
		bg.refillLocked(clk.now())
		return -bg.tokens
	}
	bg.wrote(3000)
	if d := debt(); d != 2000 {
		t.Fatalf("debt %v, want 2000", d)
	}
	clk.advance(time.Second)
	if d := debt(); d != 1000 {
		t.Fatalf("debt %v after 1 s, want 1000", d)
	}
	clk.advance(time.Hour) // idle: at most one second of tokens
	if d := debt(); d != -1000 {
		t.Fatalf("debt %v after an hour idle, want -1000 (one second's burst)", d)
	}
	if ok, _ := bg.laneAllowed(spool.LaneBulk); !ok {
		t.Fatal("no period budget set, yet a lane is held")
	}
}

// TestPeriodBudget: once the period's bytes are used only high goes, the
// state survives a restart (the file), and the next period starts afresh.
func TestPeriodBudget(t *testing.T) {
	dir := t.TempDir()
	clk := &fakeClock{}
	clk.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	bg, err := newBudget(0, 10000, time.Hour, dir, clk.now)
	if err != nil {
		t.Fatal(err)
	}
	bg.wrote(9999)
	if ok, _ := bg.laneAllowed(spool.LaneBulk); !ok {
		t.Fatal("held before the budget is used")
	}
	bg.wrote(1)
	clk.advance(20 * time.Minute)
	for _, l := range []spool.Lane{spool.LaneBulk, spool.LaneNormal} {
		if ok, wait := bg.laneAllowed(l); ok || wait != 40*time.Minute {
			t.Fatalf("lane %s allowed %v, wait %s; want held 40m", l, ok, wait)
		}
	}
	if ok, _ := bg.laneAllowed(spool.LaneHigh); !ok {
		t.Fatal("high held")
	}
	if err := bg.persist(); err != nil {
		t.Fatal(err)
	}

	// A restart within the period: still used up.
	bg2, err := newBudget(0, 10000, time.Hour, dir, clk.now)
	if err != nil {
		t.Fatal(err)
	}
	if used := bg2.state().used; used != 10000 {
		t.Fatalf("after a restart used %d, want 10000", used)
	}
	if ok, _ := bg2.laneAllowed(spool.LaneBulk); ok {
		t.Fatal("bulk allowed after a restart in a used-up period")
	}
	clk.advance(40 * time.Minute)
	if ok, _ := bg2.laneAllowed(spool.LaneBulk); !ok {
		t.Fatal("bulk held in the next period")
	}
	if st := bg2.state(); st.used != 0 || !st.start.Equal(time.Date(2026, 1, 1, 1, 0, 0, 0, time.UTC)) || !st.end.Equal(st.start.Add(time.Hour)) {
		t.Fatalf("next period %v to %v with %d used", st.start, st.end, st.used)
	}

	// A damaged file: the period starts afresh; another version: refused.
	path := filepath.Join(dir, budgetFileName)
	b, _ := os.ReadFile(path)
	b[17] ^= 1
	os.WriteFile(path, b, 0o600)
	if bg3, err := newBudget(0, 10000, time.Hour, dir, clk.now); err != nil {
		t.Fatal(err)
	} else if used := bg3.state().used; used != 0 {
		t.Fatalf("damaged state gave used %d", used)
	}
	b[17] ^= 1
	b[4] = budgetVersion + 1
	os.WriteFile(path, b, 0o600)
	if _, err := newBudget(0, 10000, time.Hour, dir, clk.now); err == nil {
		t.Fatal("a budget file of an unknown version was accepted")
	}
}
