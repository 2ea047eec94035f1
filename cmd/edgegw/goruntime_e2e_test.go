package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/edgegw/edgegw/internal/testutil"
)

// TestBinaryStartingLineShowsRuntimeInEffect: the starting line shows the
// GC percent and memory limit in effect (docs/config.md): the config's, or
// GOGC's and GOMEMLIMIT's when the environment set them (named in
// runtime_env), not 0.
func TestBinaryStartingLineShowsRuntimeInEffect(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildEdgegw(t)
	for _, tc := range []struct{ gogc, memlimit, want string }{
		{"", "", `gc_percent=50 memory_limit=160MiB runtime_env=""`},
		{"80", "100MiB", `gc_percent=80 memory_limit=100MiB runtime_env="GOGC GOMEMLIMIT"`},
		{"off", "", `gc_percent=-1 memory_limit=160MiB runtime_env=GOGC`},
	} {
		t.Run(fmt.Sprintf("GOGC=%s GOMEMLIMIT=%s", tc.gogc, tc.memlimit), func(t *testing.T) {
			addr := freePort(t)
			cfg := writeConfig(t, fmt.Sprintf("log: {level: info}\nlisteners:\n  - {name: lan, type: tcp, address: %q}\nmetrics: {address: \"\"}\n", addr))
			t.Setenv("GOGC", tc.gogc)
			t.Setenv("GOMEMLIMIT", tc.memlimit)
			g := startEdgegw(t, bin, "--config", cfg)
			testutil.Eventually(t, 10*time.Second, "the starting line", func() bool { return strings.Contains(g.logs(), "msg=starting") })
			if !strings.Contains(g.logs(), tc.want) {
				t.Fatalf("starting line lacks %s:\n%s", tc.want, g.logs())
			}
		})
	}
}
