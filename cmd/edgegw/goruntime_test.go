package main

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/edgegw/edgegw/internal/config"
	"github.com/edgegw/edgegw/internal/testutil"
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

// TestBinaryStartingLineShowsRuntimeInEffect: the starting line shows the
// GC percent and memory limit in effect (docs/config.md): the config's, or
// GOGC's and GOMEMLIMIT's when the environment set them (named in
// runtime_env), not 0.
func TestBinaryStartingLineShowsRuntimeInEffect(t *testing.T) {
	for _, tc := range []struct{ gogc, memlimit, want string }{
		{"", "", `gc_percent=50 memory_limit=160MiB runtime_env=""`},
		{"80", "100MiB", `gc_percent=80 memory_limit=100MiB runtime_env="GOGC GOMEMLIMIT"`},
		{"off", "", `gc_percent=-1 memory_limit=160MiB runtime_env=GOGC`},
	} {
		t.Run(fmt.Sprintf("GOGC=%s GOMEMLIMIT=%s", tc.gogc, tc.memlimit), func(t *testing.T) {
			g := newHarness(t).NoMetrics()
			g.Cfg.Log = &logConf{Level: "info"}
			t.Setenv("GOGC", tc.gogc)
			t.Setenv("GOMEMLIMIT", tc.memlimit)
			g.Start()
			if !strings.Contains(g.Logs(), tc.want) {
				t.Fatalf("starting line lacks %s", tc.want)
			}
		})
	}
}

// TestBinaryIdleOnOneProcessor: the shipped binary runs its Go code on one
// processor while it is nearly idle (internal/procs: at sensor rates the
// second processor only adds thread wakeups), says so in its starting
// line, and leaves a GOMAXPROCS from the environment alone. The raise
// under load is internal/procs' TestGovernorFollowsRealLoad.
func TestBinaryIdleOnOneProcessor(t *testing.T) {
	governed := `procs=1..` // the range the Governor moves in
	// The binary decides from the runtime's own count (which follows a
	// cgroup quota), as this process's is with GOMAXPROCS unset.
	if os.Getenv("GOMAXPROCS") == "" && runtime.GOMAXPROCS(0) == 1 {
		governed = "procs=1\n" // nothing to govern (procs is the starting line's last attribute)
	}
	for _, tc := range []struct {
		env       string
		procs     float64
		logsProcs string
	}{
		{"", 1, governed},
		{"GOMAXPROCS=2", 2, `procs="2 (GOMAXPROCS)"`},
		{"GOMAXPROCS=abc", 1, governed}, // the runtime ignores it, so does the Governor
	} {
		t.Run(fmt.Sprintf("env=%q", tc.env), func(t *testing.T) {
			g := newHarness(t)
			g.Cfg.Log = &logConf{Level: "info"}
			t.Setenv("GOMAXPROCS", "")
			if tc.env != "" {
				k, v, _ := strings.Cut(tc.env, "=")
				t.Setenv(k, v)
			}
			g.Start()
			testutil.Eventually(t, 10*time.Second, fmt.Sprintf("go_sched_gomaxprocs_threads %v", tc.procs), func() bool {
				// A scrape costs the binary about 1 ms of CPU: scraping
				// every 5 ms would be the load that keeps it off one
				// processor.
				time.Sleep(200 * time.Millisecond)
				return g.Metric("go_sched_gomaxprocs_threads") == tc.procs
			})
			if !strings.Contains(g.Logs(), tc.logsProcs) {
				t.Fatalf("starting line without %s", tc.logsProcs)
			}
		})
	}
}
