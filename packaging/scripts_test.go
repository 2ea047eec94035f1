package packaging_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// stubbed are the commands the maintainer scripts may run. Each stub logs
// its command line; a few answer as the case says.
var stubbed = []string{
	"systemd-sysusers", "getent", "groupadd", "useradd", "dpkg-statoverride",
	"chown", "chmod", "deb-systemd-helper", "deb-systemd-invoke", "systemctl",
}

type scriptEnv struct {
	root    string // DPKG_ROOT
	log     string
	stubDir string
}

// newScriptEnv makes a throwaway root and a PATH of stubs plus the few
// real tools the scripts use on files under $DPKG_ROOT (mkdir, rm).
// sysusers: whether systemd-sysusers exists; systemd: whether systemd runs;
// wasEnabled: deb-systemd-helper was-enabled's answer; override: whether
// dpkg-statoverride lists the path.
func newScriptEnv(t *testing.T, sysusers, systemd, wasEnabled, override bool) *scriptEnv {
	t.Helper()
	dir := t.TempDir()
	e := &scriptEnv{root: filepath.Join(dir, "root"), log: filepath.Join(dir, "log"), stubDir: filepath.Join(dir, "bin")}
	for _, d := range []string{e.stubDir, e.root + "/etc/edgegw", e.root + "/etc/default", e.root + "/var/lib/edgegw"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(e.root+"/etc/edgegw/edgegw.yaml", []byte("log: {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.root+"/etc/default/edgegw", []byte("EDGEGW_PERSISTENCE_DIR=/var/lib/edgegw\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if systemd {
		if err := os.MkdirAll(e.root+"/run/systemd/system", 0o755); err != nil {
			t.Fatal(err)
		}
	}
	status := map[string]string{
		"getent":            "2", // no edgegw user or group yet
		"dpkg-statoverride": map[bool]string{true: "0", false: "1"}[override],
	}
	for _, name := range stubbed {
		if name == "systemd-sysusers" && !sysusers {
			continue
		}
		body := "#!/bin/sh\necho \"" + name + " $*\" >>'" + e.log + "'\n"
		if name == "deb-systemd-helper" && !wasEnabled {
			body += "[ \"$2\" = was-enabled ] && exit 1\n"
		}
		body += "exit " + map[bool]string{true: status[name], false: "0"}[status[name] != ""] + "\n"
		if err := os.WriteFile(filepath.Join(e.stubDir, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, real := range []string{"mkdir", "rm"} {
		p, err := exec.LookPath(real)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(p, filepath.Join(e.stubDir, real)); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// run runs packaging/scripts/<script> with args and returns the logged
// command lines.
func (e *scriptEnv) run(t *testing.T, script string, args ...string) []string {
	t.Helper()
	abs, err := filepath.Abs(filepath.Join("scripts", script))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/bin/sh", append([]string{"-eu", abs}, args...)...)
	cmd.Env = []string{"PATH=" + e.stubDir, "DPKG_ROOT=" + e.root}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", script, args, err, out)
	}
	b, err := os.ReadFile(e.log)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

func TestMaintainerScripts(t *testing.T) {
	root := func(e *scriptEnv, p string) string { return e.root + p }
	tests := []struct {
		name                                 string
		script                               string
		args                                 []string
		sysusers, systemd, enabled, override bool
		want, notWant                        []string // logged command lines (substrings of the log)
		gone                                 []string // paths under the root that must not exist after
	}{
		{
			name: "first install enables but does not start", script: "postinst", args: []string{"configure", ""},
			sysusers: true, systemd: true, enabled: true,
			want: []string{"systemd-sysusers --root=ROOT edgegw.conf", "chown edgegw:edgegw ROOT/var/lib/edgegw",
				"chmod 0750 ROOT/var/lib/edgegw", "chown root:edgegw ROOT/etc/edgegw/edgegw.yaml",
				"chmod 0640 ROOT/etc/edgegw/edgegw.yaml", "chown root:edgegw ROOT/etc/default/edgegw",
				"chmod 0640 ROOT/etc/default/edgegw", "deb-systemd-helper unmask edgegw.service",
				"deb-systemd-helper enable edgegw.service", "systemctl --system daemon-reload"},
			notWant: []string{"deb-systemd-invoke", "systemctl start", "useradd"},
		},
		{
			name: "upgrade restarts a running service", script: "postinst", args: []string{"configure", "0.0.1-1"},
			sysusers: true, systemd: true, enabled: true,
			want:    []string{"deb-systemd-helper enable edgegw.service", "deb-systemd-invoke try-restart edgegw.service"},
			notWant: []string{"deb-systemd-invoke start", "deb-systemd-invoke restart"},
		},
		{
			name: "upgrade keeps a disabled service disabled", script: "postinst", args: []string{"configure", "0.0.1-1"},
			sysusers: true, systemd: true, enabled: false,
			want:    []string{"deb-systemd-helper update-state edgegw.service", "deb-systemd-invoke try-restart edgegw.service"},
			notWant: []string{"deb-systemd-helper enable"},
		},
		{
			name: "no systemd running: chroot or image build", script: "postinst", args: []string{"configure", ""},
			sysusers: true, systemd: false, enabled: true,
			want:    []string{"deb-systemd-helper enable edgegw.service"},
			notWant: []string{"systemctl", "deb-systemd-invoke"},
		},
		{
			name: "without systemd-sysusers the user is made by hand", script: "postinst", args: []string{"configure", ""},
			sysusers: false, systemd: false, enabled: true,
			want: []string{"groupadd --system edgegw", "useradd --system --gid edgegw --home-dir /var/lib/edgegw"},
		},
		{
			name: "a statoverride wins", script: "postinst", args: []string{"configure", ""},
			sysusers: true, systemd: true, enabled: true, override: true,
			notWant: []string{"chown", "chmod"},
		},
		{
			name: "remove stops the service", script: "prerm", args: []string{"remove"},
			systemd: true,
			want:    []string{"deb-systemd-invoke stop edgegw.service"},
		},
		{
			name: "upgrade does not stop the service in prerm", script: "prerm", args: []string{"upgrade", "0.0.2-1"},
			systemd: true,
			notWant: []string{"deb-systemd-invoke"},
		},
		{
			name: "remove keeps state and config", script: "postrm", args: []string{"remove"},
			systemd: true,
			want:    []string{"deb-systemd-helper mask edgegw.service"},
			notWant: []string{"purge"},
		},
		{
			name: "purge deletes state and config", script: "postrm", args: []string{"purge"},
			systemd: true,
			want:    []string{"deb-systemd-helper purge edgegw.service", "deb-systemd-helper unmask edgegw.service"},
			gone:    []string{"/var/lib/edgegw", "/etc/edgegw"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newScriptEnv(t, tt.sysusers, tt.systemd, tt.enabled, tt.override)
			log := strings.Join(e.run(t, tt.script, tt.args...), "\n")
			log = strings.ReplaceAll(log, e.root, "ROOT")
			for _, w := range tt.want {
				if !strings.Contains(log, w) {
					t.Errorf("missing %q in:\n%s", w, log)
				}
			}
			for _, w := range tt.notWant {
				if strings.Contains(log, w) {
					t.Errorf("unexpected %q in:\n%s", w, log)
				}
			}
			for _, p := range tt.gone {
				if _, err := os.Stat(root(e, p)); !os.IsNotExist(err) {
					t.Errorf("%s still exists after %s %v", p, tt.script, tt.args)
				}
			}
			if tt.script == "postinst" && tt.args[0] == "configure" {
				if fi, err := os.Stat(root(e, "/var/lib/edgegw")); err != nil || !fi.IsDir() {
					t.Errorf("/var/lib/edgegw not created: %v", err)
				}
			}
		})
	}
}
