package main

import (
	"testing"

	"github.com/edgegw/edgegw/internal/config"
)

// TestApplyRuntime: the limits section sets the GC target and the memory
// limit (derived from memory_budget when memory_limit is 0), and GOGC /
// GOMEMLIMIT in the environment leave the runtime's own setting alone, and
// it is what applyRuntime reports (the starting line shows it).
func TestApplyRuntime(t *testing.T) {
	var knobs runtimeKnobs
	var gotGC []int
	var gotLimit []int64
	knobs.setGCPercent = func(p int) int { gotGC = append(gotGC, p); return 100 }
	knobs.setMemoryLimit = func(n int64) int64 { gotLimit = append(gotLimit, n); return n }
	knobs.current = func() (int, int64) { return 200, 1 << 30 } // what the runtime took from GOGC=200 GOMEMLIMIT=1GiB

	l := config.Default().Limits
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }

	rs := applyRuntime(l, getenv, knobs)
	if rs != (runtimeSettings{GCPercent: config.DefaultGCPercent, MemoryLimit: 160 * config.MiB}) {
		t.Fatalf("defaults: %+v", rs)
	}
	if len(gotGC) != 1 || gotGC[0] != config.DefaultGCPercent || len(gotLimit) != 1 || gotLimit[0] != 160*config.MiB {
		t.Fatalf("defaults: SetGCPercent %v, SetMemoryLimit %v", gotGC, gotLimit)
	}

	l.MemoryLimit, l.GCPercent = 96*config.MiB, -1
	gotGC, gotLimit = nil, nil
	rs = applyRuntime(l, getenv, knobs)
	if rs.GCPercent != -1 || rs.MemoryLimit != 96*config.MiB || gotGC[0] != -1 || gotLimit[0] != 96*config.MiB {
		t.Fatalf("explicit: %+v, %v %v", rs, gotGC, gotLimit)
	}

	env["GOGC"], env["GOMEMLIMIT"] = "200", "1GiB"
	gotGC, gotLimit = nil, nil
	rs = applyRuntime(l, getenv, knobs)
	if len(gotGC) != 0 || len(gotLimit) != 0 || rs != (runtimeSettings{GCPercent: 200, MemoryLimit: 1 << 30, Env: "GOGC GOMEMLIMIT"}) {
		t.Fatalf("environment set: %+v, SetGCPercent %v, SetMemoryLimit %v", rs, gotGC, gotLimit)
	}
	delete(env, "GOGC")
	gotGC, gotLimit = nil, nil
	rs = applyRuntime(l, getenv, knobs)
	if len(gotGC) != 1 || len(gotLimit) != 0 || rs.Env != "GOMEMLIMIT" || rs.MemoryLimit != 1<<30 || rs.GCPercent != -1 {
		t.Fatalf("GOMEMLIMIT set: %+v, SetGCPercent %v, SetMemoryLimit %v", rs, gotGC, gotLimit)
	}
}
