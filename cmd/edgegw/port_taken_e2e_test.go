package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBinaryPortTakenExitsOne holds docs/install.md's "A port that another
// program holds is retried (exit status 1): that program may go away" (the
// unit's RestartPreventExitStatus=2 must not cover it), for a listener and
// for metrics.address, and docs/config.md's message for a taken metrics
// port, word for word.
func TestBinaryPortTakenExitsOne(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildEdgegw(t)
	held, err := net.Listen("tcp", freePort(t))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	taken := held.Addr().String()
	free := freePort(t)

	for _, tc := range []struct {
		name, config string
		want         []string
	}{
		{"listener", fmt.Sprintf("listeners: [{name: lan, address: %q}]\nmetrics: {address: \"\"}\n", taken),
			[]string{"listener lan: listen tcp " + taken + ": bind: address already in use"}},
		{"metrics", fmt.Sprintf("listeners: [{name: lan, address: %q}]\nmetrics: {address: %q}\n", free, taken),
			[]string{
				// docs/config.md, ### metrics, with the address in use.
				"metrics.address " + taken + ": listen tcp " + taken + ": bind: address already in use" +
					` (another program listens there, ss -ltnp shows which; change metrics.address in the config, or set it to \"\" to turn metrics off)`,
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := filepath.Join(t.TempDir(), "edgegw.yaml")
			if err := os.WriteFile(cfg, []byte(tc.config), 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(bin, "--config", cfg)
			out, err := cmd.CombinedOutput()
			if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != exitFailure {
				t.Fatalf("exit %v, want status 1 (systemd retries it):\n%s", err, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}
