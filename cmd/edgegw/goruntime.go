package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"

	"github.com/edgegw/edgegw/internal/config"
	"github.com/edgegw/edgegw/internal/procs"
)

// runtimeSettings is what is in effect after applyRuntime: the config's
// values, or the environment's where Env names it.
type runtimeSettings struct {
	GCPercent   int    // limits.gc_percent, or GOGC's (-1: off)
	MemoryLimit int64  // limits.memory_limit (or its derived value), or GOMEMLIMIT's
	Env         string // "GOGC", "GOMEMLIMIT" or both: the variables that overrode the config
}

// runtimeKnobs are the runtime/debug setters and what reads the runtime's
// current values; tests pass their own (the real ones change the whole
// process).
type runtimeKnobs struct {
	setGCPercent   func(int) int
	setMemoryLimit func(int64) int64
	current        func() (gcPercent int, memoryLimit int64)
}

// processRuntime is the real thing.
func processRuntime() runtimeKnobs {
	return runtimeKnobs{debug.SetGCPercent, debug.SetMemoryLimit, currentRuntime}
}

// currentRuntime reads the GC percent and the memory limit in effect
// without changing them (runtime/debug has no getter for the percent).
func currentRuntime() (int, int64) {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(int32(s[0].Value.Uint64())), debug.SetMemoryLimit(-1) // -1: GOGC=off; a negative limit only reads
}

// applyRuntime sets the Go runtime's GC target and soft memory limit from
// the limits section, so that the shipped service (and the benchmark, which
// runs it with its config) collects as configured without a systemd
// Environment= line. GOGC and GOMEMLIMIT in the environment win: the
// runtime already read them, and an operator who sets them means it.
func applyRuntime(l config.Limits, getenv func(string) string, knobs runtimeKnobs) runtimeSettings {
	var rs runtimeSettings
	rs.GCPercent, rs.MemoryLimit = knobs.current()
	if getenv("GOGC") == "" {
		knobs.setGCPercent(l.GCPercent)
		rs.GCPercent = l.GCPercent
	} else {
		rs.Env = "GOGC"
	}
	if getenv("GOMEMLIMIT") == "" {
		rs.MemoryLimit = l.DerivedMemoryLimit()
		knobs.setMemoryLimit(rs.MemoryLimit)
	} else if rs.Env == "" {
		rs.Env = "GOMEMLIMIT"
	} else {
		rs.Env += " GOMEMLIMIT"
	}
	return rs
}

// governProcs runs the procs Governor (one processor while the gateway is
// nearly idle, all under load) unless GOMAXPROCS in the environment fixed
// the count. It returns what the starting log line shows ("1..4", or the
// fixed count with "GOMAXPROCS") and a func that stops the Governor and
// waits until it has.
func governProcs(ctx context.Context, getenv func(string) string) (procsShown string, stop func()) {
	// The runtime ignores a GOMAXPROCS that is not a positive number (and
	// chooses itself), so the Governor does too.
	if n, err := strconv.Atoi(getenv("GOMAXPROCS")); err == nil && n > 0 {
		return fmt.Sprintf("%d (GOMAXPROCS)", runtime.GOMAXPROCS(0)), func() {}
	}
	p := procs.DefaultPolicy()
	if p.Max <= 1 {
		return "1", func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	g := procs.New(p, procs.Runtime())
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.Run(ctx)
	}()
	return fmt.Sprintf("1..%d", p.Max), func() { cancel(); <-done }
}
