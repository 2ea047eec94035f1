package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestBinaryListenWithoutConfig: with no config file, --listen HOST:PORT
// and $EDGEGW_LISTEN move the built-in listener (README, docs/config.md),
// so a gateway starts beside a broker that holds 1883.
func TestBinaryListenWithoutConfig(t *testing.T) {
	for _, how := range []string{"flag", "env"} {
		t.Run(how, func(t *testing.T) {
			g := newHarness(t)
			g.Command = func(bin, _ string) *exec.Cmd {
				if how == "flag" {
					return exec.Command(bin, "--listen", g.Addr)
				}
				return exec.Command(bin)
			}
			g.Prepare = func(cmd *exec.Cmd, _ *os.File) {
				cmd.Env = append(os.Environ(), "EDGEGW_METRICS_ADDRESS="+g.Metrics)
				if how == "env" {
					cmd.Env = append(cmd.Env, "EDGEGW_LISTEN="+g.Addr)
				}
			}
			g.Start()
			// The listener logs its address as it starts serving, which
			// may come after "edgegw started".
			g.WaitLog("address=" + g.Addr)
			g.Mosq("mosquitto_pub", "-t", "hello", "-m", "x", "-r")
			if got := g.Mosq("mosquitto_sub", "-t", "hello", "-C", "1", "-W", "10"); strings.TrimSpace(got) != "x" {
				t.Errorf("retained message through %s: %q", g.Addr, got)
			}
		})
	}
}

// TestListenFlagWinsOverEnv: with both, --listen is the address, and
// check-config says where EDGEGW_LISTEN came from.
func TestListenFlagWinsOverEnv(t *testing.T) {
	t.Setenv("EDGEGW_LISTEN", "127.0.0.1:1999")
	code, out, errOut := call(t, "check-config", "--env-file=", "--listen", "127.0.0.1:1884")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "address: 127.0.0.1:1884\n") || strings.Contains(out, "1999") || !strings.Contains(out, "EDGEGW_LISTEN (--listen)") {
		t.Errorf("check-config:\n%s", out)
	}
}
