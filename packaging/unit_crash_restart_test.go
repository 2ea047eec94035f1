package packaging_test

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgegw/edgegw/internal/testutil"
)

// TestCrashIsRestarted holds docs/install.md's "The service is restarted 2 s
// after a crash, and systemd restarts it if it stops answering its
// watchdog for 30 s (the journal then holds a goroutine dump)" against the
// unit's RestartPreventExitStatus=, which stops systemd from restarting a
// process that exits with a listed status whatever the failure, a watchdog
// timeout included (systemd's service_shall_restart tests it first).
//
// The Go runtime ends a process with exit status 2 after an unrecovered
// panic or a fatal signal such as the watchdog's SIGABRT, the very status
// the unit reserves for "invalid configuration, do not retry". So this
// runs the real binary with the unit's Environment= lines, sends it the
// unit's WatchdogSignal= (systemd's default SIGABRT), and checks that it
// dies in a way the unit restarts, with the goroutine dump on stderr.
func TestCrashIsRestarted(t *testing.T) {
	unit := parseUnit(t, unitPath)
	svc := unit["Service"]
	if got := svc["Restart"]; !slices.Equal(got, []string{"on-failure"}) {
		t.Fatalf("Restart=%v, this test assumes on-failure", got)
	}
	sig := syscall.SIGABRT
	if ws := svc["WatchdogSignal"]; len(ws) > 0 {
		t.Fatalf("WatchdogSignal=%v: teach this test the signal", ws)
	}

	bin := filepath.Join(t.TempDir(), "edgegw")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/edgegw").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cfg := filepath.Join(t.TempDir(), "edgegw.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("listeners: [{name: lan, address: %q}]\nmetrics: {address: \"\"}\n", addr)), 0o600); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(bin, "--config", cfg)
	cmd.Env = []string{"PATH=/usr/bin:/bin"} // what systemd gives a service, plus the unit's lines
	for _, e := range svc["Environment"] {
		cmd.Env = append(cmd.Env, strings.Fields(e)...)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := false
	t.Cleanup(func() {
		if !waited {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	testutil.Eventually(t, 10*time.Second, "edgegw listening on "+addr, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	cmd.Process.Signal(sig)
	err = cmd.Wait()
	waited = true
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("edgegw after %v: %v, want it to die", sig, err)
	}
	ws := ee.Sys().(syscall.WaitStatus)
	var prevent []string
	for _, v := range svc["RestartPreventExitStatus"] {
		prevent = append(prevent, strings.Fields(v)...)
	}
	switch {
	case ws.Exited() && slices.Contains(prevent, strconv.Itoa(ws.ExitStatus())):
		t.Errorf("after the watchdog's %v edgegw exits with status %d, which the unit's RestartPreventExitStatus=%v keeps systemd from restarting (a panic exits the same way)",
			sig, ws.ExitStatus(), prevent)
	case ws.Signaled() && slices.Contains(prevent, ws.Signal().String()):
		t.Errorf("edgegw dies by %v, which RestartPreventExitStatus=%v lists", ws.Signal(), prevent)
	}
	if !strings.Contains(stderr.String(), "goroutine 1 ") {
		t.Errorf("no goroutine dump on stderr after %v:\n%.2000s", sig, stderr.String())
	}
}

// TestInvalidConfigIsNotRetried holds docs/install.md's "an invalid config
// ... keeps the service from starting, the journal lists every problem
// with its key, and systemd does not retry": the unit's main process
// exits with a status RestartPreventExitStatus lists, naming each problem.
// The check must be the main process's own: systemd looks only at the main
// process for RestartPreventExitStatus, so a failing ExecStartPre (the
// unit's first way) was retried every RestartSec until the start limit.
func TestInvalidConfigIsNotRetried(t *testing.T) {
	svc := parseUnit(t, unitPath)["Service"]
	if pre := svc["ExecStartPre"]; len(pre) > 0 {
		t.Fatalf("ExecStartPre=%v: its failure is retried whatever RestartPreventExitStatus says", pre)
	}
	bin := filepath.Join(t.TempDir(), "edgegw")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/edgegw").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cfg := filepath.Join(t.TempDir(), "edgegw.yaml")
	if err := os.WriteFile(cfg, []byte("limits: {max_inflight: 0, write_timeout: -1s}\nmetrics: {address: \"\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config", cfg)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	for _, e := range svc["Environment"] {
		cmd.Env = append(cmd.Env, strings.Fields(e)...)
	}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("edgegw with an invalid config: %v, want it to exit\n%s", err, out)
	}
	var prevent []string
	for _, v := range svc["RestartPreventExitStatus"] {
		prevent = append(prevent, strings.Fields(v)...)
	}
	if !slices.Contains(prevent, strconv.Itoa(ee.ExitCode())) {
		t.Errorf("exit status %d, which RestartPreventExitStatus=%v does not list: systemd would retry", ee.ExitCode(), prevent)
	}
	for _, key := range []string{"limits.max_inflight", "limits.write_timeout"} {
		if !strings.Contains(string(out), key) {
			t.Errorf("the problem with %s is not named:\n%s", key, out)
		}
	}
}
