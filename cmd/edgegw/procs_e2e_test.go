package main

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/edgegw/edgegw/internal/testutil"
)

// TestBinaryIdleOnOneProcessor: the shipped binary runs its Go code on one
// processor while it is nearly idle (internal/procs: at sensor rates the
// second processor only adds thread wakeups), says so in its starting
// line, and leaves a GOMAXPROCS from the environment alone. The raise
// under load is internal/procs' TestGovernorFollowsRealLoad.
func TestBinaryIdleOnOneProcessor(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildEdgegw(t)
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
			addr, maddr := freePort(t), freePort(t)
			cfg := writeConfig(t, fmt.Sprintf(`
log: {level: info}
listeners:
  - {name: lan, type: tcp, address: "%s"}
metrics: {address: "%s"}
`, addr, maddr))
			t.Setenv("GOMAXPROCS", "")
			if tc.env != "" {
				k, v, _ := strings.Cut(tc.env, "=")
				t.Setenv(k, v)
			}
			g := startEdgegw(t, bin, "--config", cfg)
			waitListening(t, addr)
			testutil.Eventually(t, 10*time.Second, fmt.Sprintf("go_sched_gomaxprocs_threads %v", tc.procs), func() bool {
				// A scrape costs the binary about 1 ms of CPU: scraping
				// every 5 ms would be the load that keeps it off one
				// processor.
				time.Sleep(200 * time.Millisecond)
				return metricValue(t, maddr, "go_sched_gomaxprocs_threads") == tc.procs
			})
			if !strings.Contains(g.logs(), tc.logsProcs) {
				t.Fatalf("starting line without %s:\n%s", tc.logsProcs, g.logs())
			}
		})
	}
}
