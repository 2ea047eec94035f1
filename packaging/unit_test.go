package packaging_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

const unitPath = "../systemd/edgegw.service"

// maxExposure bounds `systemd-analyze security` for the unit (0 = locked
// down, 10 = unrestricted). Measured 1.6 with systemd 252; the network
// access a broker needs accounts for most of it.
const maxExposure = 2.5

// parseUnit returns section -> key -> values in file order. The unit has
// no continuation lines; a trailing backslash is a test failure so this
// parser never silently misreads one.
func parseUnit(t *testing.T, path string) map[string]map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	unit := map[string]map[string][]string{}
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case strings.HasSuffix(line, `\`):
			t.Fatalf("%s:%d: continuation lines are not supported by this test", path, n)
		case line[0] == '[':
			section = strings.Trim(line, "[]")
			unit[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s:%d: not a key=value line in a section: %q", path, n, line)
			}
			unit[section][k] = append(unit[section][k], v)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return unit
}

func TestUnitDirectives(t *testing.T) {
	unit := parseUnit(t, unitPath)
	tests := []struct {
		section, key, want string
	}{
		{"Unit", "After", "network-online.target"},
		{"Unit", "StartLimitIntervalSec", "300"},
		{"Unit", "StartLimitBurst", "10"},
		{"Service", "Type", "notify"},
		{"Service", "NotifyAccess", "main"},
		{"Service", "WatchdogSec", "30s"},
		{"Service", "ExecStart", "/usr/bin/edgegw --config /etc/edgegw/edgegw.yaml"},
		{"Service", "ExecReload", "/bin/kill -HUP $MAINPID"},
		{"Service", "Restart", "on-failure"},
		{"Service", "RestartSec", "2s"},
		{"Service", "RestartPreventExitStatus", "2"},
		{"Service", "TimeoutStopSec", "90s"},
		{"Service", "User", "edgegw"},
		{"Service", "Group", "edgegw"},
		{"Service", "SupplementaryGroups", "dialout"},
		{"Service", "StateDirectory", "edgegw"},
		{"Service", "ConfigurationDirectory", "edgegw"},
		// EDGEGW_PERSISTENCE_DIR and the admin's variables are in the
		// environment file (TestEnvironmentFile).
		{"Service", "EnvironmentFile", "/etc/default/edgegw"},
		// A crash dies by SIGABRT, restarted (TestCrashIsRestarted), and
		// leaves no core file on the SD card (the unit's comment).
		{"Service", "Environment", "GOTRACEBACK=crash"},
		{"Service", "LimitCORE", "0"},
		{"Service", "LimitNOFILE", "65536"},
		{"Service", "NoNewPrivileges", "yes"},
		{"Service", "CapabilityBoundingSet", ""},
		{"Service", "AmbientCapabilities", ""},
		{"Service", "ProtectSystem", "strict"},
		{"Service", "ProtectHome", "yes"},
		{"Service", "PrivateTmp", "yes"},
		{"Service", "ProtectKernelTunables", "yes"},
		{"Service", "ProtectKernelModules", "yes"},
		{"Service", "ProtectControlGroups", "yes"},
		{"Service", "DevicePolicy", "closed"},
		{"Service", "DeviceAllow", "char-ttyUSB rw"},
		{"Service", "DeviceAllow", "char-ttyACM rw"},
		{"Service", "DeviceAllow", "char-ttyS rw"},
		{"Service", "DeviceAllow", "char-ttyAMA rw"},
		{"Service", "RestrictAddressFamilies", "AF_INET AF_INET6 AF_UNIX AF_NETLINK"},
		{"Service", "RestrictNamespaces", "yes"},
		{"Service", "LockPersonality", "yes"},
		{"Service", "MemoryDenyWriteExecute", "yes"},
		{"Service", "SystemCallArchitectures", "native"},
		{"Install", "WantedBy", "multi-user.target"},
	}
	for _, tt := range tests {
		t.Run(tt.section+"/"+tt.key+"="+tt.want, func(t *testing.T) {
			got := unit[tt.section][tt.key]
			if !slices.Contains(got, tt.want) {
				t.Errorf("[%s] %s=%q missing; have %q", tt.section, tt.key, tt.want, got)
			}
		})
	}

	// Settings that would break the gateway or weaken the sandbox.
	for _, bad := range []string{"PrivateDevices", "DynamicUser", "MemoryMax"} {
		if v, ok := unit["Service"][bad]; ok {
			t.Errorf("[Service] %s=%q must not be set (see the comments in the unit)", bad, v)
		}
	}
	// The MemoryMax suggestion stays in a comment.
	b, _ := os.ReadFile(unitPath)
	if !regexp.MustCompile(`(?m)^#\s*MemoryMax=`).Match(b) {
		t.Error("the commented MemoryMax= suggestion is gone")
	}
}

// verifyCopy writes the unit with /usr/bin/edgegw pointing at an
// executable stub: `systemd-analyze verify` only checks that each Exec
// binary exists and is executable, and this test must not depend on the
// package being installed. (make test-packaging verifies the real binary
// inside an unpacked .deb.)
func verifyCopy(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	stub := filepath.Join(dir, "edgegw")
	if err := os.WriteFile(stub, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(unitPath)
	if err != nil {
		t.Fatal(err)
	}
	unit := filepath.Join(dir, "edgegw.service")
	if err := os.WriteFile(unit, []byte(strings.ReplaceAll(string(b), "/usr/bin/edgegw", stub)), 0o644); err != nil {
		t.Fatal(err)
	}
	return unit
}

func systemdAnalyze(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatal("systemd-analyze not found: scripts/install-test-deps.sh installs systemd (make test-deps)")
	}
	return p
}

func TestUnitVerify(t *testing.T) {
	sa := systemdAnalyze(t)
	unit := verifyCopy(t)
	out, err := exec.Command(sa, "verify", unit).CombinedOutput()
	// verify exits 0 on warnings such as unknown keys; any output fails.
	if err != nil || len(out) > 0 {
		t.Fatalf("systemd-analyze verify %s: %v\n%s", unitPath, err, out)
	}
}

func TestUnitSecurity(t *testing.T) {
	sa := systemdAnalyze(t)
	unit := verifyCopy(t)
	out, err := exec.Command(sa, "security", "--offline=yes", "--no-pager", unit).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze security: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no exposure level in:\n%s", out)
	}
	score, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("exposure %.1f (bound %.1f)", score, maxExposure)
	if score > maxExposure {
		t.Errorf("systemd-analyze security: exposure %.1f > %.1f; a hardening setting was lost:\n%s", score, maxExposure, out)
	}
}

// TestEnvironmentFile: the service's environment is a file the package
// installs as a conffile at /etc/default/edgegw and the unit reads (not
// optional: without it the state would silently stay in memory), and
// check-config, given that file, prints the configuration the service runs
// with: the state in /var/lib/edgegw, and the variable that put it there.
func TestEnvironmentFile(t *testing.T) {
	unit := parseUnit(t, unitPath)
	if got := unit["Service"]["EnvironmentFile"]; !slices.Equal(got, []string{"/etc/default/edgegw"}) {
		t.Errorf("EnvironmentFile=%q, want exactly /etc/default/edgegw (no leading -: required)", got)
	}
	for _, e := range unit["Service"]["Environment"] {
		if strings.HasPrefix(e, "EDGEGW_") {
			t.Errorf("Environment=%s in the unit: EDGEGW_* settings belong in the environment file, which check-config reads", e)
		}
	}
	raw, err := os.ReadFile("nfpm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var pkg struct {
		Contents []struct{ Src, Dst, Type string } `yaml:"contents"`
	}
	if err := yaml.Unmarshal(raw, &pkg); err != nil {
		t.Fatal(err)
	}
	src := ""
	for _, c := range pkg.Contents {
		if c.Dst == "/etc/default/edgegw" {
			src = filepath.Join("..", c.Src)
			if c.Type != "config" {
				t.Errorf("/etc/default/edgegw is type %q, want config (a conffile)", c.Type)
			}
		}
	}
	if src == "" {
		t.Fatal("nfpm.yaml installs no /etc/default/edgegw")
	}

	bin := filepath.Join(t.TempDir(), "edgegw")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/edgegw").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "check-config", "--config", shippedConfig(t), "--env-file", src)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("check-config: %v\n%s", err, out)
	}
	var eff struct {
		Persistence struct{ Dir string } `yaml:"persistence"`
	}
	if err := yaml.Unmarshal(out, &eff); err != nil {
		t.Fatalf("check-config output: %v\n%s", err, out)
	}
	if eff.Persistence.Dir != "/var/lib/edgegw" {
		t.Errorf("check-config with the environment file: persistence.dir %q, want /var/lib/edgegw\n%s", eff.Persistence.Dir, out)
	}
	if want := "EDGEGW_PERSISTENCE_DIR (from " + src + ")"; !strings.Contains(string(out), want) {
		t.Errorf("check-config does not say %q:\n%s", want, out)
	}
}
