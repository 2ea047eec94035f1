package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/edgegw/edgegw/internal/config"
)

const referenceConfig = "../../configs/edgegw.yaml"

// call runs realMain and returns its status, stdout and stderr.
func call(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := realMain(args, &out, &errb)
	return code, out.String(), errb.String()
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "edgegw.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// writePasswd writes a password file at path: a line user:bcrypt(password)
// for each user, password pair.
func writePasswd(t *testing.T, path string, userPassword ...string) string {
	t.Helper()
	var b strings.Builder
	for i := 0; i+1 < len(userPassword); i += 2 {
		h, err := bcrypt.GenerateFromPassword([]byte(userPassword[i+1]), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString(userPassword[i] + ":" + string(h) + "\n")
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestCheckConfig(t *testing.T) {
	t.Setenv(config.EnvConfig, "")
	bad := writeConfig(t, "listeners:\n  - name: lan\n    adress: 0.0.0.0:1883\nlimits:\n  max_inflight: 0\n")
	secret := writeConfig(t, `
bridges:
  - name: cloud
    addresses: [tcp://127.0.0.1:1884]
    username: u
    password: hunter2
    topics: [{pattern: "sensors/#"}]
`)
	tests := []struct {
		name        string
		args        []string
		env         map[string]string
		code        int
		stdout      []string // substrings
		stderr      []string
		notInOutput string
	}{
		{name: "reference config", args: []string{"--config", referenceConfig}, code: 0,
			stdout: []string{"# edgegw effective configuration", "listeners:", "name: lan", "max_packet_size: 1MiB"}},
		{name: "double-dash flag form", args: []string{"-config=" + referenceConfig}, code: 0, stdout: []string{"name: web"}},
		{name: "defaults", code: 0, stdout: []string{"built-in defaults", "address: 127.0.0.1:1883"}},
		{name: "EDGEGW_CONFIG", env: map[string]string{config.EnvConfig: referenceConfig}, code: 0, stdout: []string{"name: lan"}},
		{name: "env override shown", env: map[string]string{"EDGEGW_LIMITS_MAX_INFLIGHT": "7"}, code: 0, stdout: []string{"max_inflight: 7"}},
		{name: "bad key", args: []string{"--config", bad}, code: 2,
			stderr: []string{
				bad + `: listeners[0]: unknown key "adress" (did you mean "address"?)`,
				bad + `: limits.max_inflight: must be in 1..65535 (got 0)`,
				"invalid configuration: 2 problem(s)",
			}},
		{name: "missing file", args: []string{"--config", "/nonexistent/edgegw.yaml"}, code: 2, stderr: []string{"/nonexistent/edgegw.yaml: cannot read config file"}},
		{name: "password redacted", args: []string{"--config", secret}, code: 0, stdout: []string{"password: <redacted>"}, notInOutput: "hunter2"},
		{name: "stray argument", args: []string{"extra"}, code: 2, stderr: []string{`unexpected argument "extra"`}},
		{name: "unknown flag", args: []string{"--conf", "x"}, code: 2, stderr: []string{"flag provided but not defined"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			code, out, errOut := call(t, append([]string{"check-config"}, tt.args...)...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.code, out, errOut)
			}
			for _, s := range tt.stdout {
				if !strings.Contains(out, s) {
					t.Errorf("stdout lacks %q:\n%s", s, out)
				}
			}
			for _, s := range tt.stderr {
				if !strings.Contains(errOut, s) {
					t.Errorf("stderr lacks %q:\n%s", s, errOut)
				}
			}
			if tt.notInOutput != "" && strings.Contains(out+errOut, tt.notInOutput) {
				t.Errorf("output contains %q", tt.notInOutput)
			}
			if tt.code != 0 && out != "" {
				t.Errorf("failed check-config printed to stdout:\n%s", out)
			}
		})
	}
}

// TestCheckConfigWarnsAnonymousNetworkListener holds docs/install.md's "A
// listener off loopback that still accepts anonymous clients is reported by
// check-config (`warning: ...`)" and docs/config.md's auth section: one
// warning per tcp or websocket listener bound off loopback while
// allow_anonymous is true, none for a loopback one, none once anonymous
// access is off; a warning does not fail the check (exit 0). The gateway's
// WARN at start is TestRunWarnsAnonymousNetworkListener.
func TestCheckConfigWarnsAnonymousNetworkListener(t *testing.T) {
	t.Setenv(config.EnvConfig, "")
	t.Setenv("JOURNAL_STREAM", "")
	listeners := `
listeners:
  - {name: lan, address: "0.0.0.0:1883"}
  - {name: web, type: websocket, address: ":8083"}
  - {name: local, address: "127.0.0.1:1884"}
`
	open := writeConfig(t, listeners)
	code, out, errOut := call(t, "check-config", "--config", open)
	if code != exitOK || !strings.Contains(out, "name: lan") {
		t.Fatalf("check-config of an anonymous LAN listener: exit %d, want 0 with the effective config\n%s", code, errOut)
	}
	for _, want := range []string{
		"warning: " + open + `: listeners[0]: listener "lan" on 0.0.0.0:1883 accepts ANONYMOUS clients from the network`,
		"warning: " + open + `: listeners[1]: listener "web" on :8083 accepts ANONYMOUS clients from the network`,
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks\n%s\n%s", want, errOut)
		}
	}
	if n := strings.Count(errOut, "ANONYMOUS"); n != 2 {
		t.Errorf("%d anonymous warnings, want 2 (none for the loopback listener):\n%s", n, errOut)
	}

	// install.md's way to serve the LAN: a password file, anonymous off.
	passwd := writePasswd(t, filepath.Join(t.TempDir(), "passwd"), "sensor1", "pw")
	closed := writeConfig(t, listeners+"auth: {allow_anonymous: false, password_file: "+passwd+"}\n")
	code, _, errOut = call(t, "check-config", "--config", closed)
	if code != exitOK || strings.Contains(errOut, "ANONYMOUS") {
		t.Errorf("check-config with allow_anonymous: false: exit %d, stderr:\n%s", code, errOut)
	}
}

func TestCommands(t *testing.T) {
	code, out, _ := call(t, "version")
	if code != 0 || !strings.HasPrefix(out, "edgegw dev commit ") || !strings.Contains(out, runtime.Version()) {
		t.Errorf("version: %d %q", code, out)
	}
	for _, args := range [][]string{{"help"}, {"--help"}, {"-h"}} {
		code, out, _ := call(t, args...)
		if code != 0 || !strings.Contains(out, "check-config") || !strings.Contains(out, "version") {
			t.Errorf("%v: %d %q", args, code, out)
		}
	}
	for _, args := range [][]string{{"--version"}, {"-v"}, {"-version"}} {
		code, vout, errOut := call(t, args...)
		if code != 0 || vout != out || errOut != "" {
			t.Errorf("%v: %d %q %q, want what version prints", args, code, vout, errOut)
		}
	}
	code, _, errOut := call(t, "frobnicate")
	if code != 2 || !strings.Contains(errOut, `unknown command "frobnicate"`) {
		t.Errorf("unknown command: %d %q", code, errOut)
	}
	// Run mode with an invalid config reports it and exits 2 before binding anything.
	bad := writeConfig(t, "log: {level: loud}\n")
	code, _, errOut = call(t, "--config", bad)
	if code != 2 || !strings.Contains(errOut, `log.level: invalid value "loud"`) {
		t.Errorf("run with bad config: %d %q", code, errOut)
	}
}

// TestSubcommandHelp: -h and --help on every subcommand print its help on
// stdout and exit 0; `help NAME` prints the same; a bad flag prints the
// error and the help on stderr and exits 2 (issue 15, point 6).
func TestSubcommandHelp(t *testing.T) {
	for _, c := range commands {
		for _, flag := range []string{"-h", "--help"} {
			code, out, errOut := call(t, c.name, flag)
			if code != 0 || errOut != "" || !strings.HasPrefix(out, "Usage: edgegw "+c.name) {
				t.Errorf("%s %s: exit %d, stdout %q, stderr %q", c.name, flag, code, out, errOut)
			}
			if c.name == "help" {
				continue
			}
			code, hout, _ := call(t, "help", c.name)
			if code != 0 || hout != out {
				t.Errorf("help %s: exit %d, output differs from %s %s:\n%s", c.name, code, c.name, flag, hout)
			}
		}
	}
	for _, name := range []string{"run", "check-config"} {
		_, out, _ := call(t, name, "--help")
		if !strings.Contains(out, "-config FILE") {
			t.Errorf("%s --help does not list --config:\n%s", name, out)
		}
	}
	_, out, _ := call(t, "passwd", "--help")
	if !strings.Contains(out, "stdin") || !strings.Contains(out, "| edgegw passwd") {
		t.Errorf("passwd --help does not say the password can come from stdin:\n%s", out)
	}
	code, out, errOut := call(t, "run", "--bogus")
	if code != 2 || out != "" || !strings.Contains(errOut, "flag provided but not defined: -bogus") || !strings.Contains(errOut, "Usage: edgegw run") {
		t.Errorf("run --bogus: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, _, errOut = call(t, "help", "frobnicate")
	if code != 2 || !strings.Contains(errOut, `unknown command "frobnicate"`) {
		t.Errorf("help frobnicate: exit %d, stderr %q", code, errOut)
	}
}

// TestPlatform: ARM builds name their GOARM; the setting's key is the one
// `go build` records (scripts/test-arm.sh checks real ARMv6/v7 builds
// under qemu).
func TestPlatform(t *testing.T) {
	set := []debug.BuildSetting{{Key: "GOARCH", Value: "arm"}, {Key: "GOARM", Value: "6"}, {Key: "GOOS", Value: "linux"}}
	if got := goarmSuffix(set); got != " (GOARM=6)" {
		t.Errorf("goarmSuffix = %q", got)
	}
	if got := goarmSuffix(set[:1]); got != "" {
		t.Errorf("goarmSuffix without GOARM = %q", got)
	}
	if runtime.GOARCH != "arm" && platform() != runtime.GOOS+"/"+runtime.GOARCH {
		t.Errorf("platform = %q", platform())
	}
}

func TestNewLogger(t *testing.T) {
	var buf bytes.Buffer
	newLogger(config.Log{Level: "warn", Format: "json"}, &buf).Info("hidden")
	newLogger(config.Log{Level: "warn", Format: "json"}, &buf).Warn("shown", "k", 1)
	if s := buf.String(); strings.Contains(s, "hidden") || !strings.Contains(s, `"msg":"shown"`) {
		t.Errorf("json/warn logger wrote %q", s)
	}
	buf.Reset()
	newLogger(config.Log{Level: "debug", Format: "text"}, &buf).Debug("dbg")
	if s := buf.String(); !strings.Contains(s, "level=DEBUG msg=dbg") {
		t.Errorf("text/debug logger wrote %q", s)
	}
}

// TestRun checks the contract of run: it binds the tcp listeners and
// returns nil when ctx is cancelled.
func TestRun(t *testing.T) {
	cfg := config.Default()
	cfg.Listeners[0].Address = "127.0.0.1:0"
	cfg.Metrics.Address = ""
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after cancel")
	}
}
