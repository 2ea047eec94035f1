package gcheadroom

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

const mib = 1 << 20

func TestPercent(t *testing.T) {
	for _, tc := range []struct {
		percent     int
		floor, scan int64
		want        int
	}{
		{50, 8 * mib, 4 * mib, 200},      // small live data: the floor decides
		{50, 8 * mib, 3 * mib, 267},      // rounded up: 266.67 % would fall short
		{50, 8 * mib, 16 * mib, 50},      // exactly the floor at gc_percent
		{50, 8 * mib, 64 * mib, 50},      // large live data: gc_percent decides
		{100, 64 * mib, 1, 1<<31 - 1},    // capped at what the runtime takes
		{50, 0, 4 * mib, 50},             // no floor
		{50, 8 * mib, 0, 50},             // no collection yet
		{200, 8 * mib, 1 * mib, 800},     // percent given as the least
		{400, 8 * mib, 1 * mib * 4, 400}, // above the floor already
		{10, 1 * mib, 100 * mib, 10},     // the lowest gc_percent stays
		{10, 100 * mib, 100 * mib, 100},  // ... unless the floor is larger
		{50, 8*mib + 1, 16 * mib, 51},    // one byte over the floor at 50 %
		{50, 16*mib - 1, 32*mib - 2, 50}, // headroom 16 MiB - 1 at 50 %
		{50, 16 * mib, 32*mib - 2, 51},   // two bytes short at 50 %
		{0, 8 * mib, 8 * mib, 100},       // gc_percent 0 (collect continuously) lifted too
		{50, 1<<62 - 1, 1, 1<<31 - 1},    // no overflow
		{50, 8 * mib, 1<<62 - 1, 50},     // no overflow
	} {
		if got := Percent(tc.percent, tc.floor, tc.scan); got != tc.want {
			t.Errorf("Percent(%d, %d, %d) = %d, want %d", tc.percent, tc.floor, tc.scan, got, tc.want)
		}
		if got := Percent(tc.percent, tc.floor, tc.scan); tc.floor > 0 && tc.scan > 0 && tc.want < 1<<31-1 &&
			tc.scan*int64(got)/100 < tc.floor && got > tc.percent {
			t.Errorf("Percent(%d, %d, %d) = %d leaves a headroom under the floor", tc.percent, tc.floor, tc.scan, got)
		}
	}
}

// readRuntime returns the runtime's GC percent, heap goal and live heap.
func readRuntime() (percent, goal, live uint64) {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}, {Name: "/gc/heap/goal:bytes"}, {Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64(), s[1].Value.Uint64(), s[2].Value.Uint64()
}

// collectUntil runs collections until ok (the Keeper runs after each one,
// on the runtime's cleanup goroutine, so not necessarily before GC
// returns).
func collectUntil(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("no collection brought %s", what)
		}
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
}

// TestKeeperKeepsTheFloor drives the real runtime: with a small live heap
// the runtime's heap goal is at least the floor above the live heap
// (gc_percent alone would give a quarter of it); with a live heap whose
// gc_percent already gives more, gc_percent is back; after Stop nothing
// is set any more.
func TestKeeperKeepsTheFloor(t *testing.T) {
	old := debug.SetGCPercent(50)
	defer debug.SetGCPercent(old)
	const floor = 32 * mib
	k := Start(50, floor, debug.SetGCPercent)
	defer k.Stop()

	collectUntil(t, "the floor", func() bool {
		p, goal, live := readRuntime()
		return p > 50 && int(p) == k.Applied() && goal-live >= floor
	})
	if p, goal, live := readRuntime(); goal-live < floor || p <= 50 {
		t.Fatalf("small heap: percent %d, goal %d over a live heap of %d: headroom under %d", p, goal, live, floor)
	}

	big := make([]byte, 128*mib) // live data whose 50 % is twice the floor
	for i := range big {
		big[i] = byte(i)
	}
	collectUntil(t, "gc_percent back", func() bool {
		p, _, _ := readRuntime()
		return p == 50 && k.Applied() == 50
	})
	runtime.KeepAlive(big)

	k.Stop()
	debug.SetGCPercent(77)
	runs := k.runs.Load()
	collectUntil(t, "a stopped Keeper's last call", func() bool { return k.runs.Load() > runs })
	runtime.GC()
	if p, _, _ := readRuntime(); p != 77 {
		t.Fatalf("a stopped Keeper set the GC percent to %d", p)
	}
	if n := k.runs.Load(); n != runs+1 {
		t.Fatalf("a stopped Keeper ran %d more times: it re-armed itself", n-runs)
	}
}
